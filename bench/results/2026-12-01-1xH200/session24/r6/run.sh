# s24 r6 (1×H200): HEAD (the session's kept changes: the gradient norm's order, the backwards cross-entropy pass,
# bench.sh's profiled step 15) through the full scripts/gpu-check.sh on one GPU, then scripts/bench.sh with 20
# steps (the sweep at EP1, mokc-small-1gpu mok twice and unfused once, step 15 of each profiled).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) all build/mokc_tests > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }; echo "built $(el)"
OUT=/tmp/gpu-check timeout 260 scripts/gpu-check.sh > /tmp/gpu-check.out 2>&1; echo "gpu-check rc=$? $(el)"
grep -E "passed|FAIL" /tmp/gpu-check.out | head -8; tail -12 /tmp/gpu-check.out
STEPS=20 timeout 280 scripts/bench.sh /tmp/bench-sh > /tmp/bench-sh.out 2>&1; echo "bench.sh rc=$? $(el)"
cp /tmp/bench-sh.out /tmp/bench-sh/logs/; cp /tmp/gpu-check.out /tmp/gpu-check/
grep -vE '^ *[0-9]+ ' /tmp/bench-sh.out | tail -16
grep -c op_ms /tmp/bench-sh/records/train-*.jsonl
tar -C /tmp -czf $OUT/results.tgz bench-sh gpu-check
echo "total $(el)"
