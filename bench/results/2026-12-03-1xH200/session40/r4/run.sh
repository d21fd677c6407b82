# s40 r4, one H200: the review's test changes (uncommitted on top of 29e1778): gpu_adamw's split pairs over
# ties with lr 0 and the remainders outside the ranges; gpu_master_split's join over two poisons; gpu_model's uploads
# with each tensor's own rounding (fp32 masters to even, split ones away from zero); gpu_adamw's guard. Predicted:
# all pass (gpu_adamw 1, gpu_master_split 1, gpu_model 6, gpu_embedding 5, gpu_reduce 3).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep error /tmp/b.log | head; exit 1; }
echo "built $(el)"
for t in gpu_adamw gpu_master_split gpu_model gpu_embedding gpu_reduce; do
  MOKC_BIN=build/mokc timeout 120 build/mokc_tests $t > $OUT/test-$t.log 2>&1; echo "test $t rc $? $(el): $(tail -1 $OUT/test-$t.log)"
  grep -E "^FAIL|FAIL " $OUT/test-$t.log | head -5
done
echo "total $(el)"
