#!/usr/bin/env bash
# The megakernel's peer check on 2 GPUs (issue 12). mok needs every EP rank to load and store into
# every other's memory: one NCCL LSA team whose GPUs map each other's memory (NCCL symmetric
# memory). This script takes that away through NCCL's environment and checks that mokc says so
# ("mok unavailable: <why>") and then falls back to the unfused NCCL layer where the run allows it,
# or stops where the run demands mok, never hangs and never runs the megakernel anyway.
#
# Which NCCL setting removes the peers: NCCL >= 2.28.4 no longer ties LSA to NCCL_P2P_DISABLE /
# NCCL_P2P_LEVEL (those only turn off NCCL's own P2P transport; symmetric memory follows raw CUDA
# peer access), so NCCL_P2P_DISABLE=1 alone may leave mok running. Symmetric memory needs CUDA's
# virtual memory management, so NCCL_CUMEM_ENABLE=0 removes it on any 2.28.x: the cases below use
# both; a last, informational case reports what NCCL_P2P_DISABLE=1 alone does with this NCCL.
#
# Cases (EP = 2, configs/tiny.json and a corpus made from LICENSE):
#   1. bench moe --impl mok   (demands mok)  -> exit != 0, "mok unavailable:", no hang
#   2. bench moe --impl all   (prefers mok)  -> exit 0, "mok unavailable:", the unfused result line
#   3. train, moe_impl "auto" (prefers mok)  -> exit 0, "mok unavailable:", every step's loss logged
#   4. train, moe_impl "mok"  (demands mok)  -> exit != 0, "mok unavailable:"
#   5. control, no NCCL setting: bench moe --impl mok runs and does not say "mok unavailable"
#   6. info: NCCL_P2P_DISABLE=1 alone, bench moe --impl all: exit 0, reports which layer ran
# Exits non-zero if a case fails. Usage: scripts/gpu-lsa-fallback-check.sh  (2 GPUs, CUDA build)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0   # never NVLink multicast on shared machines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NOLSA=(-x NCCL_P2P_DISABLE=1 -x NCCL_CUMEM_ENABLE=0)

ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$ngpu" -lt 2 ]; then echo "gpu-lsa-fallback-check: SKIPPED (needs 2 GPUs, found $ngpu)"; exit 0; fi
make -j"$(nproc)" all > /dev/null || { echo "build failed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
./mokc prepare --text LICENSE --out "$tmp/corpus.h5" --val-fraction 0.1 > /dev/null \
  || { echo "prepare failed"; exit 1; }

fail=0
out="$tmp/out.log"
bench=(./mokc bench moe --config configs/tiny.json --tokens 256 --iters 2 --warmup 1)
train=(./mokc train configs/tiny.json --set backend=cuda --set parallel.ep=2 --set train.steps=3
       --set train.warmup_steps=1 --set train.micro_batch=4 --set log.every=1
       --set data.train="$tmp/corpus.h5" --set data.val="$tmp/corpus-val.h5" --set data.val_every=100)

# run NAME [mpirun options] -- command...: runs it on 2 ranks under a timeout, output in $out.
run() {
  local name=$1; shift
  local opts=()
  while [ "$1" != "--" ]; do opts+=("$1"); shift; done
  shift
  echo "== $name"
  timeout 300 mpirun -np 2 "${opts[@]}" "$@" > "$out" 2>&1
  rc=$?
}
says() { grep -q "$1" "$out"; }
verdict() {   # verdict OK-CONDITION-TEXT (the caller evaluated it into $ok)
  if [ "$ok" = 1 ]; then echo "   ok: $1 (exit $rc)"; else
    echo "   FAIL: expected $1, got exit $rc (124 = hung)"; tail -15 "$out"; fail=$((fail + 1)); fi
}

run "1. no LSA peers, bench moe --impl mok (demands mok)" "${NOLSA[@]}" -- "${bench[@]}" --impl mok
grep -m2 "mok unavailable" "$out"
ok=0; [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && says "mok unavailable:" && ok=1
verdict "a stop that names why"

run "2. no LSA peers, bench moe --impl all (falls back)" "${NOLSA[@]}" -- "${bench[@]}" --impl all
grep -m2 "mok unavailable" "$out"
ok=0; [ "$rc" -eq 0 ] && says "mok unavailable:" && says '"impl": "unfused"' && ! says '"impl": "mok"' && ok=1
verdict "the unfused result only, and why mok did not run"

run "3. no LSA peers, train with moe_impl \"auto\" (falls back)" "${NOLSA[@]}" -- "${train[@]}" \
    --set moe_impl=auto --set log.metrics_path="$tmp/fallback.jsonl"
grep -m2 "mok unavailable" "$out"
steps=$(grep -c '"loss"' "$tmp/fallback.jsonl" 2>/dev/null)
ok=0; [ "$rc" -eq 0 ] && says "mok unavailable:" && [ "${steps:-0}" -eq 3 ] && ok=1
verdict "3 steps on the unfused layer, and why mok did not run"

run "4. no LSA peers, train with moe_impl \"mok\" (demands mok)" "${NOLSA[@]}" -- "${train[@]}" \
    --set moe_impl=mok --set log.metrics_path="$tmp/demand.jsonl"
grep -m2 "mok unavailable" "$out"
ok=0; [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && says "mok unavailable:" && ok=1
verdict "a stop that names why"

run "5. control: peers reachable, bench moe --impl mok" -- "${bench[@]}" --impl mok
ok=0; [ "$rc" -eq 0 ] && ! says "mok unavailable" && says '"impl": "mok"' && ok=1
verdict "mok runs"

run "6. info: NCCL_P2P_DISABLE=1 alone, bench moe --impl all" -x NCCL_P2P_DISABLE=1 -- "${bench[@]}" --impl all
ok=0; [ "$rc" -eq 0 ] && ok=1
verdict "a result"
if says '"impl": "mok"'; then echo "   (this NCCL keeps LSA peers with its P2P transport off: mok ran)"
else grep -m1 "mok unavailable" "$out"; fi

if [ "$fail" -eq 0 ]; then echo "gpu-lsa-fallback-check: PASS"; else echo "gpu-lsa-fallback-check: $fail FAILED"; fi
exit $(( fail > 0 ))
