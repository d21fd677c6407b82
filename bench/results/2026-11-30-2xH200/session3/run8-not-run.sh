for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
rm -f kernels/_exp*.cu
t0=$(date +%s)
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
MOKC_BIN=build/mokc timeout 100 build/mokc_tests mok > $OUT/test-mok.log 2>&1; rc=$?; echo "tests mok rc=$rc: $(tail -1 $OUT/test-mok.log)"; grep FAIL $OUT/test-mok.log | head -5
[ $rc -eq 0 ] || exit 1
timeout 50 mpirun -np 2 ./mokc bench moe --check --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk.log 2>&1; echo "ep2 check rc=$?"; grep -iE "fail|error" $OUT/chk.log | head -3
timeout 60 mpirun -np 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok > $OUT/moe.log 2>&1; echo "moe rc $?"
grep '^{' $OUT/moe.log | grep -o '"impl": "mok".*"fwdbwd_ms[^,]*' | sed 's/"shape.*"fwd_ms/ fwd/' | head -1
grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' $OUT/moe.log | head -2
echo "total $(( $(date +%s) - t0 )) s"
