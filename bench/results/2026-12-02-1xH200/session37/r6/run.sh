# s37 r6, one H200: the suites f9a1fbd's review touched (gemm_f32x3's vector test for bf16 operands; comments) at
# f9a1fbd: gpu_gemm, gpu_moe, gpu_model. Predicted: all pass.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
echo "built $(el)"
for t in gpu_gemm gpu_moe gpu_model; do
  MOKC_BIN=build/mokc timeout 200 build/mokc_tests $t > $OUT/test-$t.log 2>&1; echo "test $t rc $? $(el): $(tail -1 $OUT/test-$t.log)"
done
