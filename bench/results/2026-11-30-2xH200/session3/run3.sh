for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
rm -f kernels/_exp*.cu; rm -rf build/kernels/_exp*
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; echo BUILD FAILED; exit 1; }
grep spill $OUT/build.log | sed 's/.*function//'
MOKC_BIN=build/mokc timeout 200 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok rc=$?: $(tail -1 $OUT/test-mok.log)"; grep -E "FAIL|watchdog" $OUT/test-mok.log | head -8
chk() { timeout 120 mpirun -np 2 ./mokc bench moe --check "$@" > /tmp/chk.log 2>&1; rc=$?; echo "check rc=$rc: $*"; [ $rc -eq 0 ] || tail -15 /tmp/chk.log; cat /tmp/chk.log >> $OUT/ep2-check.log; }
chk --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256
chk --config configs/bench/kimi-k2-like.json --tokens 200 --set model.hidden_size=256 --set moe.moe_intermediate_size=128
for sh in qwen3-30b-a3b-like kimi-k2-like; do
  timeout 150 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/bench-moe-$sh.log 2>&1; echo "bench $sh rc=$?"
  grep '^{' $OUT/bench-moe-$sh.log > $OUT/bench-moe-$sh.jsonl; grep -o '"impl": "[a-z]*".*"fwdbwd_ms[^,]*' $OUT/bench-moe-$sh.jsonl | sed 's/"shape.*"fwd_ms/ fwd/'
  grep phases $OUT/bench-moe-$sh.jsonl | grep -o '"bwd_kernel_ms[^,]*'
  MOKC_MOK_TRACE=1 timeout 150 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok --iters 10 > $OUT/trace-$sh.log 2>&1
  grep -A6 "trace, ep_rank 0" $OUT/trace-$sh.log
done
MOKC_BIN=build/mokc timeout 200 build/mokc_tests gpu_train > $OUT/test-train.log 2>&1; echo "tests gpu_train rc=$?: $(tail -1 $OUT/test-train.log)"; grep FAIL $OUT/test-train.log | head -5
