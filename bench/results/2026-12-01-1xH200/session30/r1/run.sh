# s30 r1: AdamW on its own low-priority stream under the next step's forward (B), against HEAD (A) and B with the
# optimizer's stream at the compute stream's priority (C). mokc-small-1gpu, 30 steps each, A B C A B C.
# Predicted: B -10 to -18 ms a step (adamw 29.8 ms a step, HBM-bound, hidden under the first micro-batch's
# forward, less what the forward's kernels lose to it); losses bitwise equal to A's.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev)
mkdir -p /tmp/A /tmp/C
tar cf - --exclude=./.deps --exclude=./build . | (cd /tmp/A && tar xf -)
tar cf - --exclude=./.deps --exclude=./build . | (cd /tmp/C && tar xf -)
cp .deps/ab-A/src/gpu/model_gpu.c /tmp/A/src/gpu/model_gpu.c
sed -i 's/cudaStreamCreateWithPriority(&g->opt_stream, cudaStreamNonBlocking, least)/cudaStreamCreateWithPriority(\&g->opt_stream, cudaStreamNonBlocking, greatest)/' /tmp/C/src/gpu/model_gpu.c
grep -c 'opt_stream, cudaStreamNonBlocking, greatest' /tmp/C/src/gpu/model_gpu.c
(make -j6 GIT_REVISION=$R mokc build/mokc_tests > /tmp/bB.log 2>&1 || echo "B build failed") &
(cd /tmp/A && make -j5 GIT_REVISION=$R mokc > /tmp/bA.log 2>&1 || echo "A build failed") &
(cd /tmp/C && make -j5 GIT_REVISION=$R mokc > /tmp/bC.log 2>&1 || echo "C build failed") &
wait
echo "built $(el)"
ln -s $PWD /tmp/B
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for s in gpu_model gpu_train; do
  MOKC_BIN=./mokc timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "test $s rc $? $(el): $(tail -1 $OUT/test-$s.log)"
done
for i in 1 2; do for v in A B C; do
  (cd /tmp/$v && timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=25 \
    --set log.metrics_path=$OUT/train-$v$i.jsonl > $OUT/train-$v$i.log 2>&1)
  echo "$v$i rc $? $(el)"
done; done
python3 - "$OUT" <<'PY'
import json, sys
runs = {}
for v in ('A1', 'B1', 'C1', 'A2', 'B2', 'C2'):
    try: runs[v] = [json.loads(l) for l in open('%s/train-%s.jsonl' % (sys.argv[1], v)) if '"step"' in l]
    except Exception as e: print(v, e)
base = [x['loss'] for x in runs.get('A1', [])]
for v, r in runs.items():
    w = [x for x in r if x['step'] > 10 and x['step'] != 25]
    ms = sum(x['ms'] for x in w) / max(len(w), 1)
    parts = {k: sum(x['gpu_ms'][k] for x in w) / max(len(w), 1) for k in (w[0]['gpu_ms'] if w else {})}
    same = [x['loss'] for x in r] == base
    print('%s steps 11-30 %.1f ms, mfu %.1f%% | %s | losses == A1: %s' % (v, ms, 100 * sum(x['mfu'] for x in w) / max(len(w), 1),
          ' '.join('%s %.1f' % (k, parts[k]) for k in parts), same))
    p = next((x['op_ms'] for x in r if 'op_ms' in x), {})
    print('   step 25:', ', '.join('%s %.1f' % (k, p[k]['ms']) for k in p if p[k]['ms'] > 5 or 'adamw' in k))
PY
echo "total $(el)"
