# s39 r4: mokc-small-1gpu as configured at 1a2fce3 (the code of 1692c51), 100 steps, twice, the op profile at step
# 90 (the routing spread out by then). Predicted against s37 r4 (385.2 / 385.4 ms, MFU 46.5 % over steps 20-100 at
# 25a1278): ≈ 380 ms (s38's embedding backward -1.2, s39's plan sort -0.65, gradients written first and dx written
# -1.75, the cross-entropy -0.6: ≈ -4 to -5 ms, the machines differing by up to 2 %), MFU ≈ 47.1 %; the two runs
# bitwise equal.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
echo "built $(el)"
for i in 1 2; do
  timeout 160 ./mokc train configs/mokc-small-1gpu.json --set data.train=/tmp/repo.h5 --set data.val= \
    --set log.profile_step=90 --set log.metrics_path=$OUT/train-$i.jsonl > $OUT/train-$i.log 2>&1
  echo "run $i rc $? $(el): $(grep -E '^steps ' $OUT/train-$i.log)"
done
python3 - "$OUT" <<'PY'
import json, sys
r = {i: [json.loads(l) for l in open('%s/train-%d.jsonl' % (sys.argv[1], i)) if '"step"' in l] for i in (1, 2)}
print('losses bitwise equal over %d steps: %s' % (len(r[1]), [x['loss'] for x in r[1]] == [x['loss'] for x in r[2]]))
for i in (1, 2):
    w = [x for x in r[i] if 20 <= x['step'] <= 100 and x['step'] != 90]
    parts = {k: sum(x['gpu_ms'][k] for x in w) / len(w) for k in w[0]['gpu_ms']}
    print('run %d steps 20-100: %.1f ms, MFU %.2f %% | %s | loss 91-100 %.4f' % (i, sum(x['ms'] for x in w) / len(w),
          100 * sum(x['mfu'] for x in w) / len(w), ' '.join('%s %.1f' % kv for kv in parts.items()),
          sum(x['loss'] for x in r[i] if x['step'] > 90) / 10))
PY
grep -h "GPU memory plan" $OUT/train-1.log
sed -n "/^step 90 op by op/,/^step    91/p" $OUT/train-1.log | head -34
echo "total $(el)"
