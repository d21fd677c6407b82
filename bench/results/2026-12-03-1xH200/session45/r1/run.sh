# s45 r1, one H200: `mokc check` for the first time on a GPU. First the full table on mokc-small-1gpu's shapes (cut to
# its dense layer and first MoE layer, 1 x 256 tokens), then the suites it touches: gpu_check (tiny with mok, unfused,
# tied + sigmoid; mokc-small-1gpu), gpu_model (now with check_weights and the shared tolerances), cli (with a GPU) and
# gpu_train (train.c's device choice and gradient average moved out). Predicted: all pass; the largest gradient error
# on mokc-small's shapes near the test model's 1.0-1.15e-2 (wq, wk, router); the CPU part under a minute.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
timeout 240 ./mokc check configs/mokc-small-1gpu.json > $OUT/check-mokc-small-1gpu.txt 2>&1
echo "check mokc-small-1gpu rc $? $(el)"; tail -4 $OUT/check-mokc-small-1gpu.txt
for s in gpu_check gpu_model cli gpu_train; do
  MOKC_BIN=build/mokc timeout 300 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "$s rc $? $(el): $(tail -1 $OUT/test-$s.log)"; grep -E "^FAIL|FAIL " $OUT/test-$s.log | head -5
done
grep -E "^ +(configs|MoE layers|check passed)" $OUT/test-gpu_check.log
