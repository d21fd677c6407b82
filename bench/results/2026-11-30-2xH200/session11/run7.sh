# s11 call 7 (nvidia-h200-x2): the forward's gate/up epilogue stores pre_gate, pre_up and h by TMA (64 x 64 boxes,
# the half tiles laid out as 128-byte swizzled boxes) where a consumer has all 64 rows, else from registers as before
# (.deps/v.diff over ab4e86c). mok suite, then new against base interleaved, both shapes, twice; then the EP2 check.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
mkdir -p /tmp/base; cp .deps/v.diff /tmp/v.diff; tar --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < /tmp/v.diff && find kernels src -newer /tmp/v.diff -exec touch {} + ; make -j12 mokc > /tmp/base.log 2>&1 || echo "base build failed") &
make -j14 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }; wait; echo "built $(el)"
MOKC_BIN=build/mokc timeout 100 build/mokc_tests mok > $OUT/test-mok.log 2>&1; echo "tests mok rc=$?: $(tail -1 $OUT/test-mok.log) $(el)"; grep -E "^FAIL" -A3 $OUT/test-mok.log | head
for rep in 1 2; do for sh in qwen3-30b-a3b-like kimi-k2-like; do for v in . /tmp/base; do
timeout 40 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$([ $v = . ] && echo new || echo base)\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
echo "$sh $([ $v = . ] && echo new || echo base) r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*' | tr '\n' ' ') $(grep -o '"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; done; done; done
TIMING=0 timeout 110 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1; echo "ep2 check rc=$?: $(grep -c PASS $OUT/ep2-check.log) PASS, $(grep -c FAIL $OUT/ep2-check.log) FAIL; $(grep '^watchdog:' $OUT/ep2-check.log) $(el)"
