# s29 r5: the full GPU check on one H200 at HEAD (gemm_rm_dynamic's plans per grid step, 733fbb3, and after).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
timeout 570 scripts/gpu-check.sh > $OUT/gpu-check.txt 2>&1; echo "gpu-check rc $?"
tail -25 $OUT/gpu-check.txt
