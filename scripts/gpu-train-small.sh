#!/usr/bin/env bash
# Trains configs/mokc-small.json (EP2: 16 layers, 10 G parameters) for a few steps on 2 GPUs at a
# long sequence: issue 10's "seq_len 8192 trains on 2×H200" check and a first throughput reading.
# The data is this repository's own text (sources and docs) as byte ids in the model's 151936
# vocabulary (mokc prepare --text --vocab), so nothing is downloaded. Prints the step lines, the
# peak GPU memory, and a PASS/FAIL line; exits non-zero when the run fails or no step finished.
# Usage: scripts/gpu-train-small.sh [SEQ_LEN (8192)] [STEPS (10)]    logs in $OUT (./gpu-check-out)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-gpu-check-out}
mkdir -p "$out"
seq=${1:-8192}
steps=${2:-10}
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x ./mokc ] || { echo "gpu-train-small: ./mokc is not built (make -j all)"; exit 1; }

data=$out/repo-text-v151936.h5
[ -f "$data" ] || scripts/repo-tokens.sh "$data" || exit 1

log=$out/train-small-$seq.log
( while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 1; done ) > "$out/train-small-mem.txt" &
mon=$!
start=$(date +%s)
# one sequence a GPU a step: at 8192 tokens the config's two sequences would not fit
timeout 900 mpirun -np 2 ./mokc train configs/mokc-small.json --set train.seq_len="$seq" \
  --set train.micro_batch=1 --set train.grad_accum=1 --set train.steps="$steps" --set train.warmup_steps=1 --set data.train="$data" --set data.val= \
  --set log.metrics_path="$out/train-small-$seq.jsonl" > "$log" 2>&1
rc=$?
kill "$mon" 2> /dev/null
grep -E "^GPU memory plan|^step " "$log"
done_steps=$(grep -c "^step " "$log")
peak=$(sort -n "$out/train-small-mem.txt" | tail -1)
if [ "$rc" -eq 0 ] && [ "$done_steps" -ge 1 ]; then
  echo "gpu-train-small: PASS: seq_len $seq, $done_steps steps in $(( $(date +%s) - start )) s, peak GPU memory ${peak} MiB"
  exit 0
fi
tail -15 "$log"
echo "gpu-train-small: FAIL (rc $rc, $done_steps steps; log $log)"
exit 1
