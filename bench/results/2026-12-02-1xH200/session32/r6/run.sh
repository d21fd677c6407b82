# s32 r6: gpu_moe_unfused (with the new k = 12 and k = 10 shapes) on HEAD's combine backward.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
make -j16 GIT_REVISION=$(cat .deps/rev) mokc build/mokc_tests > /tmp/b.log 2>&1 || { echo "build failed"; tail -20 /tmp/b.log; exit 1; }
MOKC_BIN=./mokc timeout 100 build/mokc_tests gpu_moe_unfused > $OUT/test-gpu_moe_unfused.log 2>&1; echo "rc $?"; cat $OUT/test-gpu_moe_unfused.log | tail -14
