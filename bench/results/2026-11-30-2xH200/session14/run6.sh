# s14 r6: the full scripts/gpu-check.sh at ba08c66 (the parallel schedule, the graph test on a blocking stream, the
# graph timings alternating with the eager calls, pad_share), then two more bench runs a shape.
# Predicted: all pass; pad_share ~0.12 (Kimi-like: ~170 rows an expert computed as 192) and ~0.03 (Qwen-like).
for f in .deps/*.deb; do dpkg -x $f /; done; ldconfig
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
OUT_FILES=$OUT
(export OUT=/tmp/gc; timeout 480 bash scripts/gpu-check.sh > /tmp/gc.log 2>&1; echo "gpu-check rc=$?")
sed -n '/== gpu-check summary/,$p' /tmp/gc.log | grep -v '^/usr/local/cuda/bin/nvcc' | head -40
grep -E 'passed, .* failed' /tmp/gc.log | tail -3; grep -E '^(FAIL|fail)' /tmp/gc.log | head; cp /tmp/gc.log $OUT_FILES/gpu-check.log
for f in /tmp/gc/*.jsonl; do cp $f $OUT_FILES/; done; echo "check $(el)"
for rep in 2 3; do for sh in qwen3-30b-a3b-like kimi-k2-like; do
  timeout 120 mpirun -np 2 ./mokc bench moe --config configs/bench/$sh.json --impl mok > /tmp/b.log 2>&1 || { echo "bench $sh failed"; tail -5 /tmp/b.log; }
  grep '^{' /tmp/b.log | sed "s|^{|{\"rep\": $rep, |" >> $OUT_FILES/bench-reps.jsonl
  echo "$sh r$rep: $(grep '"bench": "moe"' /tmp/b.log | grep -o '"fw[^,]*_ms[^,]*\|"pad_share[^,]*' | tr '\n' ' ') $(el)"
done; done
echo "total $(el)"
