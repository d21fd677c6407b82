# s10 call 5 (nvidia-h200-x2, c3b2e36): the full scripts/gpu-check.sh on this session's last code,
# then a Kimi-like trace with the consumers' wait for tasks split by task kind.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
OUT_FILES=$OUT; export OUT=/tmp/gc
timeout 450 bash scripts/gpu-check.sh 2>&1 | grep -v "^/usr/local/cuda/bin/nvcc" | tail -40
for f in /tmp/gc/*.jsonl; do cp $f $OUT_FILES/; done
echo "check $(( $(date +%s) - t0 )) s"
MOKC_MOK_TRACE=1 timeout 100 mpirun -np 2 ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --iters 10 > $OUT_FILES/trace-kimi.log 2>&1
grep -A8 "forward trace, ep_rank 0" $OUT_FILES/trace-kimi.log | head -9; grep -A14 "backward trace, ep_rank 0" $OUT_FILES/trace-kimi.log | head -15
echo "total $(( $(date +%s) - t0 )) s"
