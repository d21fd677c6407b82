#!/usr/bin/env bash
# DIAGNOSTIC, temporary (delete together with MOKC_FLASH_BWD_DIAG in
# kernels/flash_attention_bwd_sm90.cu): where the wgmma flash attention backward spends its time.
# Runs `mokc bench attn` once per kernel mode of the backward and prints one table (median of the
# bench's --iters each). The exact modes (the default and v1, the previous dQ scheme) run with
# --impl all, so their outputs are also checked against cuBLAS (rel err < 1e-2); the probes remove
# one cost each and leave dq wrong, so they run --impl flash only:
#   default       the backward (dQ by the consumers, sums moved by TMA bulk copies)
#   nodq          no dQ product and no dQ traffic: dK and dV alone (4 of the 5 products)
#   noglobal      dQ products and the shared-memory handoff, no counters, no global sum traffic
#   nochain       as default without waiting on the counters (the kv-block chain)
#   v1            the previous kernel's dQ scheme (partials handed to warps 2-3)
#   v1-nowriter   v1, warps 2-3 only hand the buffer back (no adds, no global traffic)
#   v1-noglobal   v1, the writer's shared-memory passes only (no counters, no global traffic)
#   v1-nochain    v1 without waiting on the counters
# Usage: scripts/flash-bwd-diag.sh [bench attn options, e.g. --seq 8192 --batch 2]
# Needs one H100/H200 and an sm_90a build (make -j all). Exits non-zero if an exact mode fails
# its check or a run fails.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ -x ./mokc ] || { echo "flash-bwd-diag: ./mokc is not built (make -j all)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

field() { sed -n "s/.*\"$1\": \([0-9.eE+-]*\).*/\1/p" <<<"$2"; }

fail=0
rows=()
for mode in default nodq noglobal nochain v1 v1-nowriter v1-noglobal v1-nochain default; do
    env_val=$mode
    [ "$mode" = default ] && env_val=
    impl=flash
    case $mode in default | v1) impl=all ;; esac
    MOKC_FLASH_BWD_DIAG=$env_val ./mokc bench attn --impl "$impl" "$@" > "$tmp/out" 2> "$tmp/err"
    rc=$?
    line=$(grep '"impl": "flash"' "$tmp/out" | head -1)
    check=-
    if [ "$impl" = all ]; then
        check=$(grep -o 'rel err:.*' "$tmp/out" | sed 's/rel err: *//; s/ (tolerance.*//')
        [ -n "$check" ] || check="(no comparison)"
    fi
    if [ -z "$line" ]; then
        fail=1
        why=$(tail -2 "$tmp/err" | tr '\n' ' ')
        rows+=("$(printf '%-12s  %8s  %8s  %8s  exit %d: %s' "$mode" - - - "$rc" "$why")")
        continue
    fi
    [ $rc -eq 0 ] || { fail=1; check="$check (exit $rc)"; }
    rows+=("$(printf '%-12s  %8.3f  %8.3f  %8.1f  %s' "$mode" "$(field fwd_ms "$line")" "$(field bwd_ms "$line")" \
        "$(field bwd_tflops "$line")" "$check")")
done

head -1 "$tmp/out"
printf '%-12s  %8s  %8s  %8s  %s\n' mode "fwd ms" "bwd ms" "TFLOP/s" "check (flash vs cublas: out, dq, dk, dv)"
printf '%s\n' "${rows[@]}"
exit $fail
