# s27 r8 (1xH200): the full scripts/gpu-check.sh at a9c2d06 (the head's logits as codes, be7aa1a); then
# mokc-small-1gpu as configured, 16 steps, step 8 profiled.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
OUT_ALL=$OUT; export OUT=$OUT_ALL/gpu-check
scripts/gpu-check.sh > $OUT_ALL/gpu-check.log 2>&1; echo "gpu-check rc=$? $(el)"
grep -E "rc=|passed" $OUT_ALL/gpu-check.log | tail -12
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1
./mokc train configs/mokc-small-1gpu.json --set train.steps=16 --set train.warmup_steps=2 --set data.train=/tmp/repo.h5 \
  --set data.val= --set log.every=1 --set log.profile_step=8 --set log.metrics_path=$OUT_ALL/train.jsonl \
  > $OUT_ALL/train.log 2>&1; echo "train rc=$? $(el)"
grep -E "^steps|GPU time|GPU memory plan|head logits|cross-entropy" $OUT_ALL/train.log
