# s12 r5: pb (the backward's dx pushes read row_slot_all directly, base from shared memory; the forward keeps the
# prefetch) against pp (6e469b9); then the mok suite and the EP2 check of pb.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/pp; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/pp && tar xf -)
(cd /tmp/pp && patch -s -R -p1 < $R/.deps/pb.diff && make -j14 mokc > build.log 2>&1 || { echo "build pp failed"; tail -20 build.log; }) &
make -j16 all build/mokc_tests > $OUT/build-pb.log 2>&1 || { echo "build pb failed"; exit 1; }
wait; echo "built $(el)"
for rep in 1 2 3; do for sh in kimi-k2-like qwen3-30b-a3b-like; do for v in . /tmp/pp; do
  [ $sh = qwen3-30b-a3b-like ] && [ $rep = 3 ] && continue
  tag=pp; [ $v = . ] && tag=pb
  timeout 40 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
MOKC_BIN=build/mokc timeout 60 build/mokc_tests mok > $OUT/test-mok-pb.log 2>&1; echo "tests mok pb rc=$?: $(tail -1 $OUT/test-mok-pb.log) $(el)"
TIMING=0 timeout 110 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check-pb.log 2>&1; echo "ep2 pb rc=$?: $(tail -1 $OUT/ep2-check-pb.log) $(el)"
