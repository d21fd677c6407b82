# s37 r3, one H200: why r2's router backward took 0.123 ms at 8192 tokens, not the predicted 0.05-0.08: ncu durations
# (no clock control) of the router's kernels (casts, splits, the f32x3 GEMMs, the split-K sums) in the Qwen-like
# layer collapsed at EP1, 8192 and 16384 tokens, A (HEAD, fp32 accuracy) and B (the tree: bf16 operands).
# ncu_sum.py is session26/r1's.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
R=$(cat .deps/rev)
rm -rf /tmp/A; mkdir -p /tmp/A; tar cf - --exclude=./.deps . | (cd /tmp/A && tar xf -); cp -r .deps/ab-A/. /tmp/A/
(cd /tmp/A && make -j6 GIT_REVISION=$R-A mokc > /tmp/bA.log 2>&1 || echo "A build failed") &
make -j10 GIT_REVISION=$R-B mokc > /tmp/bB.log 2>&1 || { echo "B build failed"; exit 1; }
wait; echo "built $(el)"
ln -sfn $PWD /tmp/B
for v in A B; do for n in 8192 16384; do
  (cd /tmp/$v && timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --kernel-name regex:'gemm_f32x3|f32_to_bf16|split|partials' ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json \
    --impl mok --tokens $n --iters 2 --warmup 1 --collapse > /tmp/ncu-$v-$n.csv 2> /tmp/ncu-$v-$n.err)
  echo "== $v $n rc $? $(el)"; python3 .deps/ncu_sum.py /tmp/ncu-$v-$n.csv | tee $OUT/ncu-$v-$n-summary.txt
done; done
echo "total $(el)"
