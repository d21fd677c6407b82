# s17 r7: what a step's later micro-batches cost: bench moe --accumulate (the routed experts' gradients added into,
# the megakernel's register-store epilogue with loads) against the default (written, TMA stores). Code: e959935 +
# the bench's --accumulate flag. Predicted: Kimi-like backward kernel +5 to +8 ms (r5: register stores alone +4 ms;
# the adds read 33.8 GB more), Qwen-like +0.15 to +0.3 ms.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 mokc > $OUT/build.log 2>&1 || { echo "build failed"; tail -20 $OUT/build.log; exit 1; }; echo "built $(el)"
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do
  order="write add"; [ $rep = 2 ] && order="add write"
  for v in $order; do fl=""; [ $v = add ] && fl=--accumulate
  timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json $fl > /tmp/b.log 2>&1 || { echo "bench $sh $v failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"rep\": $rep, |" >> $OUT/bench-accumulate.jsonl
  echo "$sh $v r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"impl[^,]*\|"accumulate[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
echo "total $(el)"
