# s26 r4 (1xH200): A = HEAD + r2's kept aux batches (gemm.c as HEAD: cuBLASLt with no workspace); B = the
# cuBLASLt GEMMs given a 32 MiB workspace (the heuristic may then pick the algorithms that need one).
# Tests on B: gpu_gemm, gpu_model, gpu_attention; mokc-small-1gpu A B A B with step 8 profiled: every op's time,
# and the runs' losses bitwise equal run to run (A1 = A2, B1 = B2).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
rev=$(cat .deps/rev)
rm -rf /tmp/A; mkdir -p /tmp/A && tar --exclude=./build --exclude=./.deps -cf - . | tar -C /tmp/A -xf -
cp -r .deps/ab-A/* /tmp/A/
(cd /tmp/A && make -j6 GIT_REVISION=$rev-A mokc > /tmp/bA.log 2>&1) &
make -j10 GIT_REVISION=$rev-B mokc build/mokc_tests > /tmp/bB.log 2>&1 || { echo "B build failed"; tail -20 /tmp/bB.log; exit 1; }
wait; [ -x /tmp/A/mokc ] || { echo "A build failed"; tail -5 /tmp/bA.log; exit 1; }
rm -rf /tmp/B; ln -s $PWD /tmp/B
echo "built $(el)"
for s in gpu_gemm gpu_model gpu_attention; do
  MOKC_BIN=./mokc timeout 300 build/mokc_tests $s > /tmp/test-$s.log 2>&1; echo "tests $s rc=$?: $(tail -1 /tmp/test-$s.log) $(el)"
  grep -E "FAIL" /tmp/test-$s.log | head -6
done
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null || exit 1
for i in 1 2; do for v in A B; do
  timeout 100 /tmp/$v/mokc train configs/mokc-small-1gpu.json --set train.steps=10 --set train.warmup_steps=2 \
    --set data.train=/tmp/repo.h5 --set data.val= --set log.every=1 --set log.profile_step=8 \
    --set log.metrics_path=/tmp/train-$v$i.jsonl > /tmp/train-$v$i.log 2>&1
  echo "$v$i rc $? $(el): $(grep -E '^steps ' /tmp/train-$v$i.log)"
done; done
python3 - <<'PY'
import json
def rec(f): return [json.loads(l) for l in open(f) if '"step"' in l]
R = {t: rec('/tmp/train-%s.jsonl' % t) for t in ('A1', 'A2', 'B1', 'B2')}
ms = lambda r: sum(x['ms'] for x in r if 6 <= x['step'] <= 10 and x['step'] != 8) / 4
L = lambda r: [x['loss'] for x in r]
print('bitwise run to run: A %s, B %s; A vs B equal: %s' % (L(R['A1']) == L(R['A2']), L(R['B1']) == L(R['B2']), L(R['A1']) == L(R['B1'])))
for t in R: print(t, 'steps 6,7,9,10 %.1f ms' % ms(R[t]), 'last losses', ['%.5f' % v for v in L(R[t])[-2:]])
ops = lambda r: next(x['op_ms'] for x in r if 'op_ms' in x)
oa, ob = ops(R['A1']), ops(R['B1']); oa2, ob2 = ops(R['A2']), ops(R['B2'])
print('%-22s %8s %8s %8s %8s  (ms a step, step 8)' % ('op', 'A1', 'B1', 'A2', 'B2'))
for k in oa:
    if oa[k]['ms'] > 0.5: print('%-22s %8.2f %8.2f %8.2f %8.2f' % (k, oa[k]['ms'], ob[k]['ms'], oa2[k]['ms'], ob2[k]['ms']))
PY
tar -C /tmp -czf $OUT/logs.tgz $(cd /tmp && ls train-*.log train-*.jsonl test-*.log)
echo "total $(el)"
