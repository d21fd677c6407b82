# s33 r3: r2's B with the copy of the layers' bf16 wq, wk, wv into one matrix by a row-copy kernel (gpu_copy_rows_bf16,
# 16-byte moves) instead of cudaMemcpy2DAsync (1 TB/s in r2: adamw +0.34 ms a step). A (HEAD) against B, 30 steps
# A B A B; the suites touched; then B 100 steps twice (the one-GPU figure at this code).
# Predicted: the copy ~0.11 ms a step (336 MB at ~3 TB/s), so B -1.9 to -2.3 ms a step against A over steps 11-30;
# B's 100 steps ~392 ms (s32 r4: 394.1 / 393.8 at HEAD), MFU ~45.6 %, the two runs bitwise equal.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev)
rm -rf /tmp/A /tmp/B; mkdir -p /tmp/A
tar cf - --exclude=./.deps --exclude=./build . | (cd /tmp/A && tar xf -)
cp -r .deps/ab-A/. /tmp/A/
(make -j9 GIT_REVISION=$R-B mokc build/mokc_tests > /tmp/bB.log 2>&1 || { echo "B build failed"; tail -20 /tmp/bB.log; }) &
(cd /tmp/A && make -j7 GIT_REVISION=$R mokc > /tmp/bA.log 2>&1 || echo "A build failed") &
wait
echo "built $(el)"
ln -s $PWD /tmp/B
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for i in 1 2; do for v in A B; do
  (cd /tmp/$v && timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=25 \
    --set log.metrics_path=/tmp/train-$v$i.jsonl > /tmp/train-$v$i.log 2>&1)
  echo "$v$i rc $? $(el)"
done; done
for s in gpu_copy_rows gpu_rope gpu_attention gpu_gemm gpu_model gpu_train; do
  MOKC_BIN=./mokc timeout 200 build/mokc_tests $s > /tmp/test-$s.log 2>&1; echo "test $s rc $? $(el): $(tail -1 /tmp/test-$s.log)"
done
grep -h "FAIL\|fail " /tmp/test-*.log | head -20
python3 - <<'PY'
import json
runs = {}
for v in ('A1', 'B1', 'A2', 'B2'):
    try: runs[v] = [json.loads(l) for l in open('/tmp/train-%s.jsonl' % v) if '"step"' in l]
    except Exception as e: print(v, e)
for v, r in runs.items():
    w = [x for x in r if x['step'] > 10 and x['step'] != 25]
    ms = sum(x['ms'] for x in w) / max(len(w), 1)
    parts = {k: sum(x['gpu_ms'][k] for x in w) / max(len(w), 1) for k in (w[0]['gpu_ms'] if w else {})}
    base = [x['loss'] for x in runs.get(v[0] + '1', [])]
    print('%s steps 11-30 %.1f ms, mfu %.2f%% | %s | losses == %s1: %s | loss 30 %.5f' % (v, ms,
          100 * sum(x['mfu'] for x in w) / max(len(w), 1), ' '.join('%s %.1f' % (k, parts[k]) for k in parts), v[0],
          [x['loss'] for x in r] == base, r[-1]['loss'] if r else 0))
    p = next((x['op_ms'] for x in r if 'op_ms' in x), {})
    print('   step 25:', ', '.join('%s %.2f' % (k, p[k]['ms']) for k in p if 'proj' in k or 'rope' in k or 'adamw' in k
          or 'attention' in k))
PY
for i in 1 2; do
  timeout 160 ./mokc train configs/mokc-small-1gpu.json --set data.train=/tmp/repo.h5 --set data.val= \
    --set log.profile_step=50 --set log.metrics_path=$OUT/train-$i.jsonl > $OUT/train-$i.log 2>&1
  echo "run $i rc $? $(el): $(grep -E '^steps ' $OUT/train-$i.log)"
done
python3 - "$OUT" <<'PY'
import json, sys
r = {i: [json.loads(l) for l in open('%s/train-%d.jsonl' % (sys.argv[1], i)) if '"step"' in l] for i in (1, 2)}
print('losses bitwise equal over %d steps: %s' % (len(r[1]), [x['loss'] for x in r[1]] == [x['loss'] for x in r[2]]))
for i in (1, 2):
    w = [x for x in r[i] if 20 <= x['step'] <= 100 and x['step'] != 50]
    parts = {k: sum(x['gpu_ms'][k] for x in w) / len(w) for k in w[0]['gpu_ms']}
    print('run %d steps 20-100: %.1f ms, MFU %.2f %% | %s | loss 91-100 %.4f' % (i, sum(x['ms'] for x in w) / len(w),
          100 * sum(x['mfu'] for x in w) / len(w), ' '.join('%s %.1f' % kv for kv in parts.items()),
          sum(x['loss'] for x in r[i] if x['step'] > 90) / 10))
PY
grep -h "GPU memory plan" $OUT/train-1.log
cd /tmp && tar czf $OUT/ab.tgz train-A1.jsonl train-A1.log train-B1.jsonl train-B1.log train-A2.jsonl train-B2.jsonl test-*.log
echo "total $(el)"
