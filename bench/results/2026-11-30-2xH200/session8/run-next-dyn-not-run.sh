# Prepared for the next session (nvidia-h200, one GPU), not run: does claiming tiles from a ticket (as the megakernels
# do) cost the standalone 128-row tile the L2 reads the megakernel pays? (gemm-dynamic-tickets-unrun.diff: the same
# tiles and order, claimed by atomicAdd and handed through the task ring, `mok_sm90_dyn`.) s8 r6 found the megakernel's
# SMs reading 12.7 GB of L2 a padded PFLOP against the standalone tile's 8.0, the standalone 23 % under its tile model,
# as if the two M tiles of a group, in lockstep on one B slice under the fixed sequence, had their requests merged.
# Prediction if that holds: dyn +15-40 % time and L2 SM reads toward the model's 30 GB (static 23.2 GB); if dyn equals
# static, the megakernel's extra reads come from elsewhere (its A boxes past an expert's rows, which TMA fetches there
# but zero-fills here; the down tasks and the dispatch beside the gate/up tasks).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
patch -s -p1 < bench/results/2026-11-30-2xH200/session8/gemm-dynamic-tickets-unrun.diff || exit 1
make -j16 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
MOKC_BIN=build/mokc timeout 120 build/mokc_tests gpu_gemm_sm90 > $OUT/test.log 2>&1; echo "tests rc=$?: $(grep -c '^ok' $OUT/test.log) ok, $(grep -c '^FAIL' $OUT/test.log) fail $(el)"; grep -A3 FAIL $OUT/test.log | head -8
for c in "192 170 4096 7168" "192 170 7168 2048" "192 256 4096 7168" "1 8192 8192 8192"; do set -- $c
timeout 90 ./mokc bench gemm --groups $1 --m $2 --n $3 --k $4 > $OUT/gemm-$2-$3.log 2>&1
echo "gemm $c: $(grep -o '"impl": "[a-z0-9_]*"\|"ms": [0-9.]*' $OUT/gemm-$2-$3.log | sed 's/"impl": //; s/"ms": //' | tr '\n' ' ')"; done; el
M=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed
# bench gemm times mok_sm90 first (6 warm-up + 20 launches), then mok_sm90_dyn (the same kernel): launch 11 of each
for v in "static 10" "dyn 36"; do set -- $v
timeout 150 ncu --clock-control none -k regex:gemm_sm90_kernel --launch-skip $2 -c 1 --metrics $M ./mokc bench gemm --groups 192 --m 170 --n 4096 --k 7168 --iters 20 --warmup 5 > $OUT/ncu-$1.txt 2>&1
echo "ncu $1: $(grep -E "^ +[a-z]" $OUT/ncu-$1.txt | awk '{print $1, $(NF-1), $NF}' | tr '\n' ' ')"; done
echo "total $(el)"
