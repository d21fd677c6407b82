# s19 r5: the committed form of tree e (one sm90_mma call; r4 measured e with a second, unused instantiation) (new)
# against 81efd11 (head), adding and writing; and two throwaway diagnostic builds of new, writing only: x (no TMA
# stores in the written weight-gradient epilogue: wrong results, timing only), y (no proxy fences there).
# Predicted: new as r4's e (-0.4 ms adding against head, writing equal). x, y: unknown; r1 found the written
# epilogue at 2.8 us a task with the whole result staged. If x's epilogue falls to < 1 us, the stores hold it.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD
for t in head x y; do mkdir -p /tmp/$t; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/$t && tar xf -); done
(cd /tmp/head && patch -s -R -p1 < $R/.deps/new.diff && make -j8 mokc > $OUT/build-head.log 2>&1 || echo "build head failed") &
for t in x y; do (cd /tmp/$t && cp $R/.deps/bwd_$t.cu kernels/mok/mok_backward_sm90.cu && make -j8 mokc > $OUT/build-$t.log 2>&1 || echo "build $t failed") & done
make -j10 all build/mokc_tests > $OUT/build-new.log 2>&1 || { echo "build new failed"; tail -20 $OUT/build-new.log; exit 1; }
wait; for t in head x y; do [ -x /tmp/$t/mokc ] || exit 1; done; echo "built $(el)"
for s in mok kernel_report; do CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -E "FAIL|error" $OUT/test-$s.log | head -6; done
run() { # tree shape flags rep
  d=/tmp/$1; [ $1 = new ] && d=.
  timeout 120 mpirun -np 2 $d/mokc bench moe --config configs/bench/$2.json --impl mok $3 > /tmp/b.log 2>&1 || { echo "bench $1 $2 $3 failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$1\", \"rep\": $4, |" >> $OUT/bench-ab.jsonl
  echo "$2 $1 r$4 $3: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; }
for t in head new; do run $t kimi-k2-like --accumulate 1; done
for t in new head; do run $t kimi-k2-like --accumulate 2; done
for t in head new; do run $t kimi-k2-like --accumulate 3; done
for t in head new x y; do run $t kimi-k2-like "" 1; done
for t in head new; do run $t qwen3-30b-a3b-like --accumulate 1; done
for t in new x y; do d=/tmp/$t; [ $t = new ] && d=.
  MOKC_MOK_TRACE=1 timeout 120 mpirun -np 2 $d/mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok > $OUT/trace-kimi-$t.log 2>&1
  echo "traced $t (writing):"; grep -E "^  (wdown|wgu) " $OUT/trace-kimi-$t.log | head -2; done
(cd $OUT && tar czf logs.tgz test-*.log build-*.log trace-*.log && rm -f test-*.log build-*.log trace-*.log)
echo "total $(el)"
