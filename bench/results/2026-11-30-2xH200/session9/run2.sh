# s9 call 2 (one GPU of nvidia-h200-x2 machine kind, a39a7c9 + forward-r192-tiles-unrun.diff): ncu of the EP1
# Kimi-like forward kernel (E = 192, the EP2 per-GPU work) with the 128-row tile (wgmma) and the 192-row tile
# (wgmma192), same metrics as s8 r6: do the 192-row tiles lower the L2 reads, and if so why is the kernel no faster?
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
patch -s -p1 < bench/results/2026-11-30-2xH200/session8/forward-r192-tiles-unrun.diff || exit 1
make -j30 mokc > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built $(el)"
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,smsp__inst_executed.sum,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio
for tile in wgmma192 wgmma; do
MOKC_MOK_TILE=$tile timeout 220 ncu --clock-control none -k regex:mok_forward_sm90 --launch-skip 3 -c 1 --metrics $M ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --iters 20 --set moe.num_experts=192 > $OUT/ncu-$tile.txt 2>&1
echo "== $tile: $(grep -o '"fwd_ms[^,]*' $OUT/ncu-$tile.txt)"; grep -E "^ +[a-z]" $OUT/ncu-$tile.txt | awk '{print $1, $(NF-1), $NF}'; el
done
for rep in 1 2; do for tile in wgmma192 wgmma; do
MOKC_MOK_TILE=$tile timeout 100 mpirun -np 1 ./mokc bench moe --config configs/bench/kimi-k2-like.json --impl mok --set moe.num_experts=192 > $OUT/ep1.log 2>&1
echo "EP1 $tile r$rep: $(grep '"bench": "moe"' $OUT/ep1.log | grep -o '"fwd_ms[^,]*') $(grep -o '"fwd_kernel_ms[^,]*' $OUT/ep1.log)"; done; done
echo "total $(el)"
