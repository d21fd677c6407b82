# s19 r1: wide weight-gradient tasks (<= 4 K blocks: the stage ring lends its last stage, a task's whole
# 64 KB a consumer staged, its stores drain under the next main loop) (new) against ed35223 (base).
# Predicted: Kimi-like bwd kernel 19.2 -> 16-17.5 ms writing (wgrad phases 11.3 ms a block -> 8-9.5), adding
# 29.9 -> 25-27; Qwen-like unchanged (its wgrad tasks have ~16 K blocks: not wide).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/base; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < $R/.deps/r.diff && make -j12 mokc > $OUT/build-base.log 2>&1 || echo "build base failed") &
make -j16 all build/mokc_tests > $OUT/build-new.log 2>&1 || { echo "build new failed"; tail -20 $OUT/build-new.log; exit 1; }
wait; [ -x /tmp/base/mokc ] || exit 1; echo "built $(el)"
for s in mok kernel_report; do CUDA_VISIBLE_DEVICES=0 timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1
  echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -E "FAIL|error" $OUT/test-$s.log | head -6; done
bench() { # shape flags rep
  order="/tmp/base ."; [ $(( $3 % 2 )) = 0 ] && order=". /tmp/base"
  for v in $order; do tag=new; [ $v = . ] || tag=base
  timeout 120 mpirun -np 2 $v/mokc bench moe --config configs/bench/$1.json --impl mok $2 > /tmp/b.log 2>&1 || { echo "bench $1 $tag $2 failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $3, |" >> $OUT/bench-ab.jsonl
  echo "$1 $tag r$3 $2: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fwdbwd_ms[^,]*' | tr '\n' ' ') $(grep -o '"[fb]wd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
  done; }
for rep in 1 2; do bench kimi-k2-like "" $rep; bench kimi-k2-like --accumulate $rep; done
for rep in 1 2; do bench qwen3-30b-a3b-like "" $rep; done
bench qwen3-30b-a3b-like --accumulate 1
MOKC_MOK_TRACE=1 timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok > $OUT/trace-kimi-new.log 2>&1
grep -E "^  (dgrad|wdown|dx|wgu) |waiting for tasks" $OUT/trace-kimi-new.log | head -12
echo "total $(el)"
