# s26 r3 (1xH200): A = HEAD + the aux sums' batched loads (kept from r2) + the tests' new shapes; B = A + k's and
# v's dgrad products as one of depth 2 KD (dk | dv and wk | wv side by side by cudaMemcpy2DAsync).
# Tests on B (gpu_moe_unfused with the new shapes on HEAD's route kernel, gpu_model, gpu_train), then
# mokc-small-1gpu A B A B with step 8 profiled. Predicted: "q k v proj dgrad" 0.338 -> ~0.28 ms a call.
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
for s in gpu_moe_unfused gpu_model gpu_train; do
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
ms = lambda r: sum(x['ms'] for x in r if 6 <= x['step'] <= 10 and x['step'] != 8) / 4
def op(r, name):
    for x in r:
        if 'op_ms' in x and name in x['op_ms']: o = x['op_ms'][name]; return o['ms'] / o['calls']
for i in (1, 2):
    a, b = rec('/tmp/train-A%d.jsonl' % i), rec('/tmp/train-B%d.jsonl' % i)
    print('pair %d: steps 6,7,9,10 ms A %.1f B %.1f; qkv dgrad ms a call A %.4f B %.4f; wgrad A %.4f B %.4f'
          % (i, ms(a), ms(b), op(a, 'q k v proj dgrad'), op(b, 'q k v proj dgrad'), op(a, 'q k v proj wgrad'), op(b, 'q k v proj wgrad')))
    print('  losses A', ['%.6f' % x['loss'] for x in a][-3:], 'B', ['%.6f' % x['loss'] for x in b][-3:])
a1, a2, b1, b2 = (rec('/tmp/train-%s.jsonl' % t) for t in ('A1', 'A2', 'B1', 'B2'))
print('A runs bitwise equal: %s; B runs bitwise equal: %s' % ([x['loss'] for x in a1] == [x['loss'] for x in a2], [x['loss'] for x in b1] == [x['loss'] for x in b2]))
PY
tar -C /tmp -czf $OUT/logs.tgz $(cd /tmp && ls train-*.log train-*.jsonl test-*.log)
echo "total $(el)"
