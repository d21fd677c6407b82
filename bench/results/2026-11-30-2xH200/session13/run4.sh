# s13 call 4 (nvidia-h200-x2, one GPU): the RS router GEMM with the planes' ring two steps deep (no wgmma
# serialization): gemm tests, ncu durations of the router kernels (both shapes), ncu stall detail of the logits kernel.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 all build/mokc_tests > $OUT/build-new.log 2>&1 || { echo "build failed"; grep -B2 -A8 error $OUT/build-new.log | head -30; exit 1; }
echo "built $(el)"
CUDA_VISIBLE_DEVICES=0 timeout 100 build/mokc_tests gpu_gemm > $OUT/test-gpu_gemm.log 2>&1; echo "tests gpu_gemm rc=$?: $(tail -1 $OUT/test-gpu_gemm.log) $(el)"
for c in "kimi-k2-like 4096" "qwen3-30b-a3b-like 8192"; do set -- $c
  CUDA_VISIBLE_DEVICES=0 timeout 100 ncu --clock-control none -k regex:gemm_f32x3_sm90 -c 8 --metrics gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed \
    ./mokc bench moe --config configs/bench/$1.json --impl unfused --ep 1 --tokens $2 --iters 1 --warmup 0 --set moe.moe_intermediate_size=128 > $OUT/ncu-$1.txt 2>&1
  echo "$1: $(grep -E 'gemm_f32x3_sm90_kernel<|duration|hmma' $OUT/ncu-$1.txt | sed -E 's/.*kernel<([0-9, ]*)>.*/<\1>/; s/gpu__time_duration.sum//; s/sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed/tensor/; s/ +/ /g' | tr '\n' ' ' | cut -c1-900)"
done
CUDA_VISIBLE_DEVICES=0 timeout 150 ncu --clock-control none -k regex:gemm_f32x3_sm90 -c 1 --section WarpStateStats --section SchedulerStats --section SourceCounters --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --print-details all \
  ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl unfused --ep 1 --tokens 4096 --iters 1 --warmup 0 --set moe.moe_intermediate_size=128 > $OUT/ncu-detail-logits.txt 2>&1
echo "detail rc=$? $(el)"; grep -iE 'stall|Warp Cycles|Eligible|Issued Warp|pipe|Bank' $OUT/ncu-detail-logits.txt | head -50
echo "total $(el)"
