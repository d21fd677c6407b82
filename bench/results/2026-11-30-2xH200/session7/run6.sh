# s7 r6: the forward's ticket order in groups of M tiles (down of group j after gate/up of group j + 1),
# group size = rounds x grid / nI M tiles, MOKC_MOK_GROUP_ROUNDS in {0 (every gate/up first, the old order), 1, 2, 4}; same build.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
MOKC_BIN=build/mokc timeout 150 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok rc=$?: $(grep -c "^ok" $OUT/test-mok.log) ok, $(grep -c "^FAIL" $OUT/test-mok.log) fail"; grep -A3 FAIL $OUT/test-mok.log | head
for r in 1 3; do MOKC_MOK_GROUP_ROUNDS=$r timeout 50 mpirun -np 2 ./mokc bench moe --check --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 --set model.hidden_size=512 --set moe.moe_intermediate_size=256 > $OUT/chk.log 2>&1; echo "ep2 check rounds $r rc=$?: $(grep -i "ep check" $OUT/chk.log)"; done
for rep in 1 2; do for r in 0 1 2 4; do for sh in kimi-k2-like qwen3-30b-a3b-like; do
MOKC_MOK_GROUP_ROUNDS=$r timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe.log 2>&1
echo "$sh rounds $r rep $rep: $(grep '"bench": "moe"' $OUT/moe.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o "\"fwd_kernel_ms[^,]*\|\"fwd_barrier_ms[^,]*" $OUT/moe.log | tr "\n" " ")"
done; done; done
for r in 0 2; do for sh in qwen3-30b-a3b-like kimi-k2-like; do
MOKC_MOK_GROUP_ROUNDS=$r MOKC_MOK_TRACE=1 timeout 150 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok --iters 10 > $OUT/trace.log 2>&1
echo "trace $sh rounds $r"; grep -A5 "forward trace, ep_rank 0" $OUT/trace.log | head -6
done; done
echo "total $(( $(date +%s) - t0 )) s"
