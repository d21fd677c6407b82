# s19 r2: wide weight-gradient tasks only where adding by TMA (new) against ed35223 (base).
# Predicted (r1): Kimi-like bwd kernel writing as base (19.3 ms), adding 29.8 -> 28.35; Qwen-like as base.
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
for v in . /tmp/base; do tag=new; [ $v = . ] || tag=base
  MOKC_MOK_TRACE=1 timeout 120 mpirun -np 2 $v/mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --accumulate > $OUT/trace-kimi-acc-$tag.log 2>&1
  echo "traced $tag --accumulate:"; grep -E "^  (wdown|wgu) " $OUT/trace-kimi-acc-$tag.log | head -4; done
bash scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1; echo "ep2 rc=$? $(tail -1 $OUT/ep2-check.log) $(el)"
echo "total $(el)"
