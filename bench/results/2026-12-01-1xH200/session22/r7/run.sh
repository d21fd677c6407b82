# s22 r7 (1×H200): gemm_rm_out restricted to fp32 C and D (r6: with a bf16 C its out-of-place results differed
# from the in-place ones), the test's bf16 cases in place again. Tests: gpu_gemm, gpu_model.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
make -j16 GIT_REVISION=$(cat .deps/rev)-resid2 mokc build/mokc_tests > /tmp/b.log 2>&1 || { tail -5 /tmp/b.log; exit 1; }
for t in gpu_gemm gpu_model gpu_cast; do
  MOKC_BIN=./mokc build/mokc_tests $t > $OUT/tests-$t.log 2>&1; echo "$t: $(tail -1 $OUT/tests-$t.log)"; grep -E 'FAIL' $OUT/tests-$t.log | head -5
done
