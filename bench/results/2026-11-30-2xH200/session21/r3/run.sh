# s21 r3: scripts/bench.sh at HEAD + the run-record work (uncommitted parts: scripts/plot, tests/test_plots.c):
# the layer sweep (both shapes, both impls, EP1 and EP2), mokc-small EP2 for 100 steps with mok twice (bitwise
# losses) and unfused once, each writing a run record. Also the gpu_train suite (the step timer's marks).
# Predicted: mokc-small at seq 4096 ~ 30 % MFU (issue 11 asks 45 %); the two mok runs bitwise equal.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 all build/mokc_tests > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }; echo "built $(el)"
CUDA_VISIBLE_DEVICES=0 MOKC_BIN=build/mokc timeout 150 build/mokc_tests gpu_train > $OUT/test-gpu-train.log 2>&1
echo "tests gpu_train rc=$?: $(tail -1 $OUT/test-gpu-train.log) $(el)"; grep -E "FAIL" $OUT/test-gpu-train.log | head -6
STEPS=100 timeout 500 scripts/bench.sh /tmp/bench-sh 2>&1 | tee /tmp/bench-sh.out | tail -40
echo "bench.sh rc=${PIPESTATUS[0]} $(el)"
cp /tmp/bench-sh.out /tmp/bench-sh/logs/
tar -C /tmp -czf $OUT/bench-sh.tgz bench-sh
echo "total $(el)"
