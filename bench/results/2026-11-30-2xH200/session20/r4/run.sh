# s20 r4: the full scripts/gpu-check.sh at 3b2b543 (3001f95's code; ab3c740's wide adds had no full check of their own).
# Expected: 173+ passed, 0 failed; EP2, mapping, fallback checks pass; Qwen-like ~1.53 / 4.55 ms, Kimi-like ~8.3 / 28.5.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 all build/mokc_tests > $OUT/build.log 2>&1 || { echo "build failed"; tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
(export OUT=/tmp/gc; timeout 540 bash scripts/gpu-check.sh > /tmp/gc.log 2>&1; echo "gpu-check rc=$?")
sed -n '/== gpu-check summary/,$p' /tmp/gc.log | grep -v '^/usr/local/cuda/bin/nvcc' | head -24
cp /tmp/gc.log $OUT/gpu-check.log; for f in /tmp/gc/*.jsonl; do cp $f $OUT/; done; echo "total $(el)"
