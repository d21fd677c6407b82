# s34 r4: the LM head's logits epilogue in one pass after the rows' maxima: the exps (MUFU) and the codes' arithmetic
# (FP32 / integer pipes) of each column pair together, the codes staged as whole rows (pitch 264) and stored by the
# consumer's threads once (2 barriers a tile instead of 4, one unstage of 16 chunks a thread instead of two of 8) (B),
# against 7bb811d (A). Predicted: "head logits" 31.7 -> 31.0-31.3 ms a step (the codes' ~1000-1200 cycles a tile under
# the MUFU's 2048); the same bits (B's losses == A's); the GEMM tile's tests, cross-entropy, model and train pass.
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
for i in 1 2 3; do for v in A B; do
  (cd /tmp/$v && timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=25 \
    --set log.metrics_path=/tmp/train-$v$i.jsonl > /tmp/train-$v$i.log 2>&1)
  echo "$v$i rc $? $(el)"
done; done
for t in gpu_gemm_sm90 gpu_cross_entropy gpu_model gpu_train; do
  MOKC_BIN=build/mokc timeout 200 build/mokc_tests $t > /tmp/test-$t.log 2>&1; echo "test $t rc $? $(el): $(tail -1 /tmp/test-$t.log)"
done
grep -h "FAIL\|^fail" /tmp/test-*.log | head -20
python3 - <<'PY'
import json
runs = {}
for v in ('A1', 'B1', 'A2', 'B2', 'A3', 'B3'):
    try: runs[v] = [json.loads(l) for l in open('/tmp/train-%s.jsonl' % v) if '"step"' in l]
    except Exception as e: print(v, e)
for v, r in runs.items():
    w = [x for x in r if x['step'] > 10 and x['step'] != 25]
    ms = sum(x['ms'] for x in w) / max(len(w), 1)
    parts = {k: sum(x['gpu_ms'][k] for x in w) / max(len(w), 1) for k in (w[0]['gpu_ms'] if w else {})}
    base = [x['loss'] for x in runs.get(v[0] + '1', [])]
    a1 = [x['loss'] for x in runs.get('A1', [])]
    print('%s steps 11-30 %.1f ms, mfu %.2f%% | %s | losses == A1: %s | loss 30 %.5f' % (v, ms,
          100 * sum(x['mfu'] for x in w) / max(len(w), 1), ' '.join('%s %.1f' % (k, parts[k]) for k in parts),
          [x['loss'] for x in r] == a1, r[-1]['loss'] if r else 0))
    p = next((x['op_ms'] for x in r if 'op_ms' in x), {})
    print('   step 25:', ', '.join('%s %.2f' % (k, p[k]['ms']) for k in p if 'head' in k or 'cross' in k or 'attention' in k or 'moe' in k))
PY
cd /tmp && tar czf $OUT/ab.tgz train-A1.jsonl train-A1.log train-B1.jsonl train-B1.log train-A2.jsonl train-B2.jsonl train-A3.jsonl train-B3.jsonl test-*.log
echo "total $(el)"
