# s36 r1: three candidates' upper bounds on one H200, by doing their work twice (the same bits, so the trajectory and
# the router's collapse are A's): B = the gradient norm's squares read twice (22 GB a step on the comm stream under
# the backward); C = the dgrad epilogue's SwiGLU backward arithmetic twice (what saved derivatives would remove);
# D = the gate/up epilogue's SwiGLU arithmetic twice (what a hand-off would hide). Predicted step deltas over A:
# B +1.5 to +4 ms, C +1 to +2 (moe bwd), D +1 to +1.5 (moe fwd).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev)
make -j16 GIT_REVISION=$R mokc > /tmp/bA.log 2>&1 || { echo "A build failed"; tail -20 /tmp/bA.log; exit 1; }
echo "built A $(el)"
for v in B C D; do rm -rf /tmp/$v; mkdir -p /tmp/$v; tar cf - --exclude=./.deps . | (cd /tmp/$v && tar xf -)
  cp -r .deps/ab-$v/. /tmp/$v/; find .deps/ab-$v -type f | sed "s|.deps/ab-$v/||" | (cd /tmp/$v && xargs touch)
  (cd /tmp/$v && make -j5 GIT_REVISION=$R-$v mokc > /tmp/b$v.log 2>&1 || echo "$v build failed") & done; wait
ln -s $PWD /tmp/A; echo "built B C D $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for v in A C D; do (cd /tmp/$v && ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok \
  --tokens 16384 --collapse --accumulate --iters 20 2>&1 | grep -E '"impl": *"mok"|fwd_ms' | head -2 > /tmp/bench-$v.txt)
  echo "bench $v $(el): $(python3 -c "
import json,sys
for l in open('/tmp/bench-$v.txt'):
  try: r=json.loads(l)
  except Exception: continue
  print('fwd %.4f fwd+bwd %.4f ms' % (r['fwd_ms'], r['fwdbwd_ms']))" 2>&1 | head -1)"; done
for iv in A1 B1 C1 D1 A2 B2 C2 D2; do v=${iv%?}
  (cd /tmp/$v && timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=25 \
    --set log.metrics_path=/tmp/train-$iv.jsonl > /tmp/train-$iv.log 2>&1)
  echo "$iv rc $? $(el)"
done
python3 - <<'PY' | tee $OUT/summary.txt
import json
runs = {}
for v in ('A1', 'B1', 'C1', 'D1', 'A2', 'B2', 'C2', 'D2'):
    try: runs[v] = [json.loads(l) for l in open('/tmp/train-%s.jsonl' % v) if '"step"' in l]
    except Exception as e: print(v, e)
for v in sorted(runs):
    r = runs[v]
    w = [x for x in r if x['step'] > 10 and x['step'] != 25]
    ms = sum(x['ms'] for x in w) / max(len(w), 1)
    parts = {}
    for x in w:
        for k, t in x.get('gpu_ms', {}).items(): parts[k] = parts.get(k, 0) + t / len(w)
    print('%s steps 11-30 %.2f ms | %s | losses == A1: %s' % (v, ms, ' '.join('%s %.2f' % kv for kv in sorted(parts.items())),
          [x['loss'] for x in r] == [x['loss'] for x in runs.get('A1', [])]))
    p = next((x['op_ms'] for x in r if 'op_ms' in x), {})
    print('   step 25:', ', '.join('%s %.2f' % (k, p[k]['ms']) for k in p if k in ('moe fwd', 'moe bwd', 'adamw', 'all-reduce wait', 'grad norm', 'attention bwd')))
PY
cat /tmp/bench-*.txt > $OUT/bench-moe.txt 2>/dev/null
cd /tmp && tar czf $OUT/r1.tgz train-*.jsonl train-A1.log train-B1.log bench-*.txt
echo "total $(el)"
