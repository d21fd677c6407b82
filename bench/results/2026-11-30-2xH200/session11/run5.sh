# s11 call 5 (nvidia-h200-x2): the forward's gate/up epilogue stores pre_gate, pre_up and h by bulk copies of
# whole staged rows (.deps/v.diff over ee512c0), not by register stores from half tiles. mok suite and the
# EP2 check on the new tree, then new against base interleaved, both shapes, twice; traces of the new tree.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
mkdir -p /tmp/base; cp .deps/v.diff /tmp/v.diff; tar --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < /tmp/v.diff && find kernels src -newer /tmp/v.diff -exec touch {} + ; make -j12 mokc > /tmp/base.log 2>&1 || echo "base build failed") &
make -j14 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }; wait; echo "built $(el)"
MOKC_BIN=build/mokc timeout 150 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok rc=$?: $(tail -1 $OUT/test-mok.log) $(el)"; grep -E "^FAIL" -A3 $OUT/test-mok.log | head
TIMING=0 timeout 150 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1; echo "ep2 check rc=$?: $(grep -c PASS $OUT/ep2-check.log) PASS, $(grep -c FAIL $OUT/ep2-check.log) FAIL; $(grep '^watchdog:' $OUT/ep2-check.log) $(el)"
for rep in 1 2; do for sh in qwen3-30b-a3b-like kimi-k2-like; do for v in . /tmp/base; do
timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$([ $v = . ] && echo new || echo base)\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
echo "$sh $([ $v = . ] && echo new || echo base) r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; done; done; done
for sh in qwen3-30b-a3b-like kimi-k2-like; do
MOKC_MOK_TRACE=1 timeout 60 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok --iters 10 > $OUT/trace-$sh-new.log 2>&1
echo "== $sh"; grep -A6 "forward trace, ep_rank 0" $OUT/trace-$sh-new.log | grep -E "gate/up|down" | cut -c1-200; done
echo "total $(el)"
