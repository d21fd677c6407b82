# s16 r3: the task carries its tile's rows (Sm90TileRows: the producer's mok_tile_rows, or the expert's rows for a
# weight-gradient task), so the consumers no longer binary-search the schedule (8 dependent loads at El = 192) at each
# M-tile task and again in its epilogue, nor load the expert offsets at each weight-gradient task.
# new = working tree, base = HEAD a7b8265. Predicted: same bits; Kimi-like backward kernel -0.1 to -0.3 ms (~1950
# tasks a block), Qwen-like fwd+bwd -0.01 to -0.04, forwards -0.01 to -0.04.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/base; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < $R/.deps/r.diff && make -j12 mokc > $OUT/build-base.log 2>&1 || echo "build base failed") &
make -j16 all build/mokc_tests > $OUT/build-new.log 2>&1 || { echo "build new failed"; tail -20 $OUT/build-new.log; exit 1; }
wait; [ -x /tmp/base/mokc ] || exit 1; echo "built $(el)"
grep "spilled" $OUT/build-new.log | sed "s/.*function .//" | cut -c1-90
for s in mok kernel_report; do CUDA_VISIBLE_DEVICES=0 timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -E "FAIL" $OUT/test-$s.log | head -6; done
TIMING=0 timeout 200 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1
echo "ep2 check rc=$?: $(tail -1 $OUT/ep2-check.log) $(el)"; grep -E "FAIL" $OUT/ep2-check.log | head -6
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do
  order="/tmp/base ."; [ $rep = 2 ] && order=". /tmp/base"
  for v in $order; do tag=new; [ $v = . ] || tag=base
  timeout 90 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1 || { echo "bench $sh $tag failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
timeout 150 build/mokc_tests gpu_train > $OUT/test-gpu_train.log 2>&1
echo "tests gpu_train rc=$?: $(tail -1 $OUT/test-gpu_train.log) $(el)"; grep -E "FAIL" $OUT/test-gpu_train.log | head -6
echo "total $(el)"
