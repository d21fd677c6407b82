#!/usr/bin/env bash
# Rank-to-GPU mapping check on 2 GPUs (issue 12). mokc gives local rank r the device r % (visible
# GPUs), which must work both ways a cluster starts ranks:
#   1. one GPU visible per rank, as `srun --gpus-per-task=1` does: simulated here by a wrapper that
#      sets CUDA_VISIBLE_DEVICES to the rank's own GPU, so every rank takes its device 0;
#   2. all GPUs visible to every rank (plain mpirun): rank r takes device r.
# Both runs must put the two ranks on two different physical GPUs (each rank prints its device and
# UUID with MOKC_SHOW_GPU=1; the UUIDs must differ and be this machine's), train (EP = 2, 3 steps of
# configs/tiny.json on a corpus made from LICENSE) and give the same losses bit for bit (same GPUs,
# same work). Then a broken mapping, both ranks bound to the first GPU, must stop with the clear
# "would share one GPU" message rather than hang or run.
# Exits non-zero if a case fails. Usage: scripts/gpu-mapping-check.sh  (2 GPUs, CUDA build)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0   # never NVLink multicast on shared machines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# The GPUs this job may use, as CUDA_VISIBLE_DEVICES names them: the inherited list, else all.
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then gpus=$CUDA_VISIBLE_DEVICES
else gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | paste -sd, -); fi
ngpu=$(awk -F, '{print NF}' <<< "$gpus")
if [ "${ngpu:-0}" -lt 2 ]; then echo "gpu-mapping-check: SKIPPED (needs 2 GPUs, found ${ngpu:-0})"; exit 0; fi
make -j"$(nproc)" all > /dev/null || { echo "build failed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
./mokc prepare --text LICENSE --out "$tmp/corpus.h5" > /dev/null || { echo "prepare failed"; exit 1; }
nvidia-smi --query-gpu=uuid --format=csv,noheader > "$tmp/uuids.txt"

# The per-rank binding: MAPPING=own gives local rank r the r-th GPU of the list (what Slurm's
# --gpus-per-task=1 does), MAPPING=first gives every rank the first one (a broken binding).
cat > "$tmp/bind" <<'EOF'
#!/usr/bin/env bash
IFS=, read -ra list <<< "$MAPPING_GPUS"
r=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-0}}
if [ "$MAPPING" = own ]; then export CUDA_VISIBLE_DEVICES=${list[$r]}; else export CUDA_VISIBLE_DEVICES=${list[0]}; fi
exec "$@"
EOF
chmod +x "$tmp/bind"

fail=0
out="$tmp/out.log"
train=(./mokc train configs/tiny.json --set backend=cuda --set parallel.ep=2 --set train.steps=3
       --set train.warmup_steps=1 --set train.micro_batch=4 --set log.every=1
       --set data.train="$tmp/corpus.h5" --set data.val="" --set data.val_every=0)

# run NAME METRICS [launcher...]: trains on 2 ranks under a timeout; output in $out.
run() {
  local name=$1 metrics=$2; shift 2
  echo "== $name"
  timeout 300 mpirun -np 2 -x MOKC_SHOW_GPU=1 -x MAPPING_GPUS="$gpus" "$@" "${train[@]}" \
    --set log.metrics_path="$metrics" > "$out" 2>&1
  rc=$?
}
# The two ranks' GPUs: two distinct UUIDs, both listed by nvidia-smi.
placed_apart() {
  grep "gpu: device" "$out"
  local uuids
  uuids=$(grep -o "UUID GPU-[0-9a-f-]*" "$out" | cut -d' ' -f2 | sort -u)
  [ "$(wc -l <<< "$uuids")" -eq 2 ] || return 1
  while read -r u; do grep -qx "$u" "$tmp/uuids.txt" || return 1; done <<< "$uuids"
}
losses() { grep -o '"loss": [^,]*' "$1" 2>/dev/null; }
check() {   # check TEXT: the caller left the verdict in $ok
  if [ "$ok" = 1 ]; then echo "   ok: $1"; else
    echo "   FAIL: expected $1 (exit $rc; 124 = hung)"; tail -15 "$out"; fail=$((fail + 1)); fi
}

run "1. one GPU visible per rank (as srun --gpus-per-task=1)" "$tmp/own.jsonl" -x MAPPING=own "$tmp/bind"
ok=0; [ "$rc" -eq 0 ] && grep -q "gpu: device 0 of 1 visible" "$out" && placed_apart && ok=1
check "each rank on device 0 of its 1 visible GPU, two different GPUs, training runs"

run "2. all GPUs visible to every rank" "$tmp/all.jsonl"
ok=0; [ "$rc" -eq 0 ] && grep -q "gpu: device 1 of $ngpu visible" "$out" && placed_apart && ok=1
check "ranks on devices 0 and 1, two different GPUs, training runs"

echo "== 1 and 2 give the same losses"
own=$(losses "$tmp/own.jsonl")
ok=0; [ "$(wc -l <<< "$own")" -eq 3 ] && [ "$own" = "$(losses "$tmp/all.jsonl")" ] && ok=1
check "3 identical losses"

run "3. broken binding: both ranks on the first GPU" "$tmp/broken.jsonl" -x MAPPING=first "$tmp/bind"
grep -m1 "share one GPU" "$out"
ok=0; [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "would share one GPU" "$out" && ok=1
check "a stop that says two ranks would share one GPU"

if [ "$fail" -eq 0 ]; then echo "gpu-mapping-check: PASS"; else echo "gpu-mapping-check: $fail FAILED"; fi
exit $(( fail > 0 ))
