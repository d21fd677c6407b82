# s29 r3: r2's B (working tree: gemm_rm_dynamic on a plan per grid step) trained, as r2's A was (its run
# failed on a missing /tmp/B link). Then a second B run of 20 steps: the same losses, bit for bit.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/bB.log 2>&1 || { echo "B build failed"; tail -20 /tmp/bB.log; exit 1; }
echo "built $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for v in B B2; do
  steps=$([ $v = B ] && echo 100 || echo 20)
  timeout 200 ./mokc train configs/mokc-small-1gpu.json --set moe_impl=unfused --set train.steps=$steps \
    --set data.val= --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=95 \
    --set log.metrics_path=$OUT/train-$v.jsonl > $OUT/train-$v.log 2>&1
  echo "$v rc $? $(el): $(grep -E '^steps ' $OUT/train-$v.log)"
done
python3 - "$OUT" <<'PY'
import json, sys
R = {}
for v in ('B', 'B2'):
    R[v] = [json.loads(l) for l in open('%s/train-%s.jsonl' % (sys.argv[1], v)) if '"step"' in l]
r = R['B']
for a in range(1, 101, 20):
    w = [x for x in r if a + (a == 1) * 4 <= x['step'] < a + 20 and x['step'] != 95]
    if w: print('B steps %d-%d: %.1f ms, moe %.1f ms, load %.1f' % (w[0]['step'], w[-1]['step'],
          sum(x['ms'] for x in w) / len(w), sum(x['gpu_ms'].get('moe', 0) for x in w) / len(w),
          sum(x['load_max_over_mean'] for x in w) / len(w)))
L = lambda r: [(x['loss'], x['grad_norm']) for x in r if x['step'] <= 20]
print('steps 1-20 losses and norms bitwise, B = B2: %s (%d steps)' % (L(R['B']) == L(R['B2']), len(L(R['B2']))))
PY
sed -n '/op by op/,/^  embedding /p' $OUT/train-B.log | head -30
echo "total $(el)"
