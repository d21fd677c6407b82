# s23 r9, prepared for the next session (1×H200): log.profile_step (a step timed op by op: CUDA events at every op's start in that step only).
# gpu_model (test_profile: the ops' times add up to the parts', the expected ops and calls), then mokc-small-1gpu
# 8 steps with log.profile_step=6: the table on stdout and op_ms in step 6's record line; the step times of the
# other steps against r8's (the marks of an unprofiled step now record only changes of part).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev)-profile mokc build/mokc_tests > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
for t in gpu_model mok gpu_moe_unfused; do # test_profile; the residual off alignment (d815078)
  MOKC_BIN=build/mokc build/mokc_tests $t > $OUT/test-$t.log 2>&1; echo "$t rc $?: $(tail -1 $OUT/test-$t.log)"
  grep -E 'FAIL|profiled step' $OUT/test-$t.log | head -8
done
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null || exit 1
timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=8 --set train.warmup_steps=2 \
  --set data.train=/tmp/repo.h5 --set data.val= --set log.every=1 --set log.profile_step=6 \
  --set log.metrics_path=$OUT/train.jsonl > $OUT/train.log 2>&1
echo "train rc $? $(el)"
grep -E '^step |^steps |GPU time' $OUT/train.log | grep -v '^step     [1-4]/' | head -4
sed -n '/op by op/,/^  all/p' $OUT/train.log
python3 -c "
import json
for l in open('$OUT/train.jsonl'):
    r = json.loads(l)
    if 'op_ms' in r: print('record step', r['step'], len(r['op_ms']), 'ops, sum %.2f ms, gpu_ms sum %.2f' % (sum(v['ms'] for v in r['op_ms'].values()), sum(r['gpu_ms'].values())))
"
