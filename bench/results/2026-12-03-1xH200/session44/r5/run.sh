# s44 r5, one H200, at the final read's mend (gpu_adamw takes an AdamWTensor; its launch through by_state_form and
# masters_of; the same SASS in every AdamW kernel by cuobjdump): the suites that run AdamW, then every test.
# Predicted: all pass, as r1-r3.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
MOKC_BIN=build/mokc timeout 400 build/mokc_tests > $OUT/test-all.log 2>&1
echo "every test rc $? $(el): $(tail -1 $OUT/test-all.log)"; grep -E "^FAIL|FAIL |gpu_adamw|deferred" $OUT/test-all.log | head -12
