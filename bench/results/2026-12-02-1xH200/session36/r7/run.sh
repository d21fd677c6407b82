# s36 r7: r6 showed the fused squares' sum (gpu_sum_f32: one block over 1.03 M floats) at 0.45 ms a step on the
# critical path; now REDUCE_PARTIALS blocks (gpu_sum_f32_partials), then the fixed final sum. Predicted: "grad norm"
# 0.45 -> ≈ 0.07 ms, the step ≈ -0.4 ms against r6 B (377.3-377.8), same bits. Tests: gpu_reduce, gpu_model, mok.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev); rm -f /tmp/train-*
make -j16 GIT_REVISION=$R-B mokc build/mokc_tests > /tmp/bB.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/bB.log | head; exit 1; }
echo "built $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
for t in gpu_reduce gpu_model mok; do
  MOKC_BIN=build/mokc timeout 240 build/mokc_tests $t > $OUT/test-$t.log 2>&1; echo "test $t rc $? $(el): $(tail -1 $OUT/test-$t.log)"
  grep -E "FAIL" $OUT/test-$t.log | head -5
done
for i in 1 2; do
  timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=30 --set data.val= \
    --set data.train=/tmp/repo.h5 --set log.every=1 --set log.profile_step=25 \
    --set log.metrics_path=/tmp/train-B$i.jsonl > /tmp/train-B$i.log 2>&1
  echo "B$i rc $? $(el)"
done
python3 - <<'PY' | tee $OUT/summary.txt
import json
for v in ('B1', 'B2'):
    r = [json.loads(l) for l in open('/tmp/train-%s.jsonl' % v) if '"step"' in l]
    w = [x for x in r if x['step'] > 10 and x['step'] != 25]
    p = next((x['op_ms'] for x in r if 'op_ms' in x), {}); print('%s steps 11-30 %.2f ms | loss 30 %.6f | grad norm op %.3f | losses %s' % (v, sum(x['ms'] for x in w) / len(w), r[-1]['loss'], p.get('grad norm', {}).get('ms', -1),
          ' '.join('%.6f' % x['loss'] for x in r[:3])))
PY
cd /tmp && tar czf $OUT/r7.tgz train-*.jsonl
echo "total $(el)"
