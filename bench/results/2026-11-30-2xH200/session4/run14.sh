for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
MOKC_BIN=build/mokc timeout 100 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok rc=$?: $(grep -c '^ok' $OUT/test-mok.log) ok, $(grep -c '^FAIL' $OUT/test-mok.log) fail"; grep -A3 FAIL $OUT/test-mok.log | head
timeout 50 mpirun -np 2 ./mokc bench moe --check --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk.log 2>&1; echo "ep2 check rc=$?"
for sh in qwen3-30b-a3b-like kimi-k2-like; do
timeout 100 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe-$sh.log 2>&1; echo "moe $sh rc $?"
grep '^{' $OUT/moe-$sh.log | grep '"bench": "moe"' | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' '; grep moe_phases $OUT/moe-$sh.log | grep -o '"bwd_kernel_ms[^,]*'
done
MOKC_MOK_TRACE=1 timeout 60 mpirun -np 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 10 > $OUT/trace-q.log 2>&1
grep -A5 "trace, ep_rank 0" $OUT/trace-q.log
echo "total $(( $(date +%s) - t0 )) s"
