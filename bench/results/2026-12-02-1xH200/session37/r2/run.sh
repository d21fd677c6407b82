# s37 r2, one H200: the router's backward GEMMs on bf16 operands (B: the router and dlogits rounded to bf16, one
# product each in gemm_f32x3, whose Hopper and mma.sync kernels now take B as bf16 values too) against HEAD (A: fp32
# accuracy, three and six products). Predicted: bwd_router_gemms 0.19-0.20 -> 0.05-0.08 ms at 8192 tokens (Qwen-like,
# EP1), about twice that at 16384; mokc-small-1gpu -2.5 to -3.5 ms a step (14 layer calls of 16384 tokens); the
# losses near A's (other bits: a numerics change). Tests first: gpu_gemm (every bf16 form, the identity products),
# gpu_moe (unfused against the CPU), mok, gpu_model (the model against the CPU, 2e-2), gpu_train.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev); rm -f /tmp/train-*
rm -rf /tmp/A; mkdir -p /tmp/A; tar cf - --exclude=./.deps . | (cd /tmp/A && tar xf -); cp -r .deps/ab-A/. /tmp/A/
(cd /tmp/A && make -j6 GIT_REVISION=$R-A mokc > /tmp/bA.log 2>&1 || echo "A build failed") &
make -j10 GIT_REVISION=$R-B mokc build/mokc_tests > /tmp/bB.log 2>&1 || { echo "B build failed"; grep -E "error" /tmp/bB.log | head; exit 1; }
wait; echo "built $(el)"
for t in gpu_gemm gpu_moe mok gpu_model gpu_train; do
  MOKC_BIN=build/mokc timeout 300 build/mokc_tests $t > $OUT/test-$t.log 2>&1; echo "test $t rc $? $(el): $(tail -1 $OUT/test-$t.log)"
  grep -E "^FAIL|FAIL " $OUT/test-$t.log | head -5
done
grep -E "worst gradient error" $OUT/test-gpu_model.log | head -4
ln -sfn $PWD /tmp/B
for v in A B; do for n in 8192 16384; do
  (cd /tmp/$v && timeout 120 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --tokens $n \
    --collapse > /tmp/bench-$v-$n.log 2>&1); echo "bench $v $n rc $? $(el)"
  grep moe_phases /tmp/bench-$v-$n.log > $OUT/phases-$v-$n.jsonl
done; done
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for iv in A1 B1 A2 B2; do v=${iv%?}
  (cd /tmp/$v && timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=25 \
    --set log.metrics_path=/tmp/train-$iv.jsonl > /tmp/train-$iv.log 2>&1)
  echo "$iv rc $? $(el)"
done
python3 - "$OUT" <<'PY' | tee $OUT/summary.txt
import json, sys
out = sys.argv[1]
for v in ('A', 'B'):
    for n in (8192, 16384):
        try: p = json.loads(open('%s/phases-%s-%d.jsonl' % (out, v, n)).readline())
        except Exception as e: print(v, n, e); continue
        print('%s %5d tokens: bwd_router_gemms %.4f ms, bwd_kernel %.4f, fwd_router_gemm %.4f, bwd_scatter %.4f' % (
              v, n, p['bwd_router_gemms_ms'], p['bwd_kernel_ms'], p['fwd_router_gemm_ms'], p['bwd_scatter_ms']))
runs = {}
for v in ('A1', 'B1', 'A2', 'B2'):
    try: runs[v] = [json.loads(l) for l in open('/tmp/train-%s.jsonl' % v) if '"step"' in l]
    except Exception as e: print(v, e)
for v in sorted(runs):
    r = runs[v]
    w = [x for x in r if x['step'] > 10 and x['step'] != 25]
    ms = sum(x['ms'] for x in w) / max(len(w), 1)
    parts = {}
    for x in w:
        for k, t in x.get('gpu_ms', {}).items(): parts[k] = parts.get(k, 0) + t / len(w)
    print('%s steps 11-30 %.2f ms | %s | losses == %s1: %s | loss 10 %.6f loss 30 %.6f' % (v, ms,
          ' '.join('%s %.2f' % kv for kv in sorted(parts.items())), v[0],
          [x['loss'] for x in r] == [x['loss'] for x in runs.get(v[0] + '1', [])], r[9]['loss'], r[-1]['loss']))
    p = next((x['op_ms'] for x in r if 'op_ms' in x), {})
    print('   step 25:', ', '.join('%s %.2f' % (k, p[k]['ms']) for k in p if k in ('moe fwd', 'moe bwd')))
if 'A1' in runs and 'B1' in runs:
    d = max(abs(a['loss'] - b['loss']) / a['loss'] for a, b in zip(runs['A1'], runs['B1']))
    print('B1 against A1: worst relative loss difference over 30 steps %.2e' % d)
PY
cd /tmp && tar czf $OUT/r2.tgz train-*.jsonl train-A1.log train-B1.log
echo "total $(el)"
