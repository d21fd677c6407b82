# s45 r5, one H200, at 6129a0c (a review's mends: forced rows checked, the verdict one function, losses within 1e-3):
# the suites of mokc check (gpu_check: tiny x 3, mokc-small-1gpu at 2 and 4 layers; moe; model_check; cli).
# Predicted: all pass with r4's numbers (the same bits: the forced rows were valid), every loss and aux within 1e-3.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
for s in gpu_check moe model_check cli; do
  MOKC_BIN=build/mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "$s rc $? $(el): $(tail -1 $OUT/test-$s.log)"; grep -E "^FAIL|FAIL " $OUT/test-$s.log | head -5
done
grep -E "^ +(configs|expert|check passed)" $OUT/test-gpu_check.log | cut -c1-170
