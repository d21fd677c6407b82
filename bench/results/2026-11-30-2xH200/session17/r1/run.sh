# Prepared in s16 for the next session's first call (nvidia-h200-x2; not run): copy to .deps/run1.sh. dbad75d (the
# K-tail zeroing without divisions) ran the mok suite, the EP2 check and gpu_train (r6, r7), not the whole check;
# 5641f6e passed it (r4). This runs the full scripts/gpu-check.sh on HEAD.
# Expected: 173 passed, 0 failed, 1 skipped; EP2, mapping, fallback checks pass; bench moe: Qwen-like ~1.53 / 4.55
# ms, Kimi-like ~8.1 / 28.6 by machine.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 all build/mokc_tests > $OUT/build.log 2>&1 || { echo "build failed"; tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
(export OUT=/tmp/gc; timeout 540 bash scripts/gpu-check.sh > /tmp/gc.log 2>&1; echo "gpu-check rc=$?")
sed -n '/== gpu-check summary/,$p' /tmp/gc.log | grep -v '^/usr/local/cuda/bin/nvcc' | head -24
cp /tmp/gc.log $OUT/gpu-check.log; for f in /tmp/gc/*.jsonl; do cp $f $OUT/; done; echo "total $(el)"
