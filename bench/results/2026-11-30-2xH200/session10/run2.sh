# s10 call 2 (nvidia-h200-x2): the backward's weight-gradient producers wait on whole-count counters
# (ticket[LANDED], ticket[DGRAD]) instead of each expert's tiles. Correctness (the mok suite, the EP2
# check with the watchdog), then HEAD against 3d9032e (.deps/v.diff undone) interleaved, then a trace.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
mkdir -p /tmp/base; cp .deps/v.diff /tmp/v.diff; tar --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < /tmp/v.diff && find kernels src -newer /tmp/v.diff -exec touch {} + ; make -j14 mokc > /tmp/base.log 2>&1 || echo "base build failed") &
make -j16 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }; wait; echo "built $(el)"
MOKC_BIN=build/mokc timeout 200 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok rc=$?: $(tail -1 $OUT/test-mok.log) $(el)"; grep -E "^FAIL" -A3 $OUT/test-mok.log | head
TIMING=0 timeout 150 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1; echo "ep2 check rc=$?: $(grep -c PASS $OUT/ep2-check.log) PASS, $(grep -c FAIL $OUT/ep2-check.log) FAIL; $(grep '^watchdog:' $OUT/ep2-check.log) $(el)"
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do for v in . /tmp/base; do
timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
grep '^{' /tmp/b.log >> $OUT/bench-ab.jsonl
echo "$sh $v r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; done; done; done
MOKC_MOK_TRACE=1 timeout 100 mpirun -np 2 ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --iters 10 > $OUT/trace-kimi.log 2>&1
grep -A14 "backward trace, ep_rank 0" $OUT/trace-kimi.log | head -9
echo "total $(el)"
