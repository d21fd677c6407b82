# s12 r3: A/B of HEAD (3edbb59) and pp (each push task's row slots fetched by cp.async midway through its main loop),
# traces of both on the Kimi-like shape, then the full gpu-check of pp.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/base; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < $R/.deps/pp.diff && make -j12 mokc > build.log 2>&1 || { echo "build base failed"; tail -20 build.log; }) &
make -j20 all build/mokc_tests > $OUT/build-pp.log 2>&1 || { echo "build pp failed"; grep -B2 -A10 error $OUT/build-pp.log | head -30; exit 1; }
wait; echo "built $(el)"
for rep in 1 2; do for sh in qwen3-30b-a3b-like kimi-k2-like; do for v in /tmp/base .; do
  tag=base; [ $v = . ] && tag=pp
  timeout 40 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
for v in /tmp/base .; do tag=base; [ $v = . ] && tag=pp
  MOKC_MOK_TRACE=1 timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --iters 5 > $OUT/trace-kimi-$tag.log 2>&1
  echo "$tag: $(grep -m1 -E '^  down ' $OUT/trace-kimi-$tag.log | cut -c1-120) | $(grep -m1 -E '^  dx ' $OUT/trace-kimi-$tag.log | cut -c1-120)"; done
echo "A/B done $(el)"
(export OUT=/tmp/gc; timeout 420 bash scripts/gpu-check.sh > /tmp/gc.out 2>&1; echo "gpu-check rc=$?"; grep -E "FAIL" /tmp/gc.out | head; sed -n '/== gpu-check summary/,/^shape /p' /tmp/gc.out | grep -v "^shape")
mkdir -p $OUT/gc; cp /tmp/gc/*.jsonl /tmp/gc/*.log /tmp/gc/train-small.out $OUT/gc/ 2>/dev/null; rm -f $OUT/gc/build.log
sed -n '/^shape /,$p' /tmp/gc.out | head -6; echo "total $(el)"
