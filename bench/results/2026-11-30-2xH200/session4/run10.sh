for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"; grep "ptxas warning" $OUT/build.log | sed 's/.*function//'
for s in gpu_swiglu gpu_moe_unfused mok; do
MOKC_BIN=build/mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1; rc=$?; echo "tests $s rc=$rc: $(grep -c '^ok' $OUT/test-$s.log) ok, $(grep -c '^FAIL' $OUT/test-$s.log) fail"; grep -A3 FAIL $OUT/test-$s.log | head -12
done
timeout 50 mpirun -np 2 ./mokc bench moe --check --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk.log 2>&1; echo "ep2 check rc=$?"; grep -iE "fail|error" $OUT/chk.log | head -3
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json > $OUT/moe-$sh.log 2>&1; echo "moe $sh rc $?"
grep '^{' $OUT/moe-$sh.log | grep '"bench": "moe"' | grep -o '"impl": "[a-z]*"\|"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' '; echo
grep moe_phases $OUT/moe-$sh.log | cut -c 120-
done
echo "total $(( $(date +%s) - t0 )) s"
