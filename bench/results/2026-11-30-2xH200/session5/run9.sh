for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s; spills: $(grep -c 'spilled' $OUT/build.log) kernels: $(grep -o "function '_Z2[0-9a-z_]*" $OUT/build.log | tr '\n' ' ')"
for s in gpu_swiglu mok gpu_moe_unfused gpu_model; do
MOKC_BIN=build/mokc timeout 60 build/mokc_tests $s > $OUT/test-$s.log 2>&1; rc=$?; echo "tests $s rc=$rc: $(grep -c '^ok' $OUT/test-$s.log) ok, $(grep -c '^FAIL' $OUT/test-$s.log) fail  t=$(( $(date +%s) - t0 ))"; grep -A3 FAIL $OUT/test-$s.log | head -12
done
timeout 40 mpirun -np 2 ./mokc bench moe --check --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk.log 2>&1; echo "ep2 check rc=$?"
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 40 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe-$sh.log 2>&1; echo "moe $sh rc $?: $(grep '"bench": "moe"' $OUT/moe-$sh.log | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"bwd_kernel_ms[^,]*\|"fwd_kernel_ms[^,]*' $OUT/moe-$sh.log | tr '\n' ' ') t=$(( $(date +%s) - t0 ))"
done
MOKC_BIN=build/mokc timeout 75 build/mokc_tests gpu_train > $OUT/test-gpu_train.log 2>&1; echo "tests gpu_train rc=$?: $(grep -c '^ok' $OUT/test-gpu_train.log) ok, $(grep -c '^FAIL' $OUT/test-gpu_train.log) fail"
echo "total $(( $(date +%s) - t0 )) s"
