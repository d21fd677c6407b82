# s17 r5: the weight-gradient epilogue's smem staging and TMA stores against register stores (st.global, the
# accumulate path's code with overwrite), alone and with r3's turns + shared B (where the other consumer's products
# could run under a consumer's held stores). Trees: head = e959935; reg = head with tm.g_tma = 0; turns_reg = r3's
# diff with tm.g_tma = 0. Predicted: reg alone +0.5 to +1 ms on the Kimi-like backward kernel (s6 r1 measured TMA
# stores as a gain); turns_reg within 0.5 ms of head either way. Benches only (the register path is what
# accumulating micro-batches run, tested by the mok suite).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
for v in reg turns_reg; do mkdir -p /tmp/$v; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/$v && tar xf -); done
cp .deps/trees/bwd_reg.cu /tmp/reg/kernels/mok/mok_backward_sm90.cu
cp .deps/trees/bwd_turns_reg.cu /tmp/turns_reg/kernels/mok/mok_backward_sm90.cu; cp .deps/trees/pipe_turns.cuh /tmp/turns_reg/kernels/mok/sm90_pipeline.cuh
(cd /tmp/reg && make -j10 mokc > $OUT/build-reg.log 2>&1 || echo "build reg failed") &
(cd /tmp/turns_reg && make -j10 mokc > $OUT/build-turns_reg.log 2>&1 || echo "build turns_reg failed") &
make -j10 mokc > $OUT/build-head.log 2>&1 || echo "build head failed"
wait; ls -la mokc /tmp/reg/mokc /tmp/turns_reg/mokc | awk '{print $NF}'; echo "built $(el)"
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do
  order=". /tmp/reg /tmp/turns_reg"; [ $rep = 2 ] && order="/tmp/turns_reg /tmp/reg ."
  for v in $order; do tag=$(basename $v); [ $v = . ] && tag=head
  timeout 90 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1 || { echo "bench $sh $tag failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
echo "total $(el)"
