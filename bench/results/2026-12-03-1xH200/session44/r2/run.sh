# s44 r2, one H200: r1's one failure was the test's own (its bad-value run asked 1 step against the spec's 10 warmup
# steps, a config error before the hook's check); now with warmup_steps 0. gpu_train, then every test.
# Predicted: every test passes (r1: 193 passed, that one failed).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev)
make -j16 GIT_REVISION=$R mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
MOKC_BIN=build/mokc timeout 240 build/mokc_tests gpu_train > $OUT/test-gpu_train.log 2>&1
echo "test gpu_train rc $? $(el): $(tail -1 $OUT/test-gpu_train.log)"; grep -E "FAIL|deferred" $OUT/test-gpu_train.log | head -8
MOKC_BIN=build/mokc timeout 400 build/mokc_tests > $OUT/test-all.log 2>&1
echo "every test rc $? $(el): $(tail -1 $OUT/test-all.log)"; grep -E "^FAIL|FAIL " $OUT/test-all.log | head -12
echo "total $(el)"
