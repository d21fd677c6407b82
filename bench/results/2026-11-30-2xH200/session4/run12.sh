for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for s in gpu_gemm gpu_moe_unfused; do
MOKC_BIN=build/mokc timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1; rc=$?; echo "tests $s rc=$rc: $(grep -c '^ok' $OUT/test-$s.log) ok, $(grep -c '^FAIL' $OUT/test-$s.log) fail"; grep -A3 FAIL $OUT/test-$s.log | head -12
done
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe-$sh.log 2>&1; echo "moe $sh rc $?"
grep '^{' $OUT/moe-$sh.log | grep '"bench": "moe"' | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' '; echo
grep moe_phases $OUT/moe-$sh.log | grep -o '"fwd_router_gemm_ms[^,]*\|"bwd_router_gemms_ms[^}]*'| tr '\n' ' '; echo
done
echo "total $(( $(date +%s) - t0 )) s"
