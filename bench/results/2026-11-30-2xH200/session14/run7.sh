# s14 r7: this rank's expert counts by one histogram block (gpu_moe_plan_histogram) instead of the local plan's
# count and scan (whose slot ranks and offsets the megakernel never read). new = working tree, base = ba08c66 (HEAD).
# Predicted: mok suite (test_mok_histogram new) and EP2 check pass; forward routing phase Qwen-like 0.087 -> ~0.070 ms,
# Kimi-like 0.102 -> ~0.087 (plan count + scan 19 / 17 us at 1980 MHz, x1.3 at the throttled clock, less ~4 us).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/base; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < $R/.deps/r.diff && make -j12 mokc > $OUT/build-base.log 2>&1 || echo "build base failed") &
make -j16 all build/mokc_tests > $OUT/build-new.log 2>&1 || { echo "build new failed"; tail -20 $OUT/build-new.log; exit 1; }
wait; [ -x /tmp/base/mokc ] || exit 1; echo "built $(el)"
CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc_tests mok > $OUT/test-mok.log 2>&1
echo "tests mok rc=$?: $(tail -1 $OUT/test-mok.log) $(el)"; grep -E "FAIL" $OUT/test-mok.log | head -8
TIMING=0 timeout 200 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1
echo "ep2 check rc=$?: $(tail -1 $OUT/ep2-check.log) $(el)"; grep -E "FAIL" $OUT/ep2-check.log | head -8
for rep in 1 2; do for sh in qwen3-30b-a3b-like kimi-k2-like; do for v in /tmp/base .; do tag=new; [ $v = . ] || tag=base
  timeout 90 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1 || { echo "bench $sh $tag failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_route_ms[^,]*' /tmp/b.log) $(el)"
done; done; done
echo "total $(el)"
