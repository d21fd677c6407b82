# Prepared in s29 (one H200 lent) for a session with the 2-GPU kind (≈ 8 minutes; s30 added the 2 x 4 run). Copy to .deps/, set .deps/rev to
# the commit (at or after s29's 733fbb3), run with carry [".deps"] on nvidia-h200-x2.
# 1. mokc-small at the same global batch split 4 x 2 instead of 2 x 4 (train.micro_batch x train.grad_accum), 100
#    steps: does it fit (s29 r8: 135 999.8 MiB planned of 143 771; the symmetric window passes 4 GiB), and how
#    fast? Predicted from s29 r4 (one GPU: 403.5 -> 394.1 ms, the MoE part -7.5 %): ≈ 675-689 ms a step against
#    r5's 714.7 (MFU ≈ 43.0-43.8 %), the loss alike. If it fits and wins, mokc-small.json takes 4 x 2 (as
#    mokc-small-1gpu.json has since s29).
#    (s32) The router reads bf16 x since 56f21db: the plan ≈ 1984 MiB lower at 4 x 2 (≈ 134 016 MiB), ≈ 992 at
#    2 x 4, and ≈ 3-4 ms a step less at either (s32 r1, r3 on one GPU: -1.8 ms at 14 layer calls of 16384 tokens).
#    (s33) The layers' bf16 wq, wk, wv copied side by side for the one-product q, k, v input gradient: +320 MiB a
#    rank (≈ 134 336 MiB at 4 x 2); that gradient ≈ -4.5 ms a step and the logits epilogue ≈ -0.5 (s33 r3, r4).
# 2. mokc-small unfused as configured, 95 steps, step 90 op by op (s28's next/unfused-late-profile.sh): s29's fix of
#    the unfused layer's host time at EP2. Predicted: the MoE part ≈ 590 ms a step at steps 71-95 (1364 in s28 r2),
#    the step ≈ 950 ms over steps 20-95 (1323).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
echo "built $(el)"
nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader -lms 500 > $OUT/mem-4x2.csv &
smi=$!
timeout 200 mpirun -np 2 ./mokc train configs/mokc-small.json --set train.micro_batch=4 --set train.grad_accum=2 \
  --set data.train=/tmp/repo.h5 --set data.val= --set log.every=1 --set log.profile_step=50 \
  --set log.metrics_path=$OUT/train-4x2.jsonl > $OUT/train-4x2.log 2>&1
echo "4x2 rc $? $(el): $(grep -E '^steps ' $OUT/train-4x2.log)"
kill $smi; grep -E 'GPU memory plan|error' $OUT/train-4x2.log | head -3
echo "peak MiB a GPU: $(sort -t, -k2 -n $OUT/mem-4x2.csv | tail -1)"
# (s30) 2 x 4 as configured in the same call: the lent machines differ by up to 5 % on unchanged ops (s28 r3-r5)
timeout 200 mpirun -np 2 ./mokc train configs/mokc-small.json \
  --set data.train=/tmp/repo.h5 --set data.val= --set log.every=1 --set log.profile_step=50 \
  --set log.metrics_path=$OUT/train-2x4.jsonl > $OUT/train-2x4.log 2>&1
echo "2x4 rc $? $(el): $(grep -E '^steps ' $OUT/train-2x4.log)"
timeout 300 mpirun -np 2 ./mokc train configs/mokc-small.json --set moe_impl=unfused --set train.steps=95 \
  --set data.train=/tmp/repo.h5 --set data.val= --set log.every=1 --set log.profile_step=90 \
  --set log.metrics_path=$OUT/train-unfused.jsonl > $OUT/train-unfused.log 2>&1
echo "unfused rc $? $(el): $(grep -E '^steps ' $OUT/train-unfused.log)"
python3 - "$OUT" <<'PY'
import json, sys
for v in ('4x2', '2x4', 'unfused'):
    try: r = [json.loads(l) for l in open('%s/train-%s.jsonl' % (sys.argv[1], v)) if '"step"' in l]
    except Exception as e: print(v, e); continue
    for a in (21, 41, 61, 81):
        w = [x for x in r if a <= x['step'] < a + 20 and x['step'] not in (50, 90)]
        if w: print(v, 'steps %d-%d: %.1f ms, MFU %.1f %%, moe %.1f ms, loss %.4f' % (w[0]['step'], w[-1]['step'],
              sum(x['ms'] for x in w) / len(w), 100 * sum(x['mfu'] for x in w) / len(w),
              sum(x['gpu_ms'].get('moe', 0) for x in w) / len(w), sum(x['loss'] for x in w) / len(w)))
PY
sed -n '/op by op/,/^  embedding /p' $OUT/train-unfused.log | head -12
echo "total $(el)"
