# s9 call 7 (nvidia-h200: the 2-GPU kind was not lent then; HEAD 91cda54): scripts/gpu-check.sh on one GPU (build, every
# test suite, the GEMM and attention benchmarks; the EP2 parts skip).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
OUT_FILES=$OUT; export OUT=/tmp/gc
timeout 500 bash scripts/gpu-check.sh 2>&1 | grep -v "^/usr/local/cuda/bin/nvcc" | tail -40
for f in /tmp/gc/*.jsonl; do cp $f $OUT_FILES/; done
grep -E "^(ok|FAIL)" /tmp/gc/tests.log | awk '{print $1}' | sort | uniq -c
echo "check $(( $(date +%s) - t0 )) s"
