# s47 r2, one H200: 60d8e70 on a GPU: the ranks agree on the backend (60d8e70; gpu_train's new case runs rank 1 with
# CUDA_VISIBLE_DEVICES empty beside a GPU rank), every rank returns the agreed checkpoint failure (6fc1dec; a CPU
# test under mpirun with rank 1's files capped), no HDF5 cleanup at exit (65ee24b; every checkpoint and resume of
# the GPU tests runs through it), the plot script's messages (0219088). Every test. Predicted: all pass, 210 passed
# (s46 r2's 208 + ckpt 1 + gpu_train 1; the plots case skips where no python3 has matplotlib), 8 skipped.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
MOKC_BIN=build/mokc timeout 460 build/mokc_tests > $OUT/test-all.log 2>&1
echo "every test rc $? $(el): $(tail -1 $OUT/test-all.log)"; grep -E "^FAIL|FAIL " $OUT/test-all.log | head -12
grep -E "gpu_train.test_gpu_rank_without|ckpt\.mpi_one_rank|^skip" $OUT/test-all.log
echo "total $(el)"
