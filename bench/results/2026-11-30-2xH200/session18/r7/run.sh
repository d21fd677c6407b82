# s18 r7: at 1db4bfb (the consumers' task loop as one helper), what r6 did not run of the full check that uses the
# megakernels: the gpu_train suite, the fallback without NVLink peers, the EP2 check. Expected: all pass.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 all build/mokc_tests > $OUT/build.log 2>&1 || { echo "build failed"; tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
CUDA_VISIBLE_DEVICES=0 timeout 60 build/mokc_tests gpu_train > $OUT/test-gpu_train.log 2>&1
echo "tests gpu_train rc=$?: $(tail -1 $OUT/test-gpu_train.log) $(el)"
timeout 40 scripts/gpu-lsa-fallback-check.sh > $OUT/lsa-fallback-check.log 2>&1; echo "fallback rc=$? $(tail -1 $OUT/lsa-fallback-check.log) $(el)"
TIMING=0 timeout 120 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1; echo "ep2 rc=$? $(tail -1 $OUT/ep2-check.log) $(el)"
