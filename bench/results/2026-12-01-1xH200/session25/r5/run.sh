# s25 r5 (1xH200): RoPE's inverse on dq and dk inside the flash backward (the wgmma kernel rotates as it writes: dk at
# the end, dq in the diagonal block, at D = 128 across its two consumers through the dQ slot), instead of two gpu_rope
# passes after it. A = HEAD (c995820), B = the working tree. Tests on B: gpu_attention (a new case: the bits of the
# backward + gpu_rope, every variant), gpu_model, gpu_rope. Then mokc-small-1gpu A B A B, step 8 profiled.
# Predicted: "rope bwd" (0.045 ms x 32 a step) gone, "attention bwd" +0.005-0.03 ms a call; -0.5 to -1.3 ms a step;
# losses bitwise equal.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
rev=$(cat .deps/rev)
rm -rf /tmp/A; mkdir -p /tmp/A && tar --exclude=./build --exclude=./.deps -cf - . | tar -C /tmp/A -xf -
cp -r .deps/ab-rope/* /tmp/A/
(cd /tmp/A && make -j6 GIT_REVISION=$rev mokc > /tmp/bA.log 2>&1) &
make -j10 GIT_REVISION=$rev-rope mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
wait; [ -x /tmp/A/mokc ] || { echo "A build failed"; tail -5 /tmp/bA.log; exit 1; }
echo "built $(el)"
for s in gpu_attention gpu_rope gpu_gemm_sm90 gpu_model; do
  MOKC_BIN=./mokc timeout 300 build/mokc_tests $s > /tmp/test-$s.log 2>&1; echo "tests $s rc=$?: $(tail -1 /tmp/test-$s.log) $(el)"
  grep -E "FAIL" /tmp/test-$s.log | head -6
done
cat /tmp/test-*.log > $OUT/tests.log
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null || exit 1
for i in 1 2; do for v in A B; do
  bin=./mokc; [ $v = A ] && bin=/tmp/A/mokc
  timeout 100 $bin train configs/mokc-small-1gpu.json --set train.steps=10 --set train.warmup_steps=2 \
    --set data.train=/tmp/repo.h5 --set data.val= --set log.every=1 --set log.profile_step=8 \
    --set log.metrics_path=/tmp/train-$v$i.jsonl > /tmp/train-$v$i.log 2>&1
  echo "$v$i rc $? $(el): $(grep -E '^steps ' /tmp/train-$v$i.log)"
  grep -E '^  (attention bwd|rope bwd) ' /tmp/train-$v$i.log | head -2
done; done
python3 - <<'PY'
import json
def rec(f): return [json.loads(l) for l in open(f) if '"step"' in l]
ms = lambda r: sum(x['ms'] for x in r if 6 <= x['step'] <= 10 and x['step'] != 8) / 4
for i in (1, 2):
    a, b = rec('/tmp/train-A%d.jsonl' % i), rec('/tmp/train-B%d.jsonl' % i)
    print('pair %d: losses bitwise equal: %s; steps 6,7,9,10 mean A %.1f B %.1f ms'
          % (i, [x['loss'] for x in a] == [y['loss'] for y in b], ms(a), ms(b)))
PY
tar -C /tmp -czf $OUT/runs.tgz $(cd /tmp && ls train-*.log train-*.jsonl)
echo "total $(el)"
