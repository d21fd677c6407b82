# s6 r3 (2c28d60): where the backward's time goes with the TMA-stored weight gradients (traced build),
# and the per-phase times of both shapes (untraced lines come from the same bench's moe_phases JSON).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s)
make -j32 mokc > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
for sh in kimi-k2-like qwen3-30b-a3b-like; do
timeout 150 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe-$sh.log 2>&1
echo "$sh: $(grep '"bench": "moe"' $OUT/moe-$sh.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ')"
grep '"moe_phases"' $OUT/moe-$sh.log | head -2
MOKC_MOK_TRACE=1 timeout 150 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok --iters 10 > $OUT/trace-$sh.log 2>&1
grep -A6 "backward trace, ep_rank 0" $OUT/trace-$sh.log | head -7
done
echo "total $(( $(date +%s) - t0 )) s"
