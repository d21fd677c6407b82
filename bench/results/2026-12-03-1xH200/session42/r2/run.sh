# s42 r2, one H200. A = d39de5e (as s41 left it); B = 7f4f659: AdamW's updates of idle routed experts deferred until a
# forward routes tokens to them or the state is read (gpu/experts_deferred.h): an idle expert's masters and moments
# are not touched by AdamW; the forward's catch-up replays its owed calls in registers (one read and write of its
# state, ≈ 6.5 µs an owed call of compute an expert) before the megakernel reads it.
# Tests at B: gpu_adamw (deferred blocks against adamw_step), gpu_model (deferred against eager, bitwise), gpu_train,
# mok, kernel_report. mokc-small-1gpu steps 11-30 A1 B1 A2 B2; then B as configured, 100 steps; every test if time.
# Predicted at steps 11-30 (≈ 100 of 128 experts idle a layer): "adamw" 23.0 -> ≈ 10 ms (52 of its 88 GB are idle
# experts' state); "moe fwd" +1 to +4 ms (the catch-ups); the step -7 to -11 ms; B's losses and norms A's bit for bit.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev); rm -f /tmp/train-*
rm -rf /tmp/A; mkdir -p /tmp/A; tar xf .deps/A.tar -C /tmp/A
(cd /tmp/A && make -j6 GIT_REVISION=d39de5e-A mokc > /tmp/bA.log 2>&1 || echo "A build failed") &
make -j10 GIT_REVISION=$R-B mokc build/mokc_tests > /tmp/bB.log 2>&1 || { echo "B build failed"; grep -E "error" /tmp/bB.log | head; exit 1; }
echo "B built $(el)"
for t in gpu_adamw gpu_model kernel_report mok gpu_train; do
  MOKC_BIN=build/mokc timeout 200 build/mokc_tests $t > $OUT/test-$t.log 2>&1; echo "test $t rc $? $(el): $(tail -1 $OUT/test-$t.log)"
  grep -E "^FAIL|FAIL |deferred" $OUT/test-$t.log | head -8
done
wait; echo "A built $(el)"
ln -sfn $PWD /tmp/B
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for iv in A1 B1 A2 B2; do v=${iv%?}
  (cd /tmp/$v && timeout 60 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=25 \
    --set log.metrics_path=/tmp/train-$iv.jsonl > /tmp/train-$iv.log 2>&1)
  echo "$iv rc $? $(el)"
done
timeout 100 ./mokc train configs/mokc-small-1gpu.json --set data.train=/tmp/repo.h5 --set data.val= \
  --set log.profile_step=90 --set log.metrics_path=$OUT/train100-1.jsonl > $OUT/train100-1.log 2>&1
echo "100 steps rc $? $(el): $(grep -E '^steps ' $OUT/train100-1.log)"
python3 - "$OUT" <<'PY' | tee $OUT/summary.txt
import json, sys
runs = {}
for v in ('A1', 'B1', 'A2', 'B2'):
    try: runs[v] = [json.loads(l) for l in open('/tmp/train-%s.jsonl' % v) if '"step"' in l]
    except Exception as e: print(v, e)
L = lambda v, k='loss': [x[k] for x in runs.get(v, [])]
for v in sorted(runs):
    r = runs[v]
    w = [x for x in r if x['step'] > 10 and x['step'] != 25]
    ms = sum(x['ms'] for x in w) / max(len(w), 1)
    parts = {}
    for x in w:
        for k, t in x.get('gpu_ms', {}).items(): parts[k] = parts.get(k, 0) + t / len(w)
    print('%s steps 11-30 %.2f ms | %s | losses == A1: %s' % (v, ms,
          ' '.join('%s %.2f' % kv for kv in sorted(parts.items())), L(v) == L('A1')))
    p = next((x['op_ms'] for x in r if 'op_ms' in x), {})
    print('   step 25:', ', '.join('%s %.3f' % (k, p[k]['ms']) for k in p if k in ('adamw', 'moe fwd', 'moe bwd')))
print('A2 == A1: %s; B1 == A1: %s; B2 == B1: %s; norms B1 == A1: %s' % (L('A2') == L('A1'), L('B1') == L('A1'),
      L('B2') == L('B1'), L('B1', 'grad_norm') == L('A1', 'grad_norm')))
try:
    r = [json.loads(l) for l in open('%s/train100-1.jsonl' % sys.argv[1]) if '"step"' in l]
    w = [x for x in r if 20 <= x['step'] <= 100 and x['step'] != 90]
    parts = {k: sum(x['gpu_ms'][k] for x in w) / len(w) for k in w[0]['gpu_ms']}
    print('B, 100 steps, steps 20-100: %.1f ms, MFU %.2f %% | %s | loss 91-100 %.4f' % (sum(x['ms'] for x in w) / len(w),
          100 * sum(x['mfu'] for x in w) / len(w), ' '.join('%s %.1f' % kv for kv in parts.items()),
          sum(x['loss'] for x in r if x['step'] > 90) / 10))
    p = next((x['op_ms'] for x in r if 'op_ms' in x), {})
    print('   step 90:', ', '.join('%s %.3f' % (k, p[k]['ms']) for k in p if k in ('adamw', 'moe fwd', 'moe bwd')))
except Exception as e: print('100 steps:', e)
PY
grep -h "GPU memory plan" $OUT/train100-1.log
cd /tmp && tar czf $OUT/r2.tgz train-*.jsonl train-A1.log train-B1.log
cd /tmp/B && left=$(( 575 - ($(date +%s) - t0) )); [ $left -gt 170 ] && { MOKC_BIN=build/mokc timeout $left build/mokc_tests > $OUT/test-all.log 2>&1
echo "every test rc $? $(el): $(tail -1 $OUT/test-all.log)"; grep -E "^FAIL|FAIL " $OUT/test-all.log | head -12; }
echo "total $(el)"
