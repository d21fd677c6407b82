# s17 r8: the weight-gradient epilogue adds by TMA too: each part's old values come into the staging by TMA loads
# (two parts ahead), each thread adds its pairs there, TMA stores as when writing (r7: the register path's
# read-modify-write made the Kimi-like backward kernel 70 ms when adding, against 18.5 when writing). Code: working
# tree (e959935 + bench --accumulate + this). The mok suite now also runs the register path (gradients one float
# past 16-byte alignment). Predicted: Kimi-like backward kernel when adding 70 -> 21-24 ms (the adds read 33.8 GB
# more); Qwen-like 4.04 -> 2.6-2.9; writing unchanged (18.5-19.3, 2.46-2.52).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 all build/mokc_tests > $OUT/build.log 2>&1 || { echo "build failed"; tail -20 $OUT/build.log; exit 1; }; echo "built $(el)"
for s in mok kernel_report gpu_train; do CUDA_VISIBLE_DEVICES=0 timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -E "FAIL" $OUT/test-$s.log | head -6; done
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do
  order="write add"; [ $rep = 2 ] && order="add write"
  for v in $order; do fl=""; [ $v = add ] && fl=--accumulate
  timeout 100 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok $fl > /tmp/b.log 2>&1 || { echo "bench $sh $v failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"rep\": $rep, |" >> $OUT/bench-accumulate.jsonl
  echo "$sh $v r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"accumulate[^,]*\|"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
echo "total $(el)"
