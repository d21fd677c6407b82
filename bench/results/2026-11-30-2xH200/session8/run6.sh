# s8 call 6 (nvidia-h200-x2, 293c29f; one GPU): ncu, the same metrics on the Kimi-like forward kernel at EP1 (E = 192,
# the EP2 run's per-GPU work) and on the standalone 128-row tile at the uniform 170-row gate/up shape.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
make -j30 mokc > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active
timeout 120 ncu --clock-control none -k regex:gemm_sm90_kernel --launch-skip 3 -c 1 --metrics $M ./mokc bench gemm --groups 192 --m 170 --n 4096 --k 7168 --iters 20 --warmup 0 > $OUT/ncu-gemm.txt 2>&1
echo "== standalone 128-row tile"; grep -E "^ +[a-z]" $OUT/ncu-gemm.txt | awk '{print $1, $(NF-1), $NF}' | head -12; el
timeout 200 ncu --clock-control none -k regex:mok_forward_sm90 --launch-skip 3 -c 1 --metrics $M ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --iters 20 --set moe.num_experts=192 > $OUT/ncu-mok.txt 2>&1
echo "== mok forward EP1"; grep -E "^ +[a-z]" $OUT/ncu-mok.txt | awk '{print $1, $(NF-1), $NF}' | head -12; el
