# s10 call 6 (nvidia-h200-x2): the buffer-list and communicator-check hygiene (host code only): the layers' suites
# on 1 and 2 GPUs (mok, gpu_moe_unfused, gpu_train with its EP2 runs).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }; echo "built $(el)"
for s in mok gpu_moe_unfused gpu_train; do
MOKC_BIN=build/mokc timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -E "^FAIL" -A3 $OUT/test-$s.log | head; done
