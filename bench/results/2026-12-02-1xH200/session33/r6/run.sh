# s33 r6: the MoE forward's expert histogram (gpu_moe_plan_histogram) on a block per 8192 slots (8 loads in flight a
# thread, shared-memory bins added into the zeroed outputs), not one block looping over every slot, against 6779773
# (A). Tests mok and gpu_moe_unfused on B; the Qwen-like layer at EP1 (adding, 8192 and 16384 tokens) A B A B; then
# mokc-small-1gpu 30 steps A B A B. Predicted: fwd_route 0.0555 -> ~0.04 ms at 8192 tokens, 0.0925 -> ~0.06 at
# 16384 (the one-block histogram ~21 / ~40 us); the step -0.4 to -0.5 ms; the same bits (B's losses == A's).
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
for s in mok gpu_moe_unfused; do
  MOKC_BIN=./mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "test $s rc $? $(el): $(tail -1 $OUT/test-$s.log)"
done
grep -h "^FAIL\|fail " $OUT/test-*.log | head -20
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for i in 1 2; do for v in A B; do
  for t in 8192 16384; do
    (cd /tmp/$v && timeout 100 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --tokens $t \
      --accumulate --record /tmp/bench-$v$i-$t.jsonl > /tmp/bench-$v$i-$t.log 2>&1); echo "bench $v$i-$t rc $?"
  done
  (cd /tmp/$v && timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.metrics_path=/tmp/train-$v$i.jsonl > /tmp/train-$v$i.log 2>&1)
  echo "train $v$i rc $? $(el)"
done; done
python3 - <<'PY'
import json
keys = ['fwd_route_ms', 'fwd_schedule_ms', 'fwd_kernel_ms']
for t in ('8192', '16384'):
  for n in ('A1', 'B1', 'A2', 'B2'):
    r = [json.loads(l) for l in open('/tmp/bench-%s-%s.jsonl' % (n, t))]
    m = next(x for x in r if x.get('impl') == 'mok' and 'fwd_ms' in x)
    p = next((x for x in r if 'fwd_kernel_ms' in x), {})
    print('%-10s %8.3f %8.3f ' % (n + '-' + t, m['fwd_ms'], m['fwdbwd_ms']) + ' '.join('%s %.4f' % (k, p.get(k, 0)) for k in keys))
runs = {}
for v in ('A1', 'B1', 'A2', 'B2'):
    runs[v] = [json.loads(l) for l in open('/tmp/train-%s.jsonl' % v) if '"step"' in l]
for v, r in runs.items():
    w = [x for x in r if x['step'] > 10]
    parts = {k: sum(x['gpu_ms'][k] for x in w) / len(w) for k in w[0]['gpu_ms']}
    print('%s steps 11-30 %.1f ms | %s | losses == A1: %s' % (v, sum(x['ms'] for x in w) / len(w),
          ' '.join('%s %.1f' % kv for kv in parts.items()), [x['loss'] for x in r] == [x['loss'] for x in runs['A1']]))
PY
cd /tmp && tar czf $OUT/ab.tgz bench-*.jsonl train-A1.jsonl train-B1.jsonl train-A2.jsonl train-B2.jsonl train-B1.log
echo "total $(el)"
