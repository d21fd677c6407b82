for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
rm -f kernels/_exp*.cu
nvidia-smi --query-gpu=index,name --format=csv,noheader
t0=$(date +%s)
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout 420 scripts/gpu-train-small.sh 8192 10 2>&1 | tail -25
echo "train-small $(( $(date +%s) - t0 )) s"
./mokc bench attn > $OUT/bench-attn.log 2>&1; echo "attn rc $?"
grep -E '^\{|flash vs' $OUT/bench-attn.log
