# For a next-session device call (nvidia-h200, one GPU is enough), not run: the grouped GEMM by 2-CTA
# clusters multicasting B (the script patches this tree with session5/gemm-pairs-multicast-unrun.diff).
# First its correctness (gpu_gemm_sm90: the pairs' output bit for bit equal to the single blocks'),
# then whether multicast lowers the L2-bound time of the Kimi-like forward's gate/up GEMM shape
# (192 experts x 256 rows x 4096 x 7168), with ncu's L2 numbers for both kernels (launch 21 of the
# single-block kernel: 1 untimed + 20 timed; then the first of the pairs).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
t0=$(date +%s)
patch -s -p1 < bench/results/2026-11-30-2xH200/session5/gemm-pairs-multicast-unrun.diff || exit 1
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
MOKC_BIN=build/mokc timeout 120 build/mokc_tests gpu_gemm_sm90 > $OUT/test-gpu_gemm_sm90.log 2>&1; echo "tests rc=$?: $(grep -c '^ok' $OUT/test-gpu_gemm_sm90.log) ok, $(grep -c '^FAIL' $OUT/test-gpu_gemm_sm90.log) fail"; grep -A3 FAIL $OUT/test-gpu_gemm_sm90.log | head -12
timeout 120 ./mokc bench gemm > $OUT/bench-gemm.log 2>&1; echo "bench gemm rc=$?"; grep -v '^{' $OUT/bench-gemm.log | tail -12
timeout 120 ./mokc bench gemm --groups 192 --m 256 --n 4096 --k 7168 > $OUT/bench-gemm-kimi.log 2>&1; echo "kimi-like rc=$?"; grep -v '^{' $OUT/bench-gemm-kimi.log | tail -6
M=gpu__time_duration.sum,lts__t_bytes.sum,dram__bytes_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
timeout 200 ncu --clock-control none -k regex:gemm_sm90_kernel --launch-skip 20 --launch-count 2 --metrics $M ./mokc bench gemm --groups 192 --m 256 --n 4096 --k 7168 --iters 20 --warmup 0 > $OUT/ncu-kimi.txt 2>&1
grep -E "gemm_sm90_kernel|gpu__time|lts__t_bytes|dram__bytes|lts__throughput|sm__throughput" $OUT/ncu-kimi.txt | head -24
echo "total $(( $(date +%s) - t0 )) s"
