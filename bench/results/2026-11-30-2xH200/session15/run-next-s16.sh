# Prepared in s15 for the next session's first call (nvidia-h200-x2; not run): copy to .deps/run1.sh. 0ab1816 (the
# TMA encoders' shared helper), fb40a5d (one map a Sm90Panels) and dfb8061 (test_mok's check_same_bits) have not
# run on a GPU; 68ce65e (panels several to a TMA box) ran the mok, gpu_gemm, gpu_train suites and the EP2 check,
# not the whole check. This runs the full scripts/gpu-check.sh on HEAD.
# Expected: 172 passed, 0 failed, 1 skipped; EP2, mapping, fallback checks pass; bench moe as s15 r6 (Qwen-like
# fwd+bwd ~4.56-4.69 ms by machine, Kimi-like ~29.5-30.3).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 all build/mokc_tests > $OUT/build.log 2>&1 || { echo "build failed"; tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
(export OUT=/tmp/gc; timeout 540 bash scripts/gpu-check.sh > /tmp/gc.log 2>&1; echo "gpu-check rc=$?")
sed -n '/== gpu-check summary/,$p' /tmp/gc.log | grep -v '^/usr/local/cuda/bin/nvcc' | head -24
cp /tmp/gc.log $OUT/gpu-check.log; for f in /tmp/gc/*.jsonl; do cp $f $OUT/; done; echo "total $(el)"
