# s30 r3: every test (CPU and GPU suites) on one H200 at HEAD (the code of 568062a, whose plan-table test change had not run on a GPU).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) all build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
MOKC_BIN=build/mokc timeout 330 build/mokc_tests > $OUT/tests.log 2>&1; echo "tests rc=$?: $(tail -1 $OUT/tests.log) $(el)"
grep -E "^FAIL|FAIL " $OUT/tests.log | head -20
