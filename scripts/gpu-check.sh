#!/usr/bin/env bash
# The GPU check (run on a machine with NVIDIA GPUs): build with the CUDA backend, run every test
# (the GPU suites run instead of skipping; multi-GPU tests need 2 GPUs). With 2 GPUs or more, also:
# the EP2 check of the MoE layers (scripts/gpu-moe-ep2-check.sh without its timing section), the
# rank-to-GPU mapping check (scripts/gpu-mapping-check.sh), the megakernel's fallback without
# NVLink peers (scripts/gpu-lsa-fallback-check.sh), the MoE layer benchmark (mok and unfused in
# one run, then mok adding into the gradients, `--accumulate`: row mok+acc) on the Qwen3-30B-A3B-
# and Kimi-K2-like shapes (configs/bench/), and 10 training steps of configs/mokc-small.json at
# seq_len 8192 (scripts/gpu-train-small.sh). With 1 GPU or more:
# the megakernel's GEMM tile against cuBLAS (`mokc bench gemm`: 8192^3 and 64 x 1024x1536x2048)
# and the attention benchmark (flash and cuBLAS side by side at B=4 T=4096 Hq=16 Hkv=4 D=128; it
# fails when they disagree). Logs and the benchmarks' JSON lines (bench-<shape>.jsonl,
# bench-gemm.jsonl, bench-attn.jsonl) go to $OUT (or ./gpu-check-out); the summary table comes
# last. Exits non-zero if the build, the tests, one of the checks or a benchmark fails.
# About 7 minutes on 2×H200 after a warm build in s17; more tests since: with a fresh build the whole check may pass
# a 10-minute slot, so PARTS (default "tests extras") runs one part: PARTS=tests (build, every test) and
# PARTS=extras (build, the checks and benchmarks above).
# Usage: scripts/gpu-check.sh [test-filter]    e.g. scripts/gpu-check.sh gpu_   (a filter: tests only)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-gpu-check-out}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0             # never NVLink multicast: it can take a shared host's GPUs down
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
filter=${1:-}
parts=${PARTS:-tests extras}
for p in $parts; do
  case $p in tests|extras) ;; *) echo "gpu-check: PARTS='$parts': its parts are tests and extras"; exit 2;; esac
done
has_part() { case " $parts " in *" $1 "*) return 0;; esac; return 1; }
has_part tests || has_part extras || { echo "gpu-check: PARTS is empty: name tests, extras or both"; exit 2; }
if [ -n "$filter" ] && ! has_part tests; then
  echo "gpu-check: a test filter ('$filter') runs tests only, and PARTS='$parts' has none"; exit 2
fi
since() { echo $(( $(date +%s) - $1 )); }

nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | tee "$out/gpus.txt"
ngpu=$(wc -l < "$out/gpus.txt")

start=$(date +%s)
if ! make -j"$(nproc)" all build/mokc_tests > "$out/build.log" 2>&1; then
  tail -40 "$out/build.log"; echo "BUILD FAILED"; exit 1
fi
grep -E "warning|✓|✗|CUDA backend" "$out/build.log" | head -20
build_s=$(since "$start")

tests_rc=skipped tests_s=0
if has_part tests; then
  start=$(date +%s)
  MOKC_BIN=build/mokc build/mokc_tests ${filter:+"$filter"} > "$out/tests.log" 2>&1
  tests_rc=$?
  tests_s=$(since "$start")
  grep -E "^(FAIL|skip)|FAIL " "$out/tests.log" | head -60
fi

ep2_rc=skipped ep2_s=0 bench_rc=skipped bench_s=0 map_rc=skipped map_s=0 lsa_rc=skipped lsa_s=0
small_rc=skipped small_s=0
attn_rc=skipped attn_s=0 gemm_rc=skipped gemm_s=0
# One single-GPU benchmark: bench-NAME.log and .jsonl in $out, NAME_rc and NAME_s set.
run_bench() {
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  timeout "$limit" "$@" > "$out/bench-$name.log" 2>&1
  rc=$?
  printf -v "${name}_rc" %s "$rc"
  printf -v "${name}_s" %s "$(since "$start")"
  [ "$rc" -eq 0 ] || { echo "bench $name FAILED:"; tail -15 "$out/bench-$name.log"; }
  grep '^{' "$out/bench-$name.log" > "$out/bench-$name.jsonl"
}
if [ -z "$filter" ] && has_part extras && [ "$ngpu" -ge 1 ]; then
  # the megakernel's GEMM tile exists for Hopper (compute capability 9.0) only
  if [ "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0)" = 9.0 ]; then
    run_bench gemm 300 ./mokc bench gemm
  fi
  run_bench attn 600 ./mokc bench attn
