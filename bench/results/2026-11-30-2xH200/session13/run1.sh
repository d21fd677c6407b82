# Prepared in s12 for the next session's first call (nvidia-h200-x2; not run): copy to .deps/run1.sh, and
# session12/deferred-signal-unrun.diff to .deps/v.diff. HEAD is the base; the diff (compiled, not run):
# an epilogue whose stores are all one thread's TMA stores (the forward's gate/up, the backward's dgrad, for
# consumers with all 64 rows) no longer waits for them to land before its signal; the storer keeps the tile in
# shared memory and sm90_signal_landed waits and signals during the next task: after its first block's products
# are issued when that task's loads cannot wait for such signals (gate/up, dgrad), else before its main loop.
# Prediction: "h stored, release" 1.9 -> ~0.3 us a task (Qwen-like), 2.6 -> ~0.4 (Kimi-like); dgrad release
# 2.1 -> ~0.2; forward kernel -0.01 to -0.02 ms (Qwen-like), -0.02 to -0.05 (Kimi-like); backward -0.01; spills
# of the backward 44/64 -> 32/52 B. Risk: down tasks wait longer for their tiles' last signals (a held signal is
# sent before the next task's main loop when that task's first stage is not in yet: a review's finding). In the
# new tree's traces the TMA epilogues' last lap ("h stored, release", dgrad "release") no longer holds the stores'
# completion, which moves into the next task's main loop: compare kernel times, not laps.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$PWD; mkdir -p /tmp/new; tar --exclude=./.deps --exclude=./build -cf - . | (cd /tmp/new && tar xf -)
(cd /tmp/new && patch -s -p1 < $R/.deps/v.diff && make -j16 all build/mokc_tests > $OUT/build-new.log 2>&1 ||
  { echo "build new failed"; grep -B2 -A8 error $OUT/build-new.log | head -30; }) &
make -j16 all > $OUT/build-head.log 2>&1 || { echo "build head failed"; exit 1; }
wait; [ -x /tmp/new/build/mokc_tests ] || exit 1; echo "built $(el)"
(cd /tmp/new && MOKC_BIN=build/mokc timeout 100 build/mokc_tests mok > $OUT/test-mok-new.log 2>&1; echo "tests mok (new) rc=$?: $(tail -1 $OUT/test-mok-new.log) $(el)")
(cd /tmp/new && TIMING=0 timeout 150 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check-new.log 2>&1; echo "ep2 (new) rc=$?: $(tail -1 $OUT/ep2-check-new.log) $(el)")
for rep in 1 2 3; do for sh in qwen3-30b-a3b-like kimi-k2-like; do for v in /tmp/new .; do
  tag=head; [ $v = . ] || tag=deferred
  timeout 40 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
  grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$tag\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
  echo "$sh $tag r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"
done; done; done
for sh in qwen3-30b-a3b-like kimi-k2-like; do for v in /tmp/new .; do tag=head; [ $v = . ] || tag=deferred
  MOKC_MOK_TRACE=1 timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok --iters 5 > $OUT/trace-$sh-$tag.log 2>&1
  echo "$sh $tag: $(grep -m1 'gate/up epilogue, us' $OUT/trace-$sh-$tag.log) | $(grep -m1 'dgrad epilogue, us' $OUT/trace-$sh-$tag.log) | $(grep -m1 -E '^  down ' $OUT/trace-$sh-$tag.log | grep -o 'producer waiting[^c]*')"
done; done
echo "total $(el)"
