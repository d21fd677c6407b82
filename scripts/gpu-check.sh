#!/usr/bin/env bash
# The GPU check (run on a machine with NVIDIA GPUs): build with the CUDA backend, run every test
# (the GPU suites run instead of skipping; multi-GPU tests need 2 GPUs), then benchmark the MoE
# layer. Logs go to $OUT (or ./gpu-check-out); the summary table comes last.
# Usage: scripts/gpu-check.sh [test-filter]    e.g. scripts/gpu-check.sh gpu_
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-check-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0             # never NVLink multicast: it can take a shared host's GPUs down
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
filter=${1:-}

nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | tee "$out/gpus.txt"
ngpu=$(wc -l < "$out/gpus.txt")

start=$(date +%s)
if ! make -j"$(nproc)" all build/mokc_tests > "$out/build.log" 2>&1; then
  tail -40 "$out/build.log"; echo "BUILD FAILED"; exit 1
fi
grep -E "warning|✓|✗|CUDA backend" "$out/build.log" | head -20
build_s=$(( $(date +%s) - start ))

start=$(date +%s)
MOKC_BIN=build/mokc build/mokc_tests $filter > "$out/tests.log" 2>&1
tests_rc=$?
tests_s=$(( $(date +%s) - start ))
grep -E "^(FAIL|skip)|FAIL " "$out/tests.log" | head -60

bench_rc=skipped
if [ -z "$filter" ] && [ "$ngpu" -ge 2 ] && ./mokc help bench >/dev/null 2>&1; then
  mpirun -np 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json > "$out/bench.log" 2>&1
  bench_rc=$?
  tail -8 "$out/bench.log"
fi

echo "== gpu-check: $ngpu GPU(s); build ${build_s}s; tests ${tests_s}s rc=$tests_rc; bench rc=$bench_rc"
tail -1 "$out/tests.log"
exit $tests_rc
