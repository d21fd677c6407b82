# Prepared in s46 (one H200 lent) as the first call of a session with the 2-GPU kind (≈ 8-9 minutes): the build and
# every test, 2-GPU parts included (s29-s46's changes where they meet a second rank: the dx-written MoE backward,
# the experts' squares, the deferred AdamW updates and table rows, mokc check at ep = 2 and dp = 2, the replica
# comparison at every checkpoint). Copy to .deps/run.sh, set .deps/rev to the commit, run with carry [".deps"] on
# nvidia-h200-x2. Predicted: every test passes (s46 r2 on one GPU: 208 passed in 241 s; the 2-GPU cases add ≈ 3-4
# minutes). Then run1.sh, then call3-extras.sh; start each within 30 s of the last so the machine stays warm.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 GIT_REVISION=$(cat .deps/rev)
PARTS=tests timeout 580 scripts/gpu-check.sh > $OUT/gpu-check-tests.txt 2>&1
echo "rc $?"; sed -n '/== gpu-check summary/,$p' $OUT/gpu-check-tests.txt; grep -E "^FAIL" $OUT/gpu-check-tests.txt | head
