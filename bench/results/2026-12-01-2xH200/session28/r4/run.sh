# s28 r4 (1 GPU of the 2-GPU kind): the RMSNorm backward's dweight finish in a fixed two-level tree (B, tree) against
# one thread a column over all 512 blocks (A, HEAD). ncu durations of both kernels on mokc-small-1gpu (one step, one
# micro-batch); the dense-kernel suite on B; then ncu of every kernel of B's step, for the table of where a step goes.
# Predicted: finish ~25-40 us -> ~5 us a call.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
rev=$(cat .deps/rev)
rm -rf /tmp/A; mkdir -p /tmp/A && tar --exclude=./.deps -cf - . | tar -C /tmp/A -xf - && cp -r .deps/ab-A/. /tmp/A/
(cd /tmp/A && make -j14 GIT_REVISION=$rev-A mokc > /tmp/bA.log 2>&1) &
make -j16 GIT_REVISION=$rev mokc build/mokc_tests > /tmp/bB.log 2>&1 || { echo "B build failed"; tail -20 /tmp/bB.log; exit 1; }
wait; [ -x /tmp/A/mokc ] || { echo "A build failed"; tail -5 /tmp/bA.log; exit 1; }
rm -rf /tmp/B; ln -s $PWD /tmp/B; echo "built $(el)"
scripts/repo-tokens.sh /tmp/repo.h5 > /dev/null 2>&1 || { echo "data failed"; exit 1; }
MOKC_BIN=./mokc timeout 100 build/mokc_tests gpu_rmsnorm > $OUT/test-gpu_dense_kernels.log 2>&1
echo "tests gpu_dense_kernels rc=$?: $(tail -1 $OUT/test-gpu_dense_kernels.log) $(el)"; grep FAIL $OUT/test-gpu_dense_kernels.log | head
T="train configs/mokc-small-1gpu.json --set train.steps=2 --set train.warmup_steps=1 --set train.grad_accum=1 --set data.val= --set data.train=/tmp/repo.h5 --set log.metrics_path=/tmp/ncu-metrics.jsonl"
for v in A B; do
  CUDA_VISIBLE_DEVICES=0 timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --kernel-name regex:rmsnorm /tmp/$v/mokc $T > $OUT/ncu-rmsnorm-$v.csv 2> $OUT/ncu-$v.err
  echo "ncu $v rc $? $(el)"; python3 .deps/ncu_sum.py $OUT/ncu-rmsnorm-$v.csv | head -8
done
CUDA_VISIBLE_DEVICES=0 timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  ./mokc $T > $OUT/ncu-all-B.csv 2> $OUT/ncu-all.err
echo "ncu all rc $? $(el)"; python3 .deps/ncu_sum.py $OUT/ncu-all-B.csv > $OUT/ncu-all-B-summary.txt; head -45 $OUT/ncu-all-B-summary.txt
gzip $OUT/ncu-all-B.csv
echo "total $(el)"
