# For the next session's first device call (nvidia-h200-x2), not run: the full GPU check at this
# session's last commit (it runs the token-side test shape added after r13, {300, 40, 392, 200},
# and the token-side setup's trace zeroing, neither run yet), then the token-side tiles on the
# Kimi-like expert shapes again.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
timeout 480 bash scripts/gpu-check.sh 2>&1 | grep -v "^/usr/local/cuda/bin/nvcc" | tail -40
for c in "192 170 4096 7168" "192 170 7168 2048"; do set -- $c
timeout 60 ./mokc bench gemm --groups $1 --m $2 --n $3 --k $4 2>&1 | grep -E "vs cublas|^\{"
done
