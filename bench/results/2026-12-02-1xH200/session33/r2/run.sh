# s33 r2: the q, k, v projections' input gradient as one product over K = QD + 2 KD (B: dq, dk, dv written into one
# row a token by the attention backward, the layers' bf16 wq, wk, wv copied side by side after each update, one rope
# pass over dq's and dk's heads), against HEAD (A). Every test on B; mokc-small-1gpu 30 steps A B A B; bench attn.
# Predicted (r1's probe: 0.571 -> 0.443 ms at 16384 tokens alone; 0.667 a call in training): B -2.0 to -2.4 ms a
# step; memory plan +160 MiB (the copies: 8 layers x 2048 x 5120 x 2 B); B's losses differ from A's (d ln1 summed
# in another order), B1 == B2 bitwise.
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
./mokc bench attn > $OUT/bench-attn.log 2>&1; echo "bench attn rc $? $(el)"; tail -4 $OUT/bench-attn.log
MOKC_BIN=build/mokc timeout 300 build/mokc_tests > $OUT/tests.log 2>&1; echo "tests rc $? $(el): $(tail -1 $OUT/tests.log)"
grep -h "FAIL\|fail " $OUT/tests.log | head -20
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
    print('   step 25:', ', '.join('%s %.2f' % (k, p[k]['ms']) for k in p if 'proj' in k or 'rope' in k or 'adamw' in k
          or 'attention' in k))
PY
echo "total $(el)"
