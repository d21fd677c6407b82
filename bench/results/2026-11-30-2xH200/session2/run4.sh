for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; echo BUILD FAILED; exit 1; }
MOKC_BIN=build/mokc timeout 300 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok rc=$?: $(tail -1 $OUT/test-mok.log)"; grep FAIL $OUT/test-mok.log | head -5
chk() { timeout 300 mpirun -np 2 ./mokc bench moe --check "$@" > /tmp/chk.log 2>&1; rc=$?; echo "check rc=$rc: $*"; [ $rc -eq 0 ] || tail -15 /tmp/chk.log; cat /tmp/chk.log >> $OUT/ep2-check.log; }
chk --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256
chk --config configs/bench/kimi-k2-like.json --tokens 96 --skew --set model.hidden_size=128 --set moe.moe_intermediate_size=64 --set moe.n_shared_experts=1
for sh in qwen3-30b-a3b-like kimi-k2-like; do
  timeout 300 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/bench-moe-$sh.log 2>&1; echo "bench $sh rc=$?"
  grep '^{' $OUT/bench-moe-$sh.log > $OUT/bench-moe-$sh.jsonl; grep -o '"fwd_ms.*' $OUT/bench-moe-$sh.jsonl | cut -c1-120
  grep phases $OUT/bench-moe-$sh.jsonl | tr ',' '\n' | grep _ms | tr '\n' ' '; echo
done
