# s6 r8 (85d7ea0 + the token-side grouped GEMM, gemm_sm90_grouped_tok): correctness, then the
# Kimi-like expert shapes. Prediction: on gate/up with 170 rows a group the token-side tiles load
# ~10 % fewer L2 bytes than the 128-row tiles (which get the padding rows free: TMA zero-fills past
# M) and run the same number of m64n256 MMAs, so at most ~10 % faster; against the 128-row tiles
# at m = 256 (what the megakernel loads: the padding rows are the next expert's) ~20 % fewer bytes.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
t0=$(date +%s)
make -j32 all build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
MOKC_BIN=build/mokc timeout 120 build/mokc_tests gpu_gemm_sm90 > $OUT/test-gpu_gemm_sm90.log 2>&1; echo "tests rc=$?: $(grep -c '^ok' $OUT/test-gpu_gemm_sm90.log) ok, $(grep -c '^FAIL' $OUT/test-gpu_gemm_sm90.log) fail"; grep -A3 FAIL $OUT/test-gpu_gemm_sm90.log | head -12
for c in "192 256 4096 7168" "192 170 4096 7168" "192 176 4096 7168" "192 170 7168 2048" "64 170 1536 2048"; do set -- $c
timeout 100 ./mokc bench gemm --groups $1 --m $2 --n $3 --k $4 > $OUT/bench-$2-$3.log 2>&1; echo "== $c rc=$?"; grep -E "vs cublas" $OUT/bench-$2-$3.log; grep '^{' $OUT/bench-$2-$3.log | grep -o '"impl": "[a-z0-9_]*".*"ms": [0-9.]*' | sed 's/, "m".*"ms"/ ms/'
done
M=gpu__time_duration.sum,lts__t_bytes.sum,lts__t_sectors_srcunit_tex.sum,dram__bytes_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
timeout 150 ncu --clock-control none -k regex:gemm_sm90_kernel --launch-skip 20 --launch-count 2 --metrics $M ./mokc bench gemm --groups 192 --m 170 --n 4096 --k 7168 --iters 20 --warmup 0 > $OUT/ncu-170.txt 2>&1
grep -E "gemm_sm90_kernel|gpu__time|lts__t_|dram__bytes|lts__throughput|sm__throughput" $OUT/ncu-170.txt | sed 's/(GemmSm90Params.*//' | head -16
echo "total $(( $(date +%s) - t0 )) s"
