# s22 r5 (1×H200): every kernel of mokc-small-1gpu's training step timed by Nsight Compute (gpu__time_duration,
# no cache flush, no clock lock; kernels serialised), one micro-batch of 2 sequences a step, 2 steps: where the
# attention and dense parts' time goes, kernel by kernel.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/build.log 2>&1 || { tail -20 /tmp/build.log; exit 1; }
echo "built $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 || exit 1
timeout 420 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --page raw \
  ./mokc train configs/mokc-small-1gpu.json --set train.steps=2 --set train.warmup_steps=1 --set train.grad_accum=1 \
  --set data.train=/tmp/repo.h5 --set data.val= --set log.metrics_path=$OUT/train.jsonl > $OUT/ncu.csv 2> $OUT/ncu.err
echo "ncu rc $? $(el)"; tail -3 $OUT/ncu.err; wc -l $OUT/ncu.csv; grep -c 'adamw' $OUT/ncu.csv
gzip $OUT/ncu.csv
