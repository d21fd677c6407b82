#!/usr/bin/env bash
# EP consistency check of the unfused MoE layer on 2 GPUs (run on the 2-GPU machine): for each
# shape, `mokc bench moe --check` runs the layer at EP = 2 (each rank its tokens and half the
# experts, NCCL send/recv between them) and compares y, dx, the aux loss, the top-k picks and every
# gradient with a single-rank run of the same global problem. Then a short timing of the
# benchmark shape. Exits non-zero if any check fails.
# Usage: scripts/gpu-moe-ep2-check.sh        (NP=4 for 4 GPUs; the build must have the CUDA backend)
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0   # never NVLink multicast on shared machines
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
np=${NP:-2}
make -j"$(nproc)" all > /dev/null || { echo "build failed"; exit 1; }

fail=0
check() {
  echo "== mokc bench moe --check $*"
  if ! timeout 600 mpirun -np "$np" ./mokc bench moe --check "$@"; then fail=$((fail + 1)); fi
}
check --config configs/tiny.json --tokens 300                       # E=8 k=2, shared expert, odd tokens
check --config configs/tiny.json --tokens 256 --skew                # every token's first pick on rank 0
check --config configs/bench/qwen3-30b-a3b-like.json --tokens 512   # E=128 k=8, H=2048
check --config configs/bench/kimi-k2-like.json --tokens 200 \
      --set model.hidden_size=256 --set moe.moe_intermediate_size=128   # E=384 k=8 sigmoid, scaled down
check --config configs/bench/kimi-k2-like.json --tokens 96 --skew \
      --set model.hidden_size=128 --set moe.moe_intermediate_size=64 --set moe.n_shared_experts=1

echo "== timing (short): mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --iters 5 --warmup 2"
timeout 600 mpirun -np "$np" ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json --iters 5 --warmup 2 \
  || fail=$((fail + 1))

if [ "$fail" -eq 0 ]; then echo "gpu-moe-ep2-check: PASS"; else echo "gpu-moe-ep2-check: $fail FAILED"; fi
exit $(( fail > 0 ))
