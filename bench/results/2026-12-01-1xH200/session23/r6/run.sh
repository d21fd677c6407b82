# s23 r6 (1×H200: the 2-GPU kind not lent): the review's fix of the RMSNorm backward (the roundings spelled out, the
# scratch alignment). gpu_rmsnorm (every shape again one element off alignment: the same bits), then
# mokc-small-1gpu 10 steps as r5's A runs (c4deeaa): the losses must equal r5's A1 bit for bit (the spelled-out
# roundings are what the vector form compiled to). Then the full scripts/gpu-check.sh.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) all build/mokc_tests > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
MOKC_BIN=build/mokc build/mokc_tests gpu_rmsnorm > $OUT/test-gpu_rmsnorm.log 2>&1; echo "gpu_rmsnorm rc $?: $(tail -1 $OUT/test-gpu_rmsnorm.log)"
grep FAIL $OUT/test-gpu_rmsnorm.log | head -5
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null || exit 1
timeout 100 ./mokc train configs/mokc-small-1gpu.json --set train.steps=10 --set train.warmup_steps=2 \
  --set data.train=/tmp/repo.h5 --set data.val= --set log.every=1 --set log.metrics_path=$OUT/train.jsonl > $OUT/train.log 2>&1
echo "train rc $? $(el): $(grep -E '^steps ' $OUT/train.log)"
g() { grep -o '"step": [0-9]*, "loss": [^,]*' "$1"; }
[ "$(g $OUT/train.jsonl)" = "$(g bench/results/2026-12-01-1xH200/session23/r5/train-A1.jsonl)" ] && echo "losses: bitwise equal to r5 A1" || echo "losses: DIFFER from r5 A1"
OUT=/tmp/gc timeout 420 scripts/gpu-check.sh > /tmp/gc.out 2>&1; echo "gpu-check rc $? $(el)"
tail -32 /tmp/gc.out
cp /tmp/gc.out /tmp/gc/ 2>/dev/null; tar -C /tmp -czf $OUT/gpu-check.tgz gc
