# s37 r1, one H200: (1) the full scripts/gpu-check.sh at the tree (B: the weight-gradient task grid in one header,
# kernels/mok/wgrad_tasks.cuh, the backward's own copies gone; its kernels compile 128 bytes shorter each, no spill
# change); (2) B against HEAD (A) on mokc-small-1gpu, steps 11-30, A1 B1 A2 B2: predicted within the ±0.5 ms of
# paired runs, the losses the same bits; (3) the expert bias (moe.expert_bias_update_rate 0.001, DeepSeek-V3's
# step) against none, 100 steps each on B: how fast the collapsed routing of the first steps spreads, what it does
# to the loss and to one GPU's MoE time (the EP2 excess is the ranks' imbalance: perf-notes, s23).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev); rm -f /tmp/train-*
rm -rf /tmp/A; mkdir -p /tmp/A; tar cf - --exclude=./.deps . | (cd /tmp/A && tar xf -); cp -r .deps/ab-A/. /tmp/A/
rm -f /tmp/A/kernels/mok/wgrad_tasks.cuh
(cd /tmp/A && make -j4 GIT_REVISION=$R-A mokc > /tmp/bA.log 2>&1 || echo "A build failed") &
timeout 420 scripts/gpu-check.sh > $OUT/gpu-check.txt 2>&1; echo "gpu-check rc $? $(el)"
tail -24 $OUT/gpu-check.txt | head -12
wait; echo "A built $(el)"
ln -sfn $PWD /tmp/B
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
probe() { # variant tag steps extra-sets...
  local v=$1 tag=$2 steps=$3; shift 3
  (cd /tmp/$v && timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=$steps --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=25 "$@" \
    --set log.metrics_path=/tmp/train-$tag.jsonl > /tmp/train-$tag.log 2>&1)
  echo "$tag rc $? $(el)"
}
for iv in A1 B1 A2 B2; do probe ${iv%?} $iv 30; done
probe B bias0 100
probe B bias1 100 --set moe.expert_bias_update_rate=0.001
python3 - <<'PY' | tee $OUT/summary.txt
import json
def load(v):
    try: return [json.loads(l) for l in open('/tmp/train-%s.jsonl' % v) if '"step"' in l]
    except Exception as e: print(v, e); return []
def mean_ms(r, lo, hi):
    w = [x for x in r if lo <= x['step'] <= hi and x['step'] != 25]
    return sum(x['ms'] for x in w) / max(len(w), 1), w
runs = {v: load(v) for v in ('A1', 'B1', 'A2', 'B2')}
for v in sorted(runs):
    r = runs[v]
    ms, w = mean_ms(r, 11, 30)
    parts = {}
    for x in w:
        for k, t in x.get('gpu_ms', {}).items(): parts[k] = parts.get(k, 0) + t / len(w)
    print('%s steps 11-30 %.2f ms | %s | losses == %s1: %s, == A1: %s | loss 30 %.6f' % (v, ms,
          ' '.join('%s %.2f' % kv for kv in sorted(parts.items())), v[0],
          [x['loss'] for x in r] == [x['loss'] for x in runs.get(v[0] + '1', [])],
          [x['loss'] for x in r] == [x['loss'] for x in runs['A1']], r[-1]['loss'] if r else 0))
for v in ('bias0', 'bias1'):
    r = load(v)
    if not r: continue
    ms, w = mean_ms(r, 20, 100)
    moe = sum(x['gpu_ms']['moe'] for x in w) / max(len(w), 1)
    print('%s steps 20-100 %.2f ms, MFU %.2f %%, moe %.2f ms | loss mean 91-100 %.4f' % (v, ms,
          100 * sum(x['mfu'] for x in w) / max(len(w), 1), moe,
          sum(x['loss'] for x in r if x['step'] > 90) / 10))
    for x in r:
        if x['step'] in (1, 2, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100):
            print('   step %3d loss %.4f aux %.2f moe %.2f load max/mean by layer %s' % (x['step'], x['loss'],
                  x.get('aux_loss', 0), x['gpu_ms']['moe'], x['load_max_over_mean_by_layer']))
PY
cd /tmp && tar czf $OUT/r1.tgz train-*.jsonl train-A1.log train-B1.log train-bias1.log
echo "total $(el)"
