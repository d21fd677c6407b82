# Prepared in s28 for a session with the 2-GPU kind (≈ 4 minutes): why the unfused layer's MoE part grows 2-2.5x as
# the router's load spreads (perf-notes "After s28": ≈ 543 ms a step at steps 11-40, 1364 at 71-100; the
# megakernel's does not). mokc-small unfused, 95 steps, step 90 timed op by op, and the host's view (a step's
# wall time against the GPU time by part: a launch-bound layer shows GPU parts well below the step).
# s29 found the cause on one GPU (cuBLAS's heuristic asked for every new row count; perf-notes "After s29") and
# kept a fix: at or after that commit this call measures it at EP2. Predicted: the MoE part ≈ 590 ms a step at
# steps 71-95 instead of 1364, the step ≈ 950 ms over steps 20-95.
# Copy to .deps/, set .deps/rev to the commit, and run with carry [".deps"] on nvidia-h200-x2.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
echo "built $(el)"
timeout 400 mpirun -np 2 ./mokc train configs/mokc-small.json --set moe_impl=unfused --set train.steps=95 \
  --set data.train=/tmp/repo.h5 --set data.val= --set log.every=5 --set log.profile_step=90 \
  --set log.metrics_path=$OUT/train-unfused.jsonl > $OUT/train-unfused.log 2>&1
echo "train rc $? $(el)"
sed -n '/op by op/,/^  embedding /p' $OUT/train-unfused.log | head -30
python3 - "$OUT" <<'PY'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1] + '/train-unfused.jsonl') if '"step"' in l]
for x in r:
    if x['step'] in (15, 30, 60, 89, 90, 91):
        g = x['gpu_ms']; print(x['step'], 'ms %.0f' % x['ms'], 'gpu parts %.0f' % sum(g.values()), g,
                               'load %.1f' % x['load_max_over_mean'])
PY
echo "total $(el)"
