# s36 r2: r1 found the gradient norm's squares worth 3.6 ms a step when read twice. Why: 256 blocks of 512 threads a
# tensor on the comm stream take SMs between the compute stream's persistent kernels (flash backward, megakernel)?
# X = HEAD with the sumsq grid from MOKC_X_SUMSQ_BLOCKS (each block loops over the same 256 partials: the same bits)
# and MOKC_X_PRIO (the compute stream at the greatest priority). Predicted: if the grid is the cost, 16-64 blocks
# take 1.5-3 ms off the step (the squares still read 20 GB); if the bytes are, nothing.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev)
if [ ! -x /tmp/X/mokc ]; then rm -rf /tmp/X; mkdir -p /tmp/X; tar cf - --exclude=./.deps . | (cd /tmp/X && tar xf -); cp -r .deps/ab-X/. /tmp/X/; fi
(cd /tmp/X && make -j16 GIT_REVISION=$R-X mokc > /tmp/bX.log 2>&1) || { echo "X build failed"; tail -20 /tmp/bX.log; exit 1; }
echo "built X $(el)"
(cd /tmp/X && scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1) || { echo "data failed"; exit 1; }
run() { iv=$1; shift
  (cd /tmp/X && env "$@" timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=25 \
    --set log.metrics_path=/tmp/train-$iv.jsonl > /tmp/train-$iv.log 2>&1)
  echo "$iv rc $? $(el)"; }
for i in 1 2; do
  run A$i MOKC_X_SUMSQ_BLOCKS=256; run S16$i MOKC_X_SUMSQ_BLOCKS=16; run S32$i MOKC_X_SUMSQ_BLOCKS=32
  run S64$i MOKC_X_SUMSQ_BLOCKS=64; run P$i MOKC_X_PRIO=1; run P32$i MOKC_X_PRIO=1 MOKC_X_SUMSQ_BLOCKS=32
done
python3 - <<'PY' | tee $OUT/summary.txt
import json, glob, os
runs = {}
for f in sorted(glob.glob('/tmp/train-*.jsonl')):
    v = os.path.basename(f)[6:-6]
    runs[v] = [json.loads(l) for l in open(f) if '"step"' in l]
for v in sorted(runs):
    r = runs[v]
    w = [x for x in r if x['step'] > 10 and x['step'] != 25]
    ms = sum(x['ms'] for x in w) / max(len(w), 1)
    parts = {}
    for x in w:
        for k, t in x.get('gpu_ms', {}).items(): parts[k] = parts.get(k, 0) + t / len(w)
    print('%-5s steps 11-30 %.2f ms | %s | losses == A1: %s' % (v, ms, ' '.join('%s %.2f' % kv for kv in sorted(parts.items())),
          [x['loss'] for x in r] == [x['loss'] for x in runs.get('A1', [])]))
    p = next((x['op_ms'] for x in r if 'op_ms' in x), {})
    print('   step 25:', ', '.join('%s %.2f' % (k, p[k]['ms']) for k in p if k in ('moe fwd', 'moe bwd', 'adamw', 'all-reduce wait', 'grad norm', 'attention bwd', 'head bwd')))
PY
cd /tmp && tar czf $OUT/r2.tgz train-*.jsonl train-A1.log train-S321.log
echo "total $(el)"
