# s32 r2: every test (CPU and GPU suites) on one H200 at HEAD (s32 r1's code: the router on bf16 x); then the
# Qwen-like layer at EP1 (8192 and 16384 tokens, scored and collapsed, adding) at 4036cca (A) and HEAD (B).
# Predicted: tests pass; B's router GEMMs (forward, weight gradient) at half the products: fwd -0.02 ms,
# fwd+bwd -0.045 ms at 8192 tokens, twice that at 16384.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev)
mkdir -p /tmp/A
tar cf - --exclude=./.deps --exclude=./build . | (cd /tmp/A && tar xf -)
cp -r .deps/ab-A/. /tmp/A/
(make -j10 GIT_REVISION=$R all build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; }) &
(cd /tmp/A && make -j6 GIT_REVISION=4036cca mokc > /tmp/bA.log 2>&1 || echo "A build failed") &
wait
echo "built $(el)"
ln -s $PWD /tmp/B
MOKC_BIN=build/mokc timeout 330 build/mokc_tests > $OUT/tests.log 2>&1; echo "tests rc=$?: $(tail -1 $OUT/tests.log) $(el)"
grep -E "^FAIL|FAIL " $OUT/tests.log | head -20
for i in 1 2; do for v in A B; do for t in 8192 16384; do for m in "" "--collapse"; do
  n=$v$i-$t${m:+-collapse}
  (cd /tmp/$v && timeout 100 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --tokens $t \
    --accumulate $m --record /tmp/bench-$n.jsonl > /tmp/bench-$n.log 2>&1); echo "$n rc $?"
done; done; done; done
echo "benched $(el)"
python3 - <<'PY'
import json
keys = ['fwd_router_gemm_ms', 'fwd_kernel_ms', 'bwd_kernel_ms', 'bwd_router_gemms_ms']
print('%-22s %8s %8s ' % ('run', 'fwd', 'fwd+bwd') + ' '.join('%9s' % k.replace('_ms', '')[:9] for k in keys))
for t in ('8192', '8192-collapse', '16384', '16384-collapse'):
  for i in ('1', '2'):
    for v in ('A', 'B'):
      n = '%s%s-%s' % (v, i, t)
      try: r = [json.loads(l) for l in open('/tmp/bench-%s.jsonl' % n)]
      except Exception as e: print(n, e); continue
      m = next(x for x in r if x.get('impl') == 'mok' and 'fwd_ms' in x)
      p = next((x for x in r if 'fwd_kernel_ms' in x), {})
      print('%-22s %8.3f %8.3f ' % (n, m['fwd_ms'], m['fwdbwd_ms']) + ' '.join('%9.4f' % p.get(k, 0) for k in keys))
PY
tar czf $OUT/bench.tgz -C /tmp $(cd /tmp && ls bench-*.jsonl bench-*.log)
echo "total $(el)"
