# s24 r10 (1×H200): the session's final HEAD through the full scripts/gpu-check.sh on one GPU.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j16 GIT_REVISION=$(cat .deps/rev) all build/mokc_tests > /tmp/build.log 2>&1 || { echo "build failed"; tail -20 /tmp/build.log; exit 1; }; echo "built $(el)"
OUT=$OUT/gpu-check timeout 190 scripts/gpu-check.sh > $OUT/gpu-check.out 2>&1; echo "gpu-check rc=$? $(el)"
grep -E "passed|FAIL" $OUT/gpu-check.out | head -8; tail -8 $OUT/gpu-check.out
rm -f $OUT/gpu-check/build.log
