for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
rm -f kernels/_exp*.cu; rm -rf build/kernels/_exp*
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; echo BUILD FAILED; exit 1; }
for s in gpu_gemm gpu_moe_unfused mok gpu_model gpu_train; do
  t=$(date +%s); MOKC_BIN=build/mokc timeout 300 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$? $(( $(date +%s) - t )) s: $(tail -1 $OUT/test-$s.log)"; grep -E "FAIL" $OUT/test-$s.log | head -6
done
chk() { timeout 300 mpirun -np 2 ./mokc bench moe --check "$@" > /tmp/chk.log 2>&1; rc=$?; echo "check rc=$rc: $*"; [ $rc -eq 0 ] || tail -15 /tmp/chk.log; cat /tmp/chk.log >> $OUT/ep2-check.log; }
chk --config configs/tiny.json --tokens 300
chk --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256
chk --config configs/bench/kimi-k2-like.json --tokens 200 --set model.hidden_size=256 --set moe.moe_intermediate_size=128
for sh in qwen3-30b-a3b-like kimi-k2-like; do
  timeout 300 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl all > $OUT/bench-moe-$sh.log 2>&1; echo "bench $sh rc=$?"
  grep '^{' $OUT/bench-moe-$sh.log > $OUT/bench-moe-$sh.jsonl; grep -o '"impl": "[a-z]*".*"fwdbwd_ms[^,]*' $OUT/bench-moe-$sh.jsonl | sed 's/"shape.*"fwd_ms/ fwd/'
  grep phases $OUT/bench-moe-$sh.jsonl | tr ',' '\n' | grep _ms | tr '\n' ' '; echo
done
