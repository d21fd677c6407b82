# s47 r6, one H200: the review's fixes on a GPU: cli (bench's record on a full disk keeps its header and whole lines,
# test_json_lines), train (a resumed run's record kept when its header cannot be written), gpu_train's rank without
# a GPU (the message for several ranks unchanged). Predicted: all pass.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
for s in cli train gpu_train.test_gpu_rank_without_gpu_stops_all; do
  MOKC_BIN=build/mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "$s rc $? $(el): $(tail -1 $OUT/test-$s.log)"; grep -E "FAIL|^skip" $OUT/test-$s.log | head -5
done

CUDA_VISIBLE_DEVICES= build/mokc train configs/tiny.json --set backend=cuda > $OUT/no-gpu-one-process.log 2>&1; echo "no GPU: rc $? (2 expected)"; cat $OUT/no-gpu-one-process.log | tail -2
