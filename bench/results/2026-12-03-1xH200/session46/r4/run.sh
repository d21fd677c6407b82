# s46 r4, one H200: 094f32e's GPU change: gpu_model_download_state_of (the replicated tensors alone, for a run's closing
# replica comparison at world > 1; a checkpoint still downloads everything through the same path). gpu_model (its
# deferred test compares the partial download with the whole, and checks the experts' host places untouched),
# gpu_train and gpu_check (checkpoints, resume, the CPU comparisons through the full download). Predicted: all pass.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
for s in gpu_model gpu_train gpu_check; do
  MOKC_BIN=build/mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "$s rc $? $(el): $(tail -1 $OUT/test-$s.log)"; grep -E "^FAIL|FAIL " $OUT/test-$s.log | head -5
done
