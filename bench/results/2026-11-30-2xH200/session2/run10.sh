for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
rm -f kernels/_exp*.cu; rm -rf build/kernels/_exp*
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; echo BUILD FAILED; exit 1; }
MOKC_BIN=build/mokc timeout 60 build/mokc_tests gpu_attention > $OUT/test-attn.log 2>&1; echo "tests attn rc=$?: $(tail -1 $OUT/test-attn.log)"; grep FAIL $OUT/test-attn.log | head -5
timeout 60 ./mokc bench attn > $OUT/bench-attn.log 2>&1; echo "bench attn rc=$?"; sed -n '/^impl /,$p' $OUT/bench-attn.log | head -8
