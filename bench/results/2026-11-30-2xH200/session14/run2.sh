# s14 r2: the parallel M-tile schedule, CUDA-graph capture (test_mok_graph; the EP2 check's backward second run
# replayed from a graph) and graph timings in bench moe. new = working tree, base = HEAD (the tree minus .deps/r.diff).
# Predicted: mok suite passes (schedule, graph), EP2 check passes; schedule phase Kimi-like 0.054 -> ~0.036 ms,
# Qwen-like 0.040 -> ~0.034; graph replay: fwd -0.02..-0.04 ms, fwd+bwd -0.04..-0.08 ms on both shapes.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/base; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < $R/.deps/r.diff && make -j12 mokc > $OUT/build-base.log 2>&1 || echo "build base failed") &
make -j16 all build/mokc_tests > $OUT/build-new.log 2>&1 || { echo "build new failed"; tail -20 $OUT/build-new.log; exit 1; }
wait; [ -x /tmp/base/mokc ] || exit 1; echo "built $(el)"
CUDA_VISIBLE_DEVICES=0 timeout 300 build/mokc_tests mok > $OUT/test-mok.log 2>&1
echo "tests mok rc=$?: $(tail -1 $OUT/test-mok.log) $(el)"; grep -E "^(FAIL|fail)|FAIL" $OUT/test-mok.log | head -8
TIMING=0 timeout 240 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1
echo "ep2 check rc=$?: $(tail -1 $OUT/ep2-check.log) $(el)"; grep -E "FAIL|graph" $OUT/ep2-check.log | head -8
for rep in 1 2; do for sh in qwen3-30b-a3b-like kimi-k2-like; do for v in /tmp/base .; do tag=new; [ $v = . ] || tag=base
  timeout 90 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1 || { echo "bench $sh $tag failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*_ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_schedule_ms[^,]*\|"fwd_route_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
echo "total $(el)"
