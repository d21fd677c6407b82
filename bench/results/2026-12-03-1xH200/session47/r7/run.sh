# s47 r7, one H200: the final read's test refactors on a GPU: TEST_MPIRUN in gpu_train's rank-without-GPU case,
# test_cli's have_gpu() in the bench full-disk case, test_ckpt's diverged-replica helpers. Predicted: all pass.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
for s in cli gpu_train.test_gpu_rank_without_gpu_stops_all ckpt.mpi_diverged threads; do
  MOKC_BIN=build/mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "$s rc $? $(el): $(tail -1 $OUT/test-$s.log)"; grep -E "FAIL|^skip" $OUT/test-$s.log | head -5
done
