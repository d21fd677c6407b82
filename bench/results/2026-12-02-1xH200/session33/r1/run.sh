#!/bin/bash
# s33 r1 (one H200): e9cb023's test_gemm refactor on a GPU; the q, k, v dgrad probe (probe_qkv_dgrad.c).
R=bench/results/2026-12-02-1xH200/session33/r1
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "built [$(( $(date +%s) - t0 )) s]" | tee $OUT/summary.txt
CUDA=$(dirname $(dirname $(command -v nvcc)))
gcc -O2 -std=c11 -Isrc -I$CUDA/include -o /tmp/probe $R/probe_qkv_dgrad.c \
  $(find build/src build/kernels -name '*.o' ! -name main.o) $(pkg-config --libs libcjson hdf5-serial ompi-c) \
  -L$CUDA/lib64 -lcublasLt -lcublas -lnccl -lcudart -lstdc++ -lm -fopenmp || exit 1
/tmp/probe | tee $OUT/probe.jsonl
MOKC_BIN=./mokc build/mokc_tests gpu_gemm > $OUT/gpu_gemm.log 2>&1; echo "gpu_gemm rc $?: $(tail -1 $OUT/gpu_gemm.log)" | tee -a $OUT/summary.txt
cat $OUT/probe.jsonl >> $OUT/summary.txt
echo "total [$(( $(date +%s) - t0 )) s]" | tee -a $OUT/summary.txt
