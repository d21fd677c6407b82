# s17 r2: the consumers take turns at the tensor cores in the backward's short weight-gradient tasks (K blocks <= the
# ring's 3 stages): consumer 0 multiplies (zeroing the K tail alone), passes the turn, and writes its fp32 gradients
# while consumer 1 multiplies. new = working tree, base = HEAD e959935. Predicted: same bits; Kimi-like backward kernel
# -1.5 to -2.9 ms (weight-gradient phase 11.4 ms a block, main loops 3.1 us + epilogues 2.7 us a task in series, write
# floor ~8.5 ms); Qwen-like (16 K blocks a task: no turns) within noise.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/base; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < $R/.deps/r.diff && make -j12 mokc > $OUT/build-base.log 2>&1 || echo "build base failed") &
make -j16 all build/mokc_tests > $OUT/build-new.log 2>&1 || { echo "build new failed"; tail -20 $OUT/build-new.log; exit 1; }
wait; [ -x /tmp/base/mokc ] || exit 1; echo "built $(el)"
grep "spilled" $OUT/build-new.log | sed "s/.*function .//" | cut -c1-90
for s in mok kernel_report gpu_train; do CUDA_VISIBLE_DEVICES=0 timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -E "FAIL" $OUT/test-$s.log | head -6; done
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do
  order="/tmp/base ."; [ $rep = 2 ] && order=". /tmp/base"
  for v in $order; do tag=new; [ $v = . ] || tag=base
  timeout 90 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1 || { echo "bench $sh $tag failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
MOKC_MOK_TRACE=1 timeout 100 mpirun -np 2 ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --iters 10 > $OUT/trace-kimi.log 2>&1; echo "trace rc=$? $(el)"
grep -E "^  (wdown|wgu|waiting)" $OUT/trace-kimi.log | head -6
TIMING=0 timeout 150 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1; echo "ep2 rc=$? $(tail -1 $OUT/ep2-check.log) $(el)"
grep FAIL $OUT/ep2-check.log | head -5
echo "total $(el)"
