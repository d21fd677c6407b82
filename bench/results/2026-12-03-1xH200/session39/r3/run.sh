# s39 r3, one H200. A = HEAD (d1a7ad2). C = the cross-entropy from the logits' codes with 16-byte loads (8 codes a
# thread; 32 registers, still two blocks of 1024 threads an SM) where they were 8-byte. Tests first at C:
# gpu_cross_entropy (a V % 4 shape added for the 8-byte path), gpu_model. Then mokc-small-1gpu steps 11-30, A C A C;
# then every test at C (one GPU). Predicted: "cross-entropy" 0.376 -> ~0.32 ms a call (3.3 -> ~3.9 TB/s of its
# 1.24 GB), the step ~ -0.9 ms; losses bitwise A's (each element's arithmetic is unchanged).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev); rm -f /tmp/train-*
make -j16 GIT_REVISION=$R-C mokc build/mokc_tests > /tmp/bC.log 2>&1 || { echo "C build failed"; grep -E "error" /tmp/bC.log | head; exit 1; }
echo "C built $(el)"
for v in A; do
  rm -rf /tmp/$v; mkdir -p /tmp/$v; tar cf - --exclude=./.deps . | (cd /tmp/$v && tar xf -); cp -r .deps/ab-$v/. /tmp/$v/
  (cd /tmp/$v && make -j8 GIT_REVISION=$R-$v mokc > /tmp/b$v.log 2>&1 || echo "$v build failed") &
done
for t in gpu_cross_entropy gpu_model; do
  MOKC_BIN=build/mokc timeout 240 build/mokc_tests $t > $OUT/test-$t.log 2>&1; echo "test $t rc $? $(el): $(tail -1 $OUT/test-$t.log)"
  grep -E "^FAIL|FAIL " $OUT/test-$t.log | head -5
done
wait; echo "A built $(el)"
ln -sfn $PWD /tmp/C
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for iv in A1 C1 A2 C2; do v=${iv%?}
  (cd /tmp/$v && timeout 60 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=25 \
    --set log.metrics_path=/tmp/train-$iv.jsonl > /tmp/train-$iv.log 2>&1)
  echo "$iv rc $? $(el)"
done
python3 - "$OUT" <<'PY' | tee $OUT/summary.txt
import json, sys
runs = {}
for v in ('A1', 'C1', 'A2', 'C2'):
    try: runs[v] = [json.loads(l) for l in open('/tmp/train-%s.jsonl' % v) if '"step"' in l]
    except Exception as e: print(v, e)
for v in sorted(runs):
    r = runs[v]
    w = [x for x in r if x['step'] > 10 and x['step'] != 25]
    ms = sum(x['ms'] for x in w) / max(len(w), 1)
    parts = {}
    for x in w:
        for k, t in x.get('gpu_ms', {}).items(): parts[k] = parts.get(k, 0) + t / len(w)
    print('%s steps 11-30 %.2f ms | %s | losses == A1: %s' % (v, ms,
          ' '.join('%s %.2f' % kv for kv in sorted(parts.items())),
          [x['loss'] for x in r] == [x['loss'] for x in runs.get('A1', [])]))
    p = next((x['op_ms'] for x in r if 'op_ms' in x), {})
    print('   step 25:', ', '.join('%s %.3f' % (k, p[k]['ms']) for k in p if k in ('cross-entropy', 'head logits', 'head bwd')))
if 'A1' in runs and 'C1' in runs:
    d = max(abs(a['loss'] - b['loss']) / a['loss'] for a, b in zip(runs['A1'], runs['C1']))
    print('C1 against A1: worst relative loss difference over 30 steps %.2e; C2 == C1: %s' % (d,
          [x['loss'] for x in runs.get('C2', [])] == [x['loss'] for x in runs['C1']]))
PY
cd /tmp && tar czf $OUT/r3.tgz train-*.jsonl train-A1.log train-C1.log
cd /tmp/C && MOKC_BIN=build/mokc timeout 330 build/mokc_tests > $OUT/test-all.log 2>&1
echo "every test rc $? $(el): $(tail -1 $OUT/test-all.log)"; grep -E "^FAIL|FAIL |^skip" $OUT/test-all.log | head -12
echo "total $(el)"
