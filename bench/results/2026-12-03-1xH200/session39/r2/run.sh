# s39 r2, one H200. A = HEAD (3e7d866). B = A + the step's first backward writing (beta 0) the weight gradients of
# the attention's, the dense FFN's and the LM head's GEMMs, which zero_grads no longer clears. C = B + the MoE
# backward writing dx (the scatter of the token's rows writes where no shared expert wrote first), so the model's
# memset of d ln2 before each MoE backward goes. Tests first at C: gpu_model (a two-micro-batch pass against twice
# the CPU's gradients), gpu_moe (dx written over NaN), mok, gpu_train. Then mokc-small-1gpu steps 11-30,
# A B C A B C. Predicted: B: "zero grads" 0.77 -> ~0.3 ms, the wgrads' first reads of 2 GB gone, the step ~ -0.9
# ms; C: "moe bwd" -0.065 ms a call (134 MB memset + as many read), the step ~ -0.9 ms more; losses: C bitwise B,
# B bitwise A if cuBLASLt keeps its algorithms at beta 0.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev); rm -f /tmp/train-*
make -j16 GIT_REVISION=$R-C mokc build/mokc_tests > /tmp/bC.log 2>&1 || { echo "C build failed"; grep -E "error" /tmp/bC.log | head; exit 1; }
echo "C built $(el)"
for v in A B; do
  rm -rf /tmp/$v; mkdir -p /tmp/$v; tar cf - --exclude=./.deps . | (cd /tmp/$v && tar xf -); cp -r .deps/ab-$v/. /tmp/$v/
  (cd /tmp/$v && make -j8 GIT_REVISION=$R-$v mokc > /tmp/b$v.log 2>&1 || echo "$v build failed") &
done
for t in gpu_model gpu_moe mok gpu_train; do
  MOKC_BIN=build/mokc timeout 240 build/mokc_tests $t > $OUT/test-$t.log 2>&1; echo "test $t rc $? $(el): $(tail -1 $OUT/test-$t.log)"
  grep -E "^FAIL|FAIL " $OUT/test-$t.log | head -5
done
wait; echo "A, B built $(el)"
ln -sfn $PWD /tmp/C
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for iv in A1 B1 C1 A2 B2 C2; do v=${iv%?}
  (cd /tmp/$v && timeout 60 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=25 \
    --set log.metrics_path=/tmp/train-$iv.jsonl > /tmp/train-$iv.log 2>&1)
  echo "$iv rc $? $(el)"
done
python3 - "$OUT" <<'PY' | tee $OUT/summary.txt
import json, sys
runs = {}
for v in ('A1', 'B1', 'C1', 'A2', 'B2', 'C2'):
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
    print('   step 25:', ', '.join('%s %.3f' % (k, p[k]['ms']) for k in p if k in ('zero grads', 'head bwd', 'o proj wgrad', 'q k v proj wgrad', 'dense ffn bwd', 'moe bwd')))
if 'A1' in runs and 'C1' in runs:
    d = max(abs(a['loss'] - b['loss']) / a['loss'] for a, b in zip(runs['A1'], runs['C1']))
    print('C1 against A1: worst relative loss difference over 30 steps %.2e; C2 == C1: %s' % (d,
          [x['loss'] for x in runs.get('C2', [])] == [x['loss'] for x in runs['C1']]))
PY
cd /tmp && tar czf $OUT/r1.tgz train-*.jsonl train-A1.log train-C1.log
echo "total $(el)"
