#!/usr/bin/env bash
# EP consistency check of the MoE layers on 2 GPUs (run on the 2-GPU machine): for each shape,
# `mokc bench moe --check` runs the unfused layer at EP = 2 (each rank its tokens and half the
# experts, NCCL send/recv between them) and compares y, dx, the aux loss, the top-k picks and every
# gradient with a single-rank run of the same global problem; the megakernel (mok, forward: NCCL
# symmetric windows, one persistent kernel) is compared with the same run (y, top-k, aux loss,
# bitwise run to run; its backward's second run is replayed from a CUDA graph and must give the
# first run's bits). On the small shapes (global forward <= 20 GFLOP) rank 0 also runs the CPU
# reference (float) of the whole problem and holds y of every implementation to it (rel err < 1e-2)
# and the top-k picks equal. Shapes: E=8 with a shared expert, k = 2 and k = 1, skewed (first pick
# on one expert; with k = 1 every token on it, so rank 1 receives no rows), E=128 k=8 (full width
# and narrowed for the CPU), E=384 k=8 sigmoid (narrowed), token counts not multiples of 64 or 128.
# Then the mok watchdog at EP = 2 (rank 1 skips its dispatch: the job must stop with the
# stalled-counter record instead of hanging) and a short timing of both layers (TIMING=0 leaves it
# out: scripts/gpu-check.sh times them itself). Exits non-zero if any check fails.
# Usage: scripts/gpu-moe-ep2-check.sh        (NP=4 for 4 GPUs; the build must have the CUDA backend)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export NCCL_NVLS_ENABLE=0   # never NVLink multicast on shared machines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
np=${NP:-2}
timing=${TIMING:-1}
make -j"$(nproc)" all > /dev/null || { echo "build failed"; exit 1; }

fail=0
check() {
  echo "== mokc bench moe --check $*"
  if ! timeout 600 mpirun -np "$np" ./mokc bench moe --check "$@"; then fail=$((fail + 1)); fi
}
check --config configs/tiny.json --tokens 300                       # E=8 k=2, shared expert, odd tokens
check --config configs/tiny.json --tokens 256 --skew                # every token's first pick on rank 0
check --config configs/tiny.json --tokens 257 --set moe.num_experts_per_tok=1          # k=1
check --config configs/tiny.json --tokens 300 --skew --set moe.num_experts_per_tok=1   # k=1, all on expert 0
check --config configs/bench/qwen3-30b-a3b-like.json --tokens 512   # E=128 k=8, H=2048 (too big for the CPU)
check --config configs/bench/qwen3-30b-a3b-like.json --tokens 333 \
      --set model.hidden_size=512 --set moe.moe_intermediate_size=256   # E=128 k=8, narrowed for the CPU
check --config configs/bench/kimi-k2-like.json --tokens 200 \
      --set model.hidden_size=256 --set moe.moe_intermediate_size=128   # E=384 k=8 sigmoid, scaled down
check --config configs/bench/kimi-k2-like.json --tokens 96 --skew \
      --set model.hidden_size=128 --set moe.moe_intermediate_size=64 --set moe.n_shared_experts=1

check --config configs/bench/qwen3-30b-a3b-like.json --tokens 1000 --skew --impl mok   # mok, skewed, H=2048
echo "== (mok, the simple reference GEMM tile) MOKC_MOK_TILE=simple mokc bench moe --check --impl mok"
for args in "--config configs/tiny.json --tokens 300" "--config configs/bench/qwen3-30b-a3b-like.json --tokens 512"; do
  # shellcheck disable=SC2086
  timeout 600 mpirun -np "$np" -x MOKC_MOK_TILE=simple ./mokc bench moe --check --impl mok $args \
    | grep "mok\|ep check:" || fail=$((fail + 1))
done

echo "== mok watchdog: MOKC_MOK_SKIP_DISPATCH=1 (rank 1 pulls no rows), budget 2 s; must fail fast with the record"
wd_start=$(date +%s)
wd_out=$(timeout 120 mpirun -np "$np" -x MOKC_MOK_SKIP_DISPATCH=1 -x MOKC_MOK_WATCHDOG_S=2 ./mokc bench moe \
         --impl mok --config configs/tiny.json --tokens 256 --iters 1 --warmup 0 2>&1)
wd_rc=$?
wd_secs=$(( $(date +%s) - wd_start ))
echo "$wd_out" | grep -m3 "mok watchdog\|moe_mok" || true
if [ "$wd_rc" -ne 0 ] && [ "$wd_rc" -ne 124 ] && echo "$wd_out" | grep -q "mok watchdog:"; then
  echo "watchdog: ok (exit $wd_rc after ${wd_secs} s)"
else
  echo "watchdog: FAIL (exit $wd_rc after ${wd_secs} s; 124 = hung)"; echo "$wd_out" | tail -20; fail=$((fail + 1))
fi

if [ "$timing" != 0 ]; then
  echo "== timing (short): mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --iters 5 --warmup 2"
  timeout 600 mpirun -np "$np" ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --iters 5 --warmup 2 \
    || fail=$((fail + 1))
  for cb in 16 66 132; do   # the default tile's dispatch blocks; the simple tile is the correctness reference above
    echo "== mok timing: --comm-blocks $cb"
    timeout 600 mpirun -np "$np" ./mokc bench moe --impl mok --comm-blocks "$cb" \
      --config configs/bench/qwen3-30b-a3b-like.json --iters 5 --warmup 2 | grep '^mok ' || fail=$((fail + 1))
  done
fi

if [ "$fail" -eq 0 ]; then echo "gpu-moe-ep2-check: PASS"; else echo "gpu-moe-ep2-check: $fail FAILED"; fi
exit $(( fail > 0 ))
