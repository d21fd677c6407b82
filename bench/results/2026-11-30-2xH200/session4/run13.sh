for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
for s in gpu_gemm gpu_moe_unfused mok; do
MOKC_BIN=build/mokc timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1; rc=$?; echo "tests $s rc=$rc: $(grep -c '^ok' $OUT/test-$s.log) ok, $(grep -c '^FAIL' $OUT/test-$s.log) fail"; grep -A3 FAIL $OUT/test-$s.log | head -12
done
timeout 50 mpirun -np 2 ./mokc bench moe --check --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk.log 2>&1; echo "ep2 check rc=$?"
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe-$sh.log 2>&1; echo "moe $sh rc $?"
grep '^{' $OUT/moe-$sh.log | grep '"bench": "moe"' | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' '; echo
grep moe_phases $OUT/moe-$sh.log | grep -o '"fwd_router_gemm_ms[^,]*\|"bwd_router_gemms_ms[^}]*'| tr '\n' ' '; echo
MOKC_MOK_TRACE=1 timeout 100 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok --iters 10 > $OUT/trace-$sh.log 2>&1
grep -A6 "trace, ep_rank 0" $OUT/trace-$sh.log
done
MOKC_BIN=build/mokc timeout 100 build/mokc_tests gpu_train > $OUT/test-gpu_train.log 2>&1; echo "tests gpu_train rc=$?: $(grep -c '^ok' $OUT/test-gpu_train.log) ok, $(grep -c '^FAIL' $OUT/test-gpu_train.log) fail"
echo "total $(( $(date +%s) - t0 )) s"
