# s21 r2: the mok suite at HEAD (sm90_load_panels' width and c0 >= cols guard touch the megakernels' producers),
# then the comm-block sweep docs/scaling.md's cost model is calibrated on, at today's kernels: the Qwen-like and the
# Kimi-like layer with 33, 66 and 132 dispatching blocks (forward, dispatch alone, phases), median of 20.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 mokc build/mokc_tests > $OUT/build.log 2>&1 || { echo "build failed"; tail -20 $OUT/build.log; exit 1; }; echo "built $(el)"
CUDA_VISIBLE_DEVICES=0 timeout 240 build/mokc_tests mok > $OUT/test-mok.log 2>&1
echo "tests mok rc=$?: $(tail -1 $OUT/test-mok.log) $(el)"; grep -E "FAIL|error" $OUT/test-mok.log | head -6
for shape in qwen3-30b-a3b-like kimi-k2-like; do
  for cb in 132 66 33; do
    timeout 150 mpirun -np 2 ./mokc bench moe --config configs/bench/$shape.json --impl mok --comm-blocks $cb \
      > /tmp/b.log 2>&1 || { echo "bench $shape $cb failed"; tail -5 /tmp/b.log; }
    grep '^{' /tmp/b.log >> $OUT/bench-sweep.jsonl
    echo "$shape cb=$cb: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*\|"dispatch_ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*' /tmp/b.log) $(el)"
  done
done
echo "total $(el)"
