# s46 r2, one H200: 0349da2 on a GPU: the CPU threads note (787e5d6), the replica comparison at every checkpoint
# (6cc35e4; at world 1 it compares nothing, so the GPU runs must be unchanged), gpu_train's deferred-against-eager
# test on random ids of a 4096-token vocabulary (d9d7de1; its 1-GPU run). Every test. Predicted: all pass, 208 passed
# (r1's 200 + threads 5 + replica_check 2 + ckpt 1 = 208; the new deferred run is inside an existing case), 7 skipped.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; grep -E "error" /tmp/b.log | head; exit 1; }
echo "built $(el)"
MOKC_BIN=build/mokc timeout 480 build/mokc_tests > $OUT/test-all.log 2>&1
echo "every test rc $? $(el): $(tail -1 $OUT/test-all.log)"; grep -E "^FAIL|FAIL " $OUT/test-all.log | head -12
grep -E "gpu_train.test_gpu_deferred|threads\.|replica_check\.|ckpt\.mpi_diverged" $OUT/test-all.log
echo "total $(el)"
