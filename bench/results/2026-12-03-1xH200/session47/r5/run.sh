# s47 r5, one H200: cli.bench_record_on_a_full_disk again: r4 found the header and the first result whole in the 1 KiB
# cap (the test had required the header alone); it now requires whole lines, each a JSON object. Predicted: 12 of 12.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
MOKC_BIN=build/mokc timeout 200 build/mokc_tests cli > $OUT/test-cli.log 2>&1
echo "cli rc $? $(el): $(tail -1 $OUT/test-cli.log)"; grep -E "FAIL|^skip" $OUT/test-cli.log | head -5
