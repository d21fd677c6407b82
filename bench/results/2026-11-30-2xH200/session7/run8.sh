# s7 r8 (c8f2d8e): repeats of the MoE benchmark at the session's last kernel code (the range of each shape).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
make -j32 mokc > /dev/null 2>&1 || exit 1
for rep in 1 2 3 4; do for sh in qwen3-30b-a3b-like kimi-k2-like; do
[ $sh = kimi-k2-like ] && [ $rep -gt 2 ] && continue
timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > $OUT/moe.log 2>&1
echo "$sh rep $rep: $(grep '"bench": "moe"' $OUT/moe.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o "\"fwd_kernel_ms[^,]*\|\"bwd_kernel_ms[^,]*" $OUT/moe.log | tr "\n" " ")"
done; done
