# Prepared for a next-session device call (nvidia-h200, one GPU), not run: the token-side tile with 192 rows
# (m64n192, 96 accumulators; gemm-tok192-unrun.diff: compiles at 128 registers, no spills; the 176-row kernel's
# SASS unchanged). Its test (two new shapes of 185 and 192 rows), then the Kimi-like expert shapes at 170 rows
# (176 favoured: 192 computes 13 % more products) and 185 rows (176 cannot run; the 128-row tiles take two tiles).
# Prediction: at 170 rows tok192 within +5 % of tok (3.48 ms); at 185 rows ≈ tok's 170-row time x 185 / 170.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
patch -s -p1 < bench/results/2026-11-30-2xH200/session7/gemm-tok192-unrun.diff || exit 1
make -j16 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
MOKC_BIN=build/mokc timeout 90 build/mokc_tests gpu_gemm_sm90 > $OUT/test.log 2>&1; echo "tests rc=$?: $(grep -c '^ok' $OUT/test.log) ok, $(grep -c '^FAIL' $OUT/test.log) fail"; grep -A3 FAIL $OUT/test.log | head -12
for c in "192 170 4096 7168" "192 185 4096 7168" "192 170 7168 2048" "192 185 7168 2048"; do set -- $c
timeout 60 ./mokc bench gemm --groups $1 --m $2 --n $3 --k $4 2>&1 | grep -E "vs cublas|^\{"
done
