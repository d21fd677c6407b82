# s6 r11: what cuBLAS runs on the Kimi-like gate/up shape with 170 and 256 rows a group (its kernel
# names carry the tile and cluster shape), and where the token-side tiles' warps stall (ncu's warp
# state section, the not-kept diff applied to this tree).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
t0=$(date +%s)
patch -s -p1 < bench/results/2026-11-30-2xH200/session6/gemm-token-side-tiles-not-kept.diff || exit 1
make -j16 mokc > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
for m in 170 256; do
timeout 100 ncu --clock-control none -k regex:'nvjet|xmma|cutlass|gemm_bf16|sm90' --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,launch__grid_size,launch__cluster_dim_x,launch__cluster_dim_y -c 40 ./mokc bench gemm --groups 192 --m $m --n 4096 --k 7168 --iters 20 --warmup 0 > $OUT/ncu-cublas-$m.txt 2>&1
echo "== m=$m rc=$?"; grep -E "^  [a-zA-Z_].*\(" $OUT/ncu-cublas-$m.txt | grep -v gemm_sm90_kernel | sed 's/(.*//' | sort | uniq -c | head -4
grep -A8 -E "^  (nvjet|sm90_xmma|cutlass)" $OUT/ncu-cublas-$m.txt | grep -E "gpu__time|sm__throughput|lts__t_bytes|grid_size|cluster_dim" | head -6
done
timeout 120 ncu --clock-control none -k regex:gemm_sm90_kernel --launch-skip 20 -c 2 --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed" ./mokc bench gemm --groups 192 --m 170 --n 4096 --k 7168 --iters 20 --warmup 0 > $OUT/ncu-tok-stalls.txt 2>&1
echo "== tok stalls rc=$?"; grep -E "gemm_sm90_kernel|^\s+(smsp|sm__)" $OUT/ncu-tok-stalls.txt | sed "s/(GemmSm90Params.*//; s/smsp__average_warps_issue_stalled_/stall_/; s/_per_issue_active.ratio//" | awk "NF>=2 && (\$NF+0>0.05 || /kernel/)" | head -40
echo "total $(( $(date +%s) - t0 )) s"
