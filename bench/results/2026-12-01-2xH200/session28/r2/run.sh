# Prepared in s24 for the next session with the 2-GPU kind (2×H200): scripts/bench.sh at EP2 on the current tree,
# the first issue-11 measurement since s23 r1 (9147800, 39.2 %). Changes since that run: the RMSNorm backward with
# a row in registers and no cast pass (c4deeaa; -6 ms a step at EP2 in s23 r4), the MoE output added in its combine
# (c94a848), the gradient norm's expert partials under the all-reduce (78b32ed; predicted -4.5 ms a step at EP2),
# the backwards cross-entropy pass (65a5077; -0.2 ms a step), no host gap between micro-batches (s24 r7: -1.6 to
# -4.9 ms a step on one GPU), the head's logits in 4 x 2048-row chunks (r9: -0.6 ms). Predicted: mokc-small
# ≈ 737-747 ms a step, MFU ≈ 39.7-40.2 % over steps 20-100; the
# two mok curves bitwise equal; each run's step 15 op table in its log ("host between batches" ≈ 0).
# Copy to .deps/, set .deps/rev to the commit, and run with carry [".deps"] on nvidia-h200-x2 (≈ 6 minutes).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 GIT_REVISION=$(cat .deps/rev) all build/mokc_tests > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }; echo "built $(el)"
MOKC_BIN=build/mokc timeout 120 build/mokc_tests gpu_train > $OUT/test-gpu_train.log 2>&1
echo "gpu_train (two ranks: the gradient norm's order) rc=$?: $(tail -1 $OUT/test-gpu_train.log) $(el)"
STEPS=100 timeout 460 scripts/bench.sh /tmp/bench-sh > /tmp/bench-sh.out 2>&1; echo "bench.sh rc=$? $(el)"
cp /tmp/bench-sh.out /tmp/bench-sh/logs/
tar -C /tmp -czf $OUT/bench-sh.tgz bench-sh
grep -vE '^ *[0-9]+ ' /tmp/bench-sh.out | tail -24
sed -n '/op by op/,/^  embedding /p' /tmp/bench-sh/logs/train-mokc-small-mok.log | head -34
echo "total $(el)"
