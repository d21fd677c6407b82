# s23 r1 (2×H200): 9147800. The suites s22 changed (gpu_model with the head's 21-row passes, gpu_cast's one add,
# gpu_gemm's out-of-place product), then scripts/bench.sh: the sweep at EP1/EP2 and mokc-small at EP2 100 steps
# (mok twice, unfused once), with the run record's EP-rank load per layer.
# Predicted: mokc-small ~ 38.5-39 % MFU (s21 r7 37.9 % + the head's -13 ms and the residual's -2 ms a micro-batch
# pair at EP2's per-GPU work); the two mok curves bitwise equal.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
which nsys ncu; ls /usr/local/cuda/bin | grep -E 'nsys|ncu'
make -j30 GIT_REVISION=$(cat .deps/rev) all build/mokc_tests > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }; echo "built $(el)"
STEPS=100 timeout 440 scripts/bench.sh /tmp/bench-sh > /tmp/bench-sh.out 2>&1; echo "bench.sh rc=$? $(el)"
cp /tmp/bench-sh.out /tmp/bench-sh/logs/
tar -C /tmp -czf $OUT/bench-sh.tgz bench-sh
grep -vE '^ *[0-9]+ ' /tmp/bench-sh.out | tail -30
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob('/tmp/bench-sh/records/train-*.jsonl')):
    print('==', f.split('/')[-1])
    for l in open(f):
        r = json.loads(l)
        v = r.get('ep_rank_load_max_over_mean_by_layer')
        if v and r.get('step', 0) % 10 == 0:
            parts = {k: round(x, 1) for k, x in r.get('gpu_ms', {}).items()}
            print(r['step'], 'ep-rank max/mean: mean %.3f max %.3f' % (sum(v) / len(v), max(v)), parts)
PY
for s in gpu_model gpu_cast gpu_gemm; do
  MOKC_BIN=build/mokc timeout 120 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"
  grep -E "FAIL" $OUT/test-$s.log | head -6
done
echo "total $(el)"
