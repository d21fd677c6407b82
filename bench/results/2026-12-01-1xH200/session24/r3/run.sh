# s24 r3 (1×H200): the grad norm's reorder (78b32ed, a1: one pass on one rank) on the GPU suites that run it
# (gpu_model, gpu_train); then the megakernels traced (MOKC_MOK_TRACE=1) at the Qwen-like shape, EP1, 8192 tokens:
# where each task kind's epilogue time goes today (s13's trace is the last), to choose between the epilogues.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
for t in gpu_model gpu_train; do
  MOKC_BIN=build/mokc build/mokc_tests $t > $OUT/test-$t.log 2>&1; echo "$t rc $?: $(tail -1 $OUT/test-$t.log) $(el)"
  grep -E 'FAIL' $OUT/test-$t.log | head -5
done
for it in 1 2; do
  MOKC_MOK_TRACE=1 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 20 \
    --record $OUT/bench-trace-$it.jsonl > $OUT/bench-trace-$it.log 2>&1
  echo "trace $it rc $? $(el)"
done
grep -A12 "mok forward trace" $OUT/bench-trace-2.log | head -14
grep -A12 "mok backward trace" $OUT/bench-trace-2.log | head -14
grep -h '"impl": "mok"' $OUT/bench-trace-2.jsonl | head -3 | cut -c1-400
