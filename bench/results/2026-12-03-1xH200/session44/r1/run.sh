# s44 r1, one H200, at 8d12728 (s43's last code, never run on a GPU): adamw.cu's shared replay_span, by_state_form and
# masters_of; the shared test helpers DeferredState and deferred_end_bad; MOKC_ADAMW_EAGER=1 and
# gpu_train.test_gpu_deferred_matches_eager (its 1-GPU part runs here; ep = 2 and dp = 2 need two GPUs).
# Tests first (gpu_adamw, gpu_model, gpu_train, mok), then 100 steps as configured, then every test.
# Predicted: every test passes; 100 steps within 1 % of r2's 363.7 ms (the same instructions in every AdamW kernel).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev)
make -j16 GIT_REVISION=$R mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
for t in gpu_adamw gpu_model gpu_train mok; do
  MOKC_BIN=build/mokc timeout 240 build/mokc_tests $t > $OUT/test-$t.log 2>&1; echo "test $t rc $? $(el): $(tail -1 $OUT/test-$t.log)"
  grep -E "^FAIL|FAIL " $OUT/test-$t.log | head -8
done
grep -E "deferred" $OUT/test-gpu_train.log $OUT/test-gpu_model.log $OUT/test-gpu_adamw.log | head -12
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
timeout 100 ./mokc train configs/mokc-small-1gpu.json --set data.train=/tmp/repo.h5 --set data.val= \
  --set log.profile_step=90 --set log.metrics_path=$OUT/train100-1.jsonl > $OUT/train100-1.log 2>&1
echo "100 steps rc $? $(el): $(grep -E '^steps ' $OUT/train100-1.log)"
python3 - "$OUT" <<'PY' | tee $OUT/summary.txt
import json, sys
r = [json.loads(l) for l in open('%s/train100-1.jsonl' % sys.argv[1]) if '"step"' in l]
w = [x for x in r if 20 <= x['step'] <= 100 and x['step'] != 90]
parts = {k: sum(x['gpu_ms'][k] for x in w) / len(w) for k in w[0]['gpu_ms']}
print('100 steps, steps 20-100: %.1f ms, MFU %.2f %% | %s | loss 91-100 %.4f' % (sum(x['ms'] for x in w) / len(w),
      100 * sum(x['mfu'] for x in w) / len(w), ' '.join('%s %.1f' % kv for kv in parts.items()),
      sum(x['loss'] for x in r if x['step'] > 90) / 10))
p = next((x['op_ms'] for x in r if 'op_ms' in x), {})
print('step 90:', ', '.join('%s %.3f' % (k, p[k]['ms']) for k in p))
PY
left=$(( 575 - ($(date +%s) - t0) )); [ $left -gt 170 ] && { MOKC_BIN=build/mokc timeout $left build/mokc_tests > $OUT/test-all.log 2>&1
echo "every test rc $? $(el): $(tail -1 $OUT/test-all.log)"; grep -E "^FAIL|FAIL " $OUT/test-all.log | head -12; }
echo "total $(el)"
