# s12 r4: repeat of r3's A/B (3edbb59 against 6e469b9, the push slots' prefetch): is the Kimi-like backward's +0.05 ms real?
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/base; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < $R/.deps/pp.diff && make -j14 mokc > build.log 2>&1 || { echo "build base failed"; tail -20 build.log; }) &
make -j16 mokc > $OUT/build-pp.log 2>&1 || { echo "build pp failed"; exit 1; }
wait; echo "built $(el)"
for rep in 1 2 3; do for sh in kimi-k2-like qwen3-30b-a3b-like; do for v in . /tmp/base; do
  [ $sh = qwen3-30b-a3b-like ] && [ $rep = 3 ] && continue
  tag=base; [ $v = . ] && tag=pp
  timeout 40 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
