# Prepared in s10 for the next session's first call (nvidia-h200-x2; not run): copy to .deps/run1.sh, and
# session10/diag-dispatch-unscaled.diff to .deps/diag.diff.
# 0. The layers' suites (mok, gpu_moe_unfused, gpu_train): 5ea47d7 moved the shared experts into one module without a
#    GPU run (the mok suite's shapes with shared experts cover it).
# 1. 58e5c6b's trace (compiled, not run): the consumers' wait split between tasks not yet sent and the time between
#    tasks that were; both shapes.
# 2. Why the gate-scaled dispatch (78ccc69) is slower inside the backward: HEAD against a diagnostic tree whose
#    dispatch pulls the same token rows unscaled (wrong gradients; timing only). As slow as HEAD: the k re-reads of
#    each source row cost it; as fast as 15d3e4a was: the scaling or the gate's load does.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
mkdir -p /tmp/diag; cp .deps/diag.diff /tmp/diag.diff; tar --exclude=./.deps -cf - . | (cd /tmp/diag && tar xf -)
(cd /tmp/diag && patch -s -p1 < /tmp/diag.diff && make -j14 mokc > /tmp/diag.log 2>&1 || echo "diag build failed") &
make -j16 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }; wait; echo "built $(el)"
for s in mok gpu_moe_unfused gpu_train; do
MOKC_BIN=build/mokc timeout 150 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -E "^FAIL" -A3 $OUT/test-$s.log | head; done
for sh in qwen3-30b-a3b-like kimi-k2-like; do
MOKC_MOK_TRACE=1 timeout 60 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok --iters 10 > $OUT/trace-$sh.log 2>&1
echo "== $sh"; grep -A2 "trace, ep_rank 0" $OUT/trace-$sh.log | grep -v "^--"; done
for rep in 1 2; do for v in . /tmp/diag; do
timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok > /tmp/b.log 2>&1
grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$([ $v = . ] && echo head || echo diag-unscaled)\", \"rep\": $rep, |" >> $OUT/bench-diag.jsonl
echo "qwen $v r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"bwd_kernel_ms[^,]*' /tmp/b.log) $(el)"; done; done
MOKC_MOK_TRACE=1 timeout 60 mpirun -np 2 /tmp/diag/mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 10 > $OUT/trace-qwen-diag.log 2>&1
echo "== diag"; grep -A3 "backward trace, ep_rank 0" $OUT/trace-qwen-diag.log | tail -2
echo "total $(el)"
