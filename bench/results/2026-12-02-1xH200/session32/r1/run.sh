# s32 r1: the router reads the layer's bf16 x (B: 3 bf16 products a router GEMM instead of 6, no fp32 copy of the
# normed x), against HEAD (A). Tests of everything touched on B; then mokc-small-1gpu 30 steps A B A B.
# Predicted: B -1.5 to -3 ms a step of ~392 (router fwd + dW at half the products, 7 layers x 2 micro-batches,
# the 128 MiB fp32 write and read a layer gone), +0.2-0.3 pp MFU; memory plan 896 MiB less (7 x 16384 x 2048 x 4 B);
# B's losses differ from A's (the router sees bf16 x) and B1 == B2 bitwise.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev)
mkdir -p /tmp/A
tar cf - --exclude=./.deps --exclude=./build . | (cd /tmp/A && tar xf -)
cp -r .deps/ab-A/. /tmp/A/
(make -j9 GIT_REVISION=$R-B mokc build/mokc_tests > /tmp/bB.log 2>&1 || { echo "B build failed"; tail -20 /tmp/bB.log; }) &
(cd /tmp/A && make -j7 GIT_REVISION=$R mokc > /tmp/bA.log 2>&1 || echo "A build failed") &
wait
echo "built $(el)"
ln -s $PWD /tmp/B
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for i in 1 2; do for v in A B; do
  (cd /tmp/$v && timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=25 \
    --set log.metrics_path=$OUT/train-$v$i.jsonl > $OUT/train-$v$i.log 2>&1)
  echo "$v$i rc $? $(el)"
done; done
for s in gpu_gemm gpu_rmsnorm gpu_moe_unfused mok gpu_model gpu_train; do
  MOKC_BIN=./mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "test $s rc $? $(el): $(tail -1 $OUT/test-$s.log)"
done
grep -h "FAIL\|fail " $OUT/test-*.log | head -20
grep -h "GPU memory plan" $OUT/train-A1.log $OUT/train-B1.log
python3 - "$OUT" <<'PY'
import json, sys
runs = {}
for v in ('A1', 'B1', 'A2', 'B2'):
    try: runs[v] = [json.loads(l) for l in open('%s/train-%s.jsonl' % (sys.argv[1], v)) if '"step"' in l]
    except Exception as e: print(v, e)
for v, r in runs.items():
    w = [x for x in r if x['step'] > 10 and x['step'] != 25]
    ms = sum(x['ms'] for x in w) / max(len(w), 1)
    parts = {k: sum(x['gpu_ms'][k] for x in w) / max(len(w), 1) for k in (w[0]['gpu_ms'] if w else {})}
    base = [x['loss'] for x in runs.get(v[0] + '1', [])]
    print('%s steps 11-30 %.1f ms, mfu %.2f%% | %s | losses == %s1: %s | loss 30 %.5f' % (v, ms,
          100 * sum(x['mfu'] for x in w) / max(len(w), 1), ' '.join('%s %.1f' % (k, parts[k]) for k in parts), v[0],
          [x['loss'] for x in r] == base, r[-1]['loss'] if r else 0))
    p = next((x['op_ms'] for x in r if 'op_ms' in x), {})
    print('   step 25:', ', '.join('%s %.1f' % (k, p[k]['ms']) for k in p if 'moe' in k or 'norm' in k))
PY
echo "total $(el)"
