# s6 r13 (one H200): the token-side tiles at cuBLAS's shape: 192 columns of B (three consumer
# warpgroups of m64n176) x 176 rows, 4 stages of 46 KB, 512 threads, stores from registers.
# Prediction (gate/up, 170 rows a group): ~21.8 GB of L2 tile loads (cuBLAS 23.2) against 32.6, and
# products over 176 rows instead of 256: ~2.9-3.1 ms against 3.74-4.10 (cuBLAS 2.95), if the four
# stages cover DRAM's latency (each weight slice has one reader).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
t0=$(date +%s)
make -j16 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
MOKC_BIN=build/mokc timeout 60 build/mokc_tests gpu_gemm_sm90 > $OUT/test-gpu_gemm_sm90.log 2>&1; echo "tests rc=$?: $(grep -c '^ok' $OUT/test-gpu_gemm_sm90.log) ok, $(grep -c '^FAIL' $OUT/test-gpu_gemm_sm90.log) fail"; grep -A3 FAIL $OUT/test-gpu_gemm_sm90.log | head -12
for c in "192 170 4096 7168" "192 176 4096 7168" "192 170 7168 2048" "64 170 1536 2048"; do set -- $c
timeout 60 ./mokc bench gemm --groups $1 --m $2 --n $3 --k $4 > $OUT/bench-$2-$3.log 2>&1; echo "== $c rc=$?"; grep -E "vs cublas" $OUT/bench-$2-$3.log; grep '^{' $OUT/bench-$2-$3.log | grep -o '"impl": "[a-z0-9_]*".*"ms": [0-9.]*' | sed 's/, "m".*"ms"/ ms/'
done
M=gpu__time_duration.sum,lts__t_bytes.sum,dram__bytes_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed
timeout 60 ncu --clock-control none -k regex:gemm_sm90_tok_kernel -c 1 --metrics $M ./mokc bench gemm --groups 192 --m 170 --n 4096 --k 7168 --iters 20 --warmup 0 > $OUT/ncu-tok.txt 2>&1
grep -E "gpu__time|lts__t_bytes|dram__bytes|lts__throughput|sm__throughput" $OUT/ncu-tok.txt
echo "total $(( $(date +%s) - t0 )) s"
