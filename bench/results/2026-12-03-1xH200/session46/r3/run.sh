# s46 r3, one H200: a0dee6b's gpu-check.sh PARTS on one GPU, before a 2-GPU session relies on it: PARTS=extras (the
# build, bench gemm and bench attn; the 2-GPU checks skipped; the tests skipped), then PARTS=tests with a filter
# (threads: the tests alone). Predicted: both exit 0; the first summary says tests skipped and runs gemm and attn
# (≈ 1-2 min), the second runs 5 tests and nothing else.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 GIT_REVISION=$(cat .deps/rev)
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
PARTS=extras timeout 400 scripts/gpu-check.sh > $OUT/gpu-check-extras.txt 2>&1
echo "extras rc $? $(el)"; sed -n '/== gpu-check summary/,$p' $OUT/gpu-check-extras.txt | head -30
PARTS=tests timeout 100 scripts/gpu-check.sh threads > $OUT/gpu-check-tests-threads.txt 2>&1
echo "tests threads rc $? $(el)"; sed -n '/== gpu-check summary/,$p' $OUT/gpu-check-tests-threads.txt | head -14
