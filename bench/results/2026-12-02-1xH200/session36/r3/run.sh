# s36 r3: r2 showed fewer, longer sumsq blocks cost more (16 blocks +22 ms, 32 +8.5, 64 +4.3 against 256), the
# compute stream's priority nothing: the pass's blocks keep the persistent kernels (flash backward: the register
# file) off their SMs for as long as a block runs. Y = HEAD with each of the 256 partials of a tensor summed by
# MOKC_X_SUMSQ_SPLIT blocks of MOKC_X_SUMSQ_THREADS threads (sub-partials folded in order: other bits than A, the same
# run to run). Predicted: shorter blocks recover part of r1's 3.6 ms, ≈ -1 to -2.5 ms a step at a split of 16-64.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev); rm -f /tmp/train-*
if [ ! -x /tmp/Y/mokc ]; then rm -rf /tmp/Y; mkdir -p /tmp/Y; tar cf - --exclude=./.deps . | (cd /tmp/Y && tar xf -); cp -r .deps/ab-Y/. /tmp/Y/; fi
(cd /tmp/Y && make -j16 GIT_REVISION=$R-Y mokc > /tmp/bX.log 2>&1) || { echo "Y build failed"; tail -20 /tmp/bX.log; exit 1; }
echo "built Y $(el)"
(cd /tmp/Y && scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1) || { echo "data failed"; exit 1; }
run() { iv=$1; shift
  (cd /tmp/Y && env "$@" timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=25 \
    --set log.metrics_path=/tmp/train-$iv.jsonl > /tmp/train-$iv.log 2>&1)
  echo "$iv rc $? $(el)"; }
for i in 1 2; do
  run A$i MOKC_X_SUMSQ_SPLIT=1; run Y4$i MOKC_X_SUMSQ_SPLIT=4; run Y16$i MOKC_X_SUMSQ_SPLIT=16
  run Y16t$i MOKC_X_SUMSQ_SPLIT=16 MOKC_X_SUMSQ_THREADS=256; run Y64t$i MOKC_X_SUMSQ_SPLIT=64 MOKC_X_SUMSQ_THREADS=256
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
          [x['loss'] for x in r] == [x['loss'] for x in runs.get('A1', [])], 'same as %s2: ' % v[:-1] + str([x['loss'] for x in r] == [x['loss'] for x in runs.get(v[:-1] + '2', [])])))
    p = next((x['op_ms'] for x in r if 'op_ms' in x), {})
    print('   step 25:', ', '.join('%s %.2f' % (k, p[k]['ms']) for k in p if k in ('moe fwd', 'moe bwd', 'adamw', 'all-reduce wait', 'grad norm', 'attention bwd', 'head bwd')))
PY
cd /tmp && tar czf $OUT/r3.tgz train-*.jsonl train-A1.log train-Y161.log
echo "total $(el)"
