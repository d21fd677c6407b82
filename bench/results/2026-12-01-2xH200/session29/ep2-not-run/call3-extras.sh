# Prepared in s46 (one H200 lent) as the third call of a session with the 2-GPU kind, after call1-tests.sh and
# run1.sh (≈ 7-8 minutes): scripts/gpu-check.sh's checks and benchmarks (the EP2 check of both MoE layers, the
# rank-to-GPU mapping, the fallback without NVLink peers, bench moe of both shapes with and without --accumulate,
# 10 steps of mokc-small at seq_len 8192, bench gemm and attn), then run2.sh's issue-9 lines (scored, adding,
# collapsed). Copy to .deps/run.sh with run2.sh beside it in .deps/, set .deps/rev, run with carry [".deps"].
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 GIT_REVISION=$(cat .deps/rev)
PARTS=extras timeout 330 scripts/gpu-check.sh > $OUT/gpu-check-extras.txt 2>&1
echo "rc $?"; sed -n '/== gpu-check summary/,$p' $OUT/gpu-check-extras.txt
timeout 240 bash .deps/run2.sh
