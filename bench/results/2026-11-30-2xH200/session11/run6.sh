# s11 call 6 (nvidia-h200-x2, this session's last code): the full scripts/gpu-check.sh.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
OUT_FILES=$OUT; export OUT=/tmp/gc
timeout 520 bash scripts/gpu-check.sh 2>&1 | grep -v "^/usr/local/cuda/bin/nvcc" | tail -45
for f in /tmp/gc/*.jsonl; do cp $f $OUT_FILES/; done
echo "check $(( $(date +%s) - t0 )) s"
