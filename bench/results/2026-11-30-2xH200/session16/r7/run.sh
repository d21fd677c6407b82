# s16 r7: HEAD dbad75d (r6's zeroing, kept) on the EP2 check and the gpu_train suite (the full check ran at 5641f6e;
# the device time left does not hold another).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 all build/mokc_tests > $OUT/build.log 2>&1 || { echo "build failed"; tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
TIMING=0 timeout 120 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1
echo "ep2 check rc=$?: $(tail -1 $OUT/ep2-check.log) $(el)"; grep -E "FAIL" $OUT/ep2-check.log | head -6
timeout 80 build/mokc_tests gpu_train > $OUT/test-gpu_train.log 2>&1
echo "tests gpu_train rc=$?: $(tail -1 $OUT/test-gpu_train.log) $(el)"; grep -E "FAIL" $OUT/test-gpu_train.log | head -6
