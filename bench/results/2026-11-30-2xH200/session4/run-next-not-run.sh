# For the next session's first device call (nvidia-h200-x2): the gemm_f32x3 tests that have not
# run on a GPU, then the dgrad epilogue's sections (git apply session4/dgrad-epilogue-trace-unrun.diff first).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
MOKC_BIN=build/mokc timeout 150 build/mokc_tests gpu_gemm > $OUT/test-gpu_gemm.log 2>&1; echo "gpu_gemm rc=$?"; grep -A4 FAIL $OUT/test-gpu_gemm.log | head -20
MOKC_MOK_TRACE=1 timeout 60 mpirun -np 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 10 > $OUT/trace-q.log 2>&1
grep -A6 "trace, ep_rank 0" $OUT/trace-q.log
