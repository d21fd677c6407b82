# s25 r6 (1xH200): the full scripts/gpu-check.sh at HEAD (the kept changes: the trace's push sections, rope_rotate);
# then the megakernels traced adding into the gradients (--accumulate, Qwen-like EP1), where training spends 3 of 4
# micro-batches.
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
OUT_ALL=$OUT; export OUT=$OUT_ALL/gpu-check
scripts/gpu-check.sh > $OUT_ALL/gpu-check.log 2>&1; echo "gpu-check rc=$? $(el)"
tail -25 $OUT_ALL/gpu-check.log
MOKC_MOK_TRACE=1 timeout 120 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --impl mok --iters 20 \
  --accumulate > $OUT_ALL/trace-accumulate.log 2>&1
echo "trace rc $? $(el)"; grep -E "epilogue|^  (gate/up|down|dgrad|dx|wdown|wgu) |waiting" $OUT_ALL/trace-accumulate.log | head -20
