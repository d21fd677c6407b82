# s29 r4: mokc-small-1gpu (megakernel) at the same global batch, 8 sequences a step, split 2 x 4 (as configured),
# 4 x 2 and 8 x 1 (train.micro_batch x train.grad_accum), 100 steps each. Predicted: 4 x 2 ≈ -15 ms a step (the MoE
# layer's per-call costs and the adds into the expert gradients halved), 8 x 1 a little more; the loss alike.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for v in 2x4 4x2 8x1; do
  mb=${v%x*}; ga=${v#*x}
  timeout 170 ./mokc train configs/mokc-small-1gpu.json --set train.micro_batch=$mb --set train.grad_accum=$ga \
    --set train.steps=100 --set data.val= --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=50 \
    --set log.metrics_path=$OUT/train-$v.jsonl > $OUT/train-$v.log 2>&1
  echo "$v rc $? $(el): $(grep -E '^steps ' $OUT/train-$v.log) | $(grep -E '^GPU memory plan' $OUT/train-$v.log | grep -o 'total.*')"
done
python3 - "$OUT" <<'PY'
import json, sys
for v in ('2x4', '4x2', '8x1'):
    try: r = [json.loads(l) for l in open('%s/train-%s.jsonl' % (sys.argv[1], v)) if '"step"' in l]
    except Exception as e: print(v, e); continue
    out = []
    for a in (21, 41, 61, 81):
        w = [x for x in r if a <= x['step'] < a + 20 and x['step'] != 50]
        if w: out.append('%d-%d %.1f ms (moe %.1f)' % (a, a + 19, sum(x['ms'] for x in w) / len(w),
                         sum(x['gpu_ms'].get('moe', 0) for x in w) / len(w)))
    w = [x for x in r if x['step'] >= 81]
    print(v, ' | '.join(out), '| loss 81-100 %.4f' % (sum(x['loss'] for x in w) / max(len(w), 1)))
    p = next((x['op_ms'] for x in r if 'op_ms' in x), {})
    print('   step 50:', ', '.join('%s %.1f' % (k, p[k]['ms']) for k in p if p[k]['ms'] > 8))
PY
echo "total $(el)"
