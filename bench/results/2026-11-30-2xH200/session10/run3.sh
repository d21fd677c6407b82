# s10 call 3 (nvidia-h200-x2): dy's bf16 rows and the gates in the window, scaled by the owners' dispatch as they
# pull them (bf16(gate * bf16(dy)), the unfused layer the same), instead of gate-scaled dy slots written before the
# kernel. Correctness (mok, gpu_moe_unfused, gpu_train suites; EP2 check), then HEAD against 15d3e4a (.deps/v.diff
# undone) interleaved, both shapes, twice.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
mkdir -p /tmp/base; cp .deps/v.diff /tmp/v.diff; tar --exclude=./.deps -cf - . | (cd /tmp/base && tar xf -)
(cd /tmp/base && patch -s -R -p1 < /tmp/v.diff && find kernels src -newer /tmp/v.diff -exec touch {} + ; make -j14 mokc > /tmp/base.log 2>&1 || echo "base build failed") &
make -j16 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }; wait; echo "built $(el)"
for s in mok gpu_moe_unfused gpu_train; do
MOKC_BIN=build/mokc timeout 200 build/mokc_tests $s > $OUT/test-$s.log 2>&1; echo "tests $s rc=$?: $(tail -1 $OUT/test-$s.log) $(el)"; grep -E "^FAIL" -A3 $OUT/test-$s.log | head; done
TIMING=0 timeout 150 scripts/gpu-moe-ep2-check.sh > $OUT/ep2-check.log 2>&1; echo "ep2 check rc=$?: $(grep -c PASS $OUT/ep2-check.log) PASS, $(grep -c FAIL $OUT/ep2-check.log) FAIL; $(grep '^watchdog:' $OUT/ep2-check.log) $(el)"
for rep in 1 2; do for sh in kimi-k2-like qwen3-30b-a3b-like; do for v in . /tmp/base; do
timeout 60 mpirun -np 2 $v/mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1
grep '^{' /tmp/b.log | sed "s|^{|{\"tree\": \"$([ $v = . ] && echo head || echo 15d3e4a)\", \"rep\": $rep, |" >> $OUT/bench-ab.jsonl
echo "$sh $v r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*ms[^,]*\|"mok_mib[^,}]*' | tr '\n' ' ') $(grep -o '"bwd_dy_[a-z]*_ms[^,]*\|"fwd_kernel_ms[^,]*\|"bwd_kernel_ms[^,]*' /tmp/b.log | tr '\n' ' ') $(el)"; done; done; done
echo "total $(el)"
