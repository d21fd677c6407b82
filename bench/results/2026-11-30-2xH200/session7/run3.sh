# s7 r3: the forward kernel's trace (new: MOKC_MOK_TRACE=1 now also traces the forward) on both shapes, with the mok tests.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
MOKC_BIN=build/mokc timeout 150 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok rc=$?: $(grep -c "^ok" $OUT/test-mok.log) ok, $(grep -c "^FAIL" $OUT/test-mok.log) fail"
for sh in qwen3-30b-a3b-like kimi-k2-like; do
MOKC_MOK_TRACE=1 timeout 150 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok --iters 10 > $OUT/trace-$sh.log 2>&1
echo "== $sh"; grep -A5 "forward trace, ep_rank" $OUT/trace-$sh.log | head -12; grep '"moe_phases"' $OUT/trace-$sh.log | head -1
done
echo "total $(( $(date +%s) - t0 )) s"
