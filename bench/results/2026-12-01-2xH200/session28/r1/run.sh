# Prepared in s27 for a session with the 2-GPU kind (2×H200), first of its calls (≈ 5 minutes): the 2-GPU tests
# (gpu_train: ep = 2 and dp = 2 track the CPU, and the dp = 2 replicas' AdamW moments are bitwise equal, which
# checks the embedding's gradient summed over the rows used; mok against unfused at ep = 2), then mokc-small at EP2,
# A = the tree with layer -1's tensors summed together after the backward, densely
# (A-layer-minus-1-reduced-together-after-the-backward.diff), B = the tree (b051d5a: the head's and final norm's
# gradients summed after the last micro-batch's head backward, the embedding's over the rows some rank used),
# A B A B, 12 steps, step 8 profiled. Predicted: losses bitwise equal A vs B (two ranks: each sum one addition);
# "all-reduce wait" 8.4 (s23) -> ≈ 1 ms a step; the step ≈ -7 ms.
# Copy to .deps/, set .deps/rev to the commit, and run with carry [".deps"] on nvidia-h200-x2.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
rev=$(cat .deps/rev); E=bench/results/2026-12-01-2xH200/session27/ep2-not-run
rm -rf /tmp/A; mkdir -p /tmp/A && tar --exclude=./build --exclude=./.deps -cf - . | tar -C /tmp/A -xf -
(cd /tmp/A && patch -p1 < $E/A-layer-minus-1-reduced-together-after-the-backward.diff > /dev/null &&
 make -j12 GIT_REVISION=$rev-A mokc > /tmp/bA.log 2>&1) &
make -j18 GIT_REVISION=$rev mokc build/mokc_tests > /tmp/bB.log 2>&1 || { echo "B build failed"; tail -20 /tmp/bB.log; exit 1; }
wait; [ -x /tmp/A/mokc ] || { echo "A build failed"; tail -5 /tmp/bA.log; exit 1; }
rm -rf /tmp/B; ln -s $PWD /tmp/B; echo "built $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for i in 1 2; do for v in A B; do
  timeout 150 mpirun -np 2 /tmp/$v/mokc train configs/mokc-small.json --set train.steps=12 --set data.val= --set data.train=/tmp/repo.h5 \
    --set log.every=1 --set log.profile_step=8 --set log.metrics_path=$OUT/train-$v$i.jsonl > $OUT/train-$v$i.log 2>&1
  echo "$v$i rc $? $(el): $(grep -E '^steps ' $OUT/train-$v$i.log)"
done; done
python3 - "$OUT" <<'PY'
import json, sys
rec = lambda t: [json.loads(l) for l in open('%s/train-%s.jsonl' % (sys.argv[1], t)) if '"step"' in l]
R = {t: rec(t) for t in ('A1', 'B1', 'A2', 'B2')}
L = lambda r: [x['loss'] for x in r]
print('losses bitwise: A1=A2 %s, B1=B2 %s, A1=B1 %s' % (L(R['A1']) == L(R['A2']), L(R['B1']) == L(R['B2']), L(R['A1']) == L(R['B1'])))
sel = lambda r: [x['ms'] for x in r if x['step'] >= 4 and x['step'] != 8]
for t in R: print(t, 'steps 4-12 but 8: %.1f ms' % (sum(sel(R[t])) / len(sel(R[t]))))
o = {t: next(x['op_ms'] for x in R[t] if 'op_ms' in x) for t in R}
print('%-22s' % 'op' + ''.join('%8s' % t for t in R))
for k in o['A1']:
    if o['A1'][k]['ms'] > 0.5 or 'all-reduce' in k: print('%-22s' % k + ''.join('%8.2f' % o[t].get(k, {'ms': 0})['ms'] for t in R))
PY
echo "total $(el)"
