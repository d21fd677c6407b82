# s8 call 9 (nvidia-h200-x2, this session's last code): the full scripts/gpu-check.sh, then a trace of the Kimi-like
# forward and backward with the half tiles.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
OUT_FILES=$OUT; export OUT=/tmp/gc
timeout 450 bash scripts/gpu-check.sh 2>&1 | grep -v "^/usr/local/cuda/bin/nvcc" | tail -40
for f in /tmp/gc/*.jsonl; do cp $f $OUT_FILES/; done
echo "check $(( $(date +%s) - t0 )) s"
MOKC_MOK_TRACE=1 timeout 100 mpirun -np 2 ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --iters 10 > $OUT_FILES/trace-kimi.log 2>&1
grep -A6 "forward trace, ep_rank 0" $OUT_FILES/trace-kimi.log | head -7; grep -A7 "backward trace, ep_rank 0" $OUT_FILES/trace-kimi.log | head -8
echo "total $(( $(date +%s) - t0 )) s"
