# For a next-session device call (nvidia-h200, one GPU is enough), not run: the token-side tile with
# each consumer's B panel loaded as two 32-column halves, 64-byte swizzled (descriptor: LBO 4096 B
# between the halves, SBO 512 B between 8-line K groups, layout 2, 1024 B a K step; a helper
# checked these against the PTX ISA and CUTLASS): the layout the megakernel's gate/up task needs to
# pair 32 gate with 32 up columns in one consumer. Its test requires the same bits as the
# 128-byte-swizzled tile; then its speed on the Kimi-like shapes (prediction: the same as the
# 128-byte version within a few %, or slower if the 64-byte swizzle's shared-memory reads conflict).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
patch -s -p1 < bench/results/2026-11-30-2xH200/session6/gemm-tok-sw64-half-panels-unrun.diff || exit 1
make -j16 mokc build/mokc_tests > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
MOKC_BIN=build/mokc timeout 90 build/mokc_tests gpu_gemm_sm90 > $OUT/test.log 2>&1; echo "tests rc=$?: $(grep -c '^ok' $OUT/test.log) ok, $(grep -c '^FAIL' $OUT/test.log) fail"; grep -A3 FAIL $OUT/test.log | head -12
for c in "192 170 4096 7168" "192 170 7168 2048"; do set -- $c
timeout 60 ./mokc bench gemm --groups $1 --m $2 --n $3 --k $4 2>&1 | grep -E "vs cublas|^\{"
done
