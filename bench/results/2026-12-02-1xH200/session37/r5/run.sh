# s37 r5, one H200: the Hopper f32x3 kernel with both operands bf16 (the router backward's dx and weight gradient) reads
# the old values of C in rounds of 32 (B), not 16 (A = 8923242): two rounds of waits a tile, not four. No spills. Predicted:
# the dx product 65.7 -> 45-50 us at 8192 tokens (123 -> 85-95 at 16384), the weight gradient unchanged (split-K: no reads).
# ncu_sum.py is session26/r1's.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev)
rm -rf /tmp/A; mkdir -p /tmp/A; tar cf - --exclude=./.deps . | (cd /tmp/A && tar xf -); cp -r .deps/ab-A/. /tmp/A/
(cd /tmp/A && make -j6 GIT_REVISION=$R-A mokc > /tmp/bA.log 2>&1 || echo "A build failed") &
make -j10 GIT_REVISION=$R-B mokc build/mokc_tests > /tmp/bB.log 2>&1 || { echo "B build failed"; exit 1; }
wait; echo "built $(el)"
MOKC_BIN=build/mokc timeout 200 build/mokc_tests gpu_gemm > $OUT/test-gpu_gemm.log 2>&1
echo "test gpu_gemm rc $? $(el): $(tail -1 $OUT/test-gpu_gemm.log)"
ln -sfn $PWD /tmp/B
for v in A B; do for n in 8192 16384; do
  (cd /tmp/$v && timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --kernel-name regex:'gemm_f32x3|f32_to_bf16|split|partials' ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json \
    --impl mok --tokens $n --iters 2 --warmup 1 --collapse > /tmp/ncu-$v-$n.csv 2> /tmp/ncu-$v-$n.err)
  echo "== $v $n rc $? $(el)"; python3 .deps/ncu_sum.py /tmp/ncu-$v-$n.csv | tee $OUT/ncu-$v-$n-summary.txt
done; done
echo "total $(el)"
