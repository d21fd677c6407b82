# s28 r6: the suites the session's changes touch, at HEAD, on two GPUs (gpu_train's ep = 2 and dp = 2 runs, the
# gradient norm against the CPU; gpu_model; gpu_rmsnorm).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }
echo "built $(el)"
for s in gpu_rmsnorm gpu_model gpu_train; do
  MOKC_BIN=./mokc timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"
  grep -E "FAIL|worst relative" $OUT/test-$s.log | head -14
done
echo "total $(el)"
