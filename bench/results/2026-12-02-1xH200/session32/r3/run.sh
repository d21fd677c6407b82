# s32 r3: r2 found the router's backward GEMMs slower from bf16 x (+0.017 ms at 8192 tokens): the weight gradient's
# A is x transposed, whose bf16 pair was joined at the load. B joins it when multiplied (as the fp32 values are
# split then), against HEAD (A). Predicted: bwd_router_gemms 0.220 -> <= 0.203 ms at 8192 (0.407 -> <= 0.37 at
# 16384); the same bits (gpu_gemm's bf16 runs equal the fp32 runs); mokc-small-1gpu -0.3 to -0.5 ms a step.
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
for s in gpu_gemm gpu_model; do
  MOKC_BIN=./mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "test $s rc $? $(el): $(tail -1 $OUT/test-$s.log)"
done
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for i in 1 2; do for v in A B; do
  for t in 8192 16384; do
    (cd /tmp/$v && timeout 100 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --tokens $t \
      --accumulate --record $OUT/bench-$v$i-$t.jsonl > /tmp/bench-$v$i-$t.log 2>&1); echo "bench $v$i-$t rc $?"
  done
  (cd /tmp/$v && timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.metrics_path=/tmp/train-$v$i.jsonl > /tmp/train-$v$i.log 2>&1)
  echo "train $v$i rc $? $(el)"
done; done
python3 - "$OUT" <<'PY'
import json, sys
keys = ['fwd_router_gemm_ms', 'bwd_router_gemms_ms', 'bwd_kernel_ms']
for t in ('8192', '16384'):
  for n in ('A1', 'B1', 'A2', 'B2'):
    r = [json.loads(l) for l in open('%s/bench-%s-%s.jsonl' % (sys.argv[1], n, t))]
    m = next(x for x in r if x.get('impl') == 'mok' and 'fwd_ms' in x)
    p = next((x for x in r if 'fwd_kernel_ms' in x), {})
    print('%-10s %8.3f %8.3f ' % (n + '-' + t, m['fwd_ms'], m['fwdbwd_ms']) + ' '.join('%s %.4f' % (k, p.get(k, 0)) for k in keys))
runs = {}
for v in ('A1', 'B1', 'A2', 'B2'):
    runs[v] = [json.loads(l) for l in open('/tmp/train-%s.jsonl' % v) if '"step"' in l]
for v, r in runs.items():
    w = [x for x in r if x['step'] > 10]
    print('%s steps 11-30 %.1f ms, mfu %.2f%% | losses == A1: %s' % (v, sum(x['ms'] for x in w) / len(w),
          100 * sum(x['mfu'] for x in w) / len(w), [x['loss'] for x in r] == [x['loss'] for x in runs['A1']]))
PY
echo "total $(el)"
