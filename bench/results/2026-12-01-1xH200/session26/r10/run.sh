# s26 r10 (1xH200): mokc-small-1gpu 100 steps with fp32 and with bf16 AdamW moments at 9036a19: the loss curves
# side by side (may mokc-small take bf16 moments?) and steps 20-100.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null || exit 1
for st in bf16 fp32; do
  timeout 150 ./mokc train configs/mokc-small-1gpu.json --set train.steps=100 --set train.optimizer_state=$st \
    --set data.train=/tmp/repo.h5 --set data.val= --set log.every=10 --set log.metrics_path=$OUT/train-$st.jsonl \
    > $OUT/train-$st.log 2>&1
  echo "$st rc $? $(el): $(grep -E '^steps ' $OUT/train-$st.log)"
done
python3 - "$OUT" <<'PY'
import json, sys
rec = lambda t: [json.loads(l) for l in open('%s/train-%s.jsonl' % (sys.argv[1], t)) if '"step"' in l]
a, b = rec('fp32'), rec('bf16')
rel = [abs(x['loss'] - y['loss']) / abs(x['loss']) for x, y in zip(a, b)]
w = max(range(len(rel)), key=lambda i: rel[i])
sel = lambda r: [x for x in r if 20 <= x['step'] <= 100]
mean = lambda r, k: sum(x[k] for x in sel(r)) / len(sel(r))
print('steps 20-100: fp32 %.1f ms (MFU %.4f), bf16 %.1f ms (MFU %.4f); worst relative loss difference %.2e at step %d'
      % (mean(a, 'ms'), mean(a, 'mfu'), mean(b, 'ms'), mean(b, 'mfu'), rel[w], a[w]['step']))
print('mean loss steps 91-100: fp32 %.5f, bf16 %.5f' % (sum(x['loss'] for x in a[90:]) / 10, sum(x['loss'] for x in b[90:]) / 10))
for s in (1, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100): print(s, '%.5f %.5f' % (a[s - 1]['loss'], b[s - 1]['loss']))
PY
echo "total $(el)"
