# s15 r3: an M tile's rows of A loaded rounded up to 8 (TMA boxes of 128 down to 8 rows: sm90_load_rows), and each
# consumer zeroes its panel's lines past them once a task, in the stages the task uses (sm90_zero_m_tail); forward
# gate/up and down, backward dgrad and dx. new = working tree, base = 767cbc1 (HEAD). r2's form zeroed the lines
# after every stage's TMA (a fence and a barrier a K block): Kimi-like fwd kernel +0.12..+0.25 ms, bwd kernel
# -0.22..-0.48. Predicted now: same bits (mok suite, EP2 check pass); Kimi-like fwd kernel -0.05..-0.2 ms, bwd kernel
# -0.3..-0.5; Qwen-like within noise. The mok suite runs twice (the skewed/odd shapes exercise every tail).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/base; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < $R/.deps/r.diff && make -j12 mokc > $OUT/build-base.log 2>&1 || echo "build base failed") &
make -j16 all build/mokc_tests > $OUT/build-new.log 2>&1 || { echo "build new failed"; tail -20 $OUT/build-new.log; exit 1; }
wait; [ -x /tmp/base/mokc ] || exit 1; echo "built $(el)"
for i in 1 2; do CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc_tests mok > $OUT/test-mok.log 2>&1
echo "tests mok rc=$?: $(tail -1 $OUT/test-mok.log) $(el)"; grep -E "FAIL" $OUT/test-mok.log | head -8; done
CUDA_VISIBLE_DEVICES=0 timeout 100 build/mokc_tests gpu_gemm > $OUT/test-gemm.log 2>&1; echo "tests gpu_gemm rc=$?: $(tail -1 $OUT/test-gemm.log) $(el)"
TIMING=0 timeout 200 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1
echo "ep2 check rc=$?: $(tail -1 $OUT/ep2-check.log) $(el)"; grep -E "FAIL" $OUT/ep2-check.log | head -8
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw --format=csv,noheader -lms 50 > $OUT/smi.csv 2>&1 & SMI=$!
for rep in 1 2 3; do for sh in kimi-k2-like qwen3-30b-a3b-like; do
  order="/tmp/base ."; [ $rep = 2 ] && order=". /tmp/base"
  for v in $order; do tag=new; [ $v = . ] || tag=base
  echo "start $sh $tag $rep $(date +%s.%N)" >> $OUT/marks.txt
  timeout 90 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1 || { echo "bench $sh $tag failed"; tail -5 /tmp/b.log; }
  echo "end $sh $tag $rep $(date +%s.%N)" >> $OUT/marks.txt
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwd_ms[^,]*\|"fwdbwd_ms[^,]*\|"fwd_graph_ms[^,]*\|"fwdbwd_graph_ms[^,]*' | tr '\n' ' ') $(el)"
done; done; done
kill $SMI; echo "total $(el)"
