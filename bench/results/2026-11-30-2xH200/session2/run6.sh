for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
rm -f kernels/_exp*.cu; rm -rf build/kernels/_exp*
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; echo BUILD FAILED; exit 1; }
MOKC_BIN=build/mokc timeout 300 build/mokc_tests gpu_attention > $OUT/test-attn.log 2>&1; echo "tests attn rc=$?: $(tail -1 $OUT/test-attn.log)"; grep FAIL $OUT/test-attn.log | head -5
timeout 400 scripts/flash-bwd-diag.sh 2>&1 | tee $OUT/flash-bwd-diag.txt | tail -15
