# s26 r8 (1xH200): does r7's faster GEMMs' time go to the power limit? A = HEAD, B = r7's timed choice of cuBLASLt
# algorithms (bitwise equal results). mokc-small-1gpu 16 steps A B A B with nvidia-smi sampling power and SM clock
# every 100 ms; steady state = the samples of steps 4-16 (by time stamps of the step lines).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
rev=$(cat .deps/rev)
rm -rf /tmp/B; mkdir -p /tmp/B && tar --exclude=./build --exclude=./.deps -cf - . | tar -C /tmp/B -xf -
cp -r .deps/ab-B (r7/gemm-plans-timed-choice-not-kept.diff applied: gemm.c, gemm.h, kernels/checksum.*)/* /tmp/B/
(cd /tmp/B && make -j6 GIT_REVISION=$rev-B mokc > /tmp/bB.log 2>&1) &
make -j10 GIT_REVISION=$rev-A mokc > /tmp/bA.log 2>&1 || { echo "A build failed"; tail -20 /tmp/bA.log; exit 1; }
wait; [ -x /tmp/B/mokc ] || { echo "B build failed"; tail -5 /tmp/bB.log; exit 1; }
rm -rf /tmp/A; ln -s $PWD /tmp/A
echo "built $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null || exit 1
for i in 1 2; do for v in A B; do
  nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,temperature.gpu --format=csv,noheader,nounits -lms 100 > /tmp/smi-$v$i.csv &
  smi=$!
  s0=$(date +%s.%N)
  timeout 120 /tmp/$v/mokc train configs/mokc-small-1gpu.json --set train.steps=16 --set train.warmup_steps=2 \
    --set data.train=/tmp/repo.h5 --set data.val= --set log.every=1 \
    --set log.metrics_path=/tmp/train-$v$i.jsonl > /tmp/train-$v$i.log 2>&1
  rc=$?; kill $smi; wait $smi 2>/dev/null
  echo "$v$i rc $rc $(el): $(grep -E '^steps ' /tmp/train-$v$i.log)"
done; done
python3 - <<'PY'
import json, statistics as st
def rec(f): return [json.loads(l) for l in open(f) if '"step"' in l]
for t in ('A1', 'B1', 'A2', 'B2'):
    r = rec('/tmp/train-%s.jsonl' % t)
    steady = [x['ms'] for x in r if x['step'] >= 4]
    rows = [l.strip().split(', ') for l in open('/tmp/smi-%s.csv' % t) if l.count(',') == 3]
    # the steady state: the last sum(steady) ms of samples before the power falls at the end
    busy = [(float(p), float(c)) for _, p, c, _ in rows if float(p) > 300]
    n = int(sum(steady) / 100)  # 100 ms samples
    tail = busy[-n:] if n and len(busy) >= n else busy
    print('%s: steps 4-16 mean %.1f ms; power %.0f W, SM clock %.0f MHz over %d samples; loss %.6f'
          % (t, st.mean(steady), st.mean(p for p, _ in tail), st.mean(c for _, c in tail), len(tail), r[-1]['loss']))
PY
tar -C /tmp -czf $OUT/logs.tgz $(cd /tmp && ls train-*.log train-*.jsonl smi-*.csv)
echo "total $(el)"
