# s22 r4 (1×H200): the full GPU check at this tree (all test suites with the GPU ones, the GEMM tile and attention
# benchmarks; the EP2 parts need 2 GPUs and skip). Predicted: all pass; GEMM 8192^3 ≈ 790, attention as before.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
export GIT_REVISION=$(cat .deps/rev)
OUT=$OUT/gc scripts/gpu-check.sh > $OUT/gpu-check.out 2>&1; echo "rc $?"; tail -25 $OUT/gpu-check.out
