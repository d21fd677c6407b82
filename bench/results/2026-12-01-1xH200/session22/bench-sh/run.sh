# s22 r3 (1×H200): scripts/bench.sh on one GPU at the tree of c1e9442 (the training runs take
# configs/mokc-small-1gpu.json there): the layer sweep at EP1 (both shapes, both impls) and mokc-small-1gpu,
# 100 steps, twice with mok (compared bit for bit) and once unfused.
# Predicted: mokc-small-1gpu mok ≈ 415 ms a step (43 % MFU) with r2's head; the sweep's EP1 figures as s21's
# (Qwen-like mok 1.46 / 4.83 ms, Kimi-like 9.86 / 40.2).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc > /tmp/build.log 2>&1 || { tail -20 /tmp/build.log; exit 1; }
echo "built $(el)"
scripts/bench.sh $OUT/bench-sh > $OUT/bench-sh.out 2>&1; echo "bench.sh rc $? $(el)"
cat $OUT/bench-sh.out | grep -v '^\[' | tail -40
