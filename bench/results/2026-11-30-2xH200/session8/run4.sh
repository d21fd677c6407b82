# s8 call 4 (nvidia-h200-x2; GPU 0 alone for the GEMMs): the standalone 192 x 192 tile in the 128 x 256 tile's
# orientation (mok_sm90_r192; this tree before commit): its test, the Kimi-like expert shapes against the
# other tiles and cuBLAS, ncu's L2 bytes of r192 and tok192 at 170 rows; then traces of both MoE shapes at 5fb64df's
# kernels (the traced builds' first run since b4e7de1).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
MOKC_BIN=build/mokc timeout 120 build/mokc_tests gpu_gemm_sm90 > $OUT/test-gemm.log 2>&1; echo "tests gemm_sm90 rc=$?: $(grep -c '^ok' $OUT/test-gemm.log) ok, $(grep -c '^FAIL' $OUT/test-gemm.log) fail $(el)"; grep -A3 FAIL $OUT/test-gemm.log | head -8
for c in "192 170 4096 7168" "192 185 4096 7168" "192 192 4096 7168" "192 170 7168 2048" "192 185 7168 2048" "64 1024 1536 2048" "1 8192 8192 8192"; do set -- $c
CUDA_VISIBLE_DEVICES=0 timeout 90 ./mokc bench gemm --groups $1 --m $2 --n $3 --k $4 > $OUT/gemm-$1-$2-$3.log 2>&1
echo "gemm $c: $(grep -o '"impl": "[a-z0-9_]*"\|"ms": [0-9.]*' $OUT/gemm-$1-$2-$3.log | sed 's/"impl": //; s/"ms": //' | tr '\n' ' ')"; done; el
for k in r192_kernel tok_kernel; do
timeout 90 ncu --clock-control none -k regex:gemm_sm90_$k -c 1 --metrics gpu__time_duration.sum,lts__t_bytes.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed ./mokc bench gemm --groups 192 --m 170 --n 4096 --k 7168 --iters 20 --warmup 0 > $OUT/ncu-$k.txt 2>&1
echo "ncu $k: $(grep -E "gpu__time|lts__t_bytes|sm__throughput|srcunit_tex|hmma" $OUT/ncu-$k.txt | head -10 | awk '{print $1, $(NF-1), $NF}' | tr '\n' ' ')"; done; el
for sh in qwen3-30b-a3b-like kimi-k2-like; do
MOKC_MOK_TRACE=1 timeout 150 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok --iters 10 > $OUT/trace-$sh.log 2>&1
echo "== $sh rc=$?"; grep -A6 "forward trace, ep_rank 0" $OUT/trace-$sh.log | head -8; grep -A7 "backward trace, ep_rank 0" $OUT/trace-$sh.log | head -8
done
echo "total $(el)"