fi
shapes="qwen3-30b-a3b-like kimi-k2-like"
if [ -z "$filter" ] && has_part extras && [ "$ngpu" -ge 2 ]; then
  start=$(date +%s)
  TIMING=0 scripts/gpu-moe-ep2-check.sh > "$out/ep2-check.log" 2>&1
  ep2_rc=$?
  ep2_s=$(since "$start")
  grep -E "FAIL|^gpu-moe-ep2-check:" "$out/ep2-check.log" | head -30

  start=$(date +%s)
  scripts/gpu-mapping-check.sh > "$out/mapping-check.log" 2>&1
  map_rc=$?
  map_s=$(since "$start")
  grep -E "FAIL" "$out/mapping-check.log" | head -10

  start=$(date +%s)
  scripts/gpu-lsa-fallback-check.sh > "$out/lsa-fallback-check.log" 2>&1
  lsa_rc=$?
  lsa_s=$(since "$start")
  grep -E "FAIL" "$out/lsa-fallback-check.log" | head -10

  start=$(date +%s)
  bench_rc=0
  for shape in $shapes; do
    : > "$out/bench-$shape.jsonl"
    # mok and unfused; then the megakernel's backward that adds into the gradients (a step's later micro-batches)
    for run in "" "--impl mok --accumulate"; do
      log="$out/bench-$shape${run:+-accumulate}.log"
      # shellcheck disable=SC2086 # $run: the run's options, word-split on purpose
      if ! timeout 600 mpirun -np 2 ./mokc bench moe --config "configs/bench/$shape.json" $run > "$log" 2>&1; then
        bench_rc=1; echo "bench $shape $run FAILED:"; tail -15 "$log"
      fi
      grep '^{' "$log" >> "$out/bench-$shape.jsonl"
    done
  done
  bench_s=$(since "$start")

  start=$(date +%s)
  scripts/gpu-train-small.sh 8192 10 > "$out/train-small.out" 2>&1
  small_rc=$?
  small_s=$(since "$start")
  [ "$small_rc" -eq 0 ] || { echo "train small FAILED:"; tail -15 "$out/train-small.out"; }
fi

echo
echo "== gpu-check summary: $ngpu GPU(s), logs in $out"
printf "%-16s %-11s %6s  %s\n" step result time note
printf "%-16s %-11s %5ss  %s\n" build ok "$build_s" ""
printf "%-16s %-11s %5ss  %s\n" tests "rc=$tests_rc" "$tests_s" "$( [ "$tests_rc" != skipped ] && tail -1 "$out/tests.log")"
printf "%-16s %-11s %5ss  %s\n" "moe ep2 check" "rc=$ep2_rc" "$ep2_s" \
  "$( [ -f "$out/ep2-check.log" ] && [ "$ep2_rc" != skipped ] && tail -1 "$out/ep2-check.log")"
printf "%-16s %-11s %5ss  %s\n" "gpu mapping" "rc=$map_rc" "$map_s" \
  "$( [ "$map_rc" != skipped ] && tail -1 "$out/mapping-check.log")"
printf "%-16s %-11s %5ss  %s\n" "mok fallback" "rc=$lsa_rc" "$lsa_s" \
  "$( [ "$lsa_rc" != skipped ] && tail -1 "$out/lsa-fallback-check.log")"
printf "%-16s %-11s %5ss  %s\n" "bench moe" "rc=$bench_rc" "$bench_s" \
  "$([ "$bench_rc" = skipped ] && echo "needs 2 GPUs, no test filter, PARTS with extras")"
printf "%-16s %-11s %5ss  %s\n" "train small" "rc=$small_rc" "$small_s" \
  "$( [ "$small_rc" != skipped ] && tail -1 "$out/train-small.out")"
printf "%-16s %-11s %5ss  %s\n" "bench gemm" "rc=$gemm_rc" "$gemm_s" \
  "$([ "$gemm_rc" = skipped ] && echo "needs a Hopper GPU, no test filter, PARTS with extras")"
printf "%-16s %-11s %5ss  %s\n" "bench attn" "rc=$attn_rc" "$attn_s" \
  "$([ "$attn_rc" = skipped ] && echo "needs a GPU, no test filter, PARTS with extras" || grep '^flash vs cublas' "$out/bench-attn.log")"
if [ "$bench_rc" != skipped ]; then
  echo
  printf "%-20s %-8s %9s %11s %12s %18s %15s\n" shape impl "fwd ms" "fwd+bwd ms" "fwd TFLOP/s" "dispatch GB/s/GPU" \
    "graph fwd, f+b"
  for shape in $shapes; do grep '"bench": "moe",' "$out/bench-$shape.jsonl"; done | awk '
    function f(k,   v) {
      if (!match($0, "\"" k "\": [^,}]*")) return "-"
      v = substr($0, RSTART + length(k) + 4, RLENGTH - length(k) - 4); gsub(/"/, "", v)
      return v == "null" ? "-" : v
    }
    { printf "%-20s %-8s %9s %11s %12s %18s %15s\n", f("shape"), f("impl") (f("accumulate") == 1 ? "+acc" : ""),
             f("fwd_ms"), f("fwdbwd_ms"), f("fwd_tflops"), f("dispatch_gbs_per_gpu"),
             f("fwd_graph_ms") ", " f("fwdbwd_graph_ms") }'
fi

if [ "$gemm_rc" != skipped ]; then
  echo
  grep '^{' "$out/bench-gemm.log"
fi
if [ "$attn_rc" != skipped ]; then
  echo
  sed -n '/^impl /,/^$/p' "$out/bench-attn.log"
  grep -E '"impl": "rope"|^q, k projection' "$out/bench-attn.log"
fi

rc=0 ran=0
for r in "$tests_rc" "$ep2_rc" "$map_rc" "$lsa_rc" "$bench_rc" "$small_rc" "$gemm_rc" "$attn_rc"; do
  [ "$r" = skipped ] && continue
  ran=1; [ "$r" -eq 0 ] || rc=1
done
[ "$ran" -eq 1 ] || { echo "gpu-check: nothing was checked (no GPU visible?)"; rc=1; }
exit "$rc"
