# s13 call 2 (one GPU of nvidia-h200-x2; HEAD e5fe752): ncu detail of the router's fp32 GEMMs (gemm_f32x3_sm90_kernel)
# at both shapes' per-GPU sizes, EP1 unfused with narrow experts (the router GEMMs' shapes do not depend on I).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 mokc > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
for c in "kimi-k2-like 4096" "qwen3-30b-a3b-like 8192"; do set -- $c
CUDA_VISIBLE_DEVICES=0 timeout 200 ncu --clock-control none -k regex:gemm_f32x3_sm90 -c 4 --section SpeedOfLight \
  --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis \
  --section LaunchStats --section SourceCounters ./mokc bench moe --config configs/bench/$1.json --impl unfused --ep 1 \
  --tokens $2 --iters 1 --warmup 0 --set moe.moe_intermediate_size=128 > $OUT/ncu-router-$1.txt 2>&1
echo "== $1 rc=$? $(el)"
grep -E 'gemm_f32x3_sm90_kernel<|Duration|Warp Cycles Per Issued|Compute \(SM\) Throughput|Stall|Shared.*Bank|Issue Slots Busy|No Eligible' $OUT/ncu-router-$1.txt | head -60
done
echo "total $(el)"
