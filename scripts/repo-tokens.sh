#!/usr/bin/env bash
# Writes this repository's own text (its sources, docs and scripts, in a fixed order) as byte ids of the
# 151936-token vocabulary of configs/mokc-small.json into OUT.h5: training data for throughput runs on a
# machine that downloads nothing (scripts/gpu-train-small.sh, scripts/bench.sh).
# Usage: scripts/repo-tokens.sh OUT.h5   (needs ./mokc)
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: scripts/repo-tokens.sh OUT.h5" >&2; exit 2; }
out=$(realpath -m "$1") # the caller's path, before the cd
cd "$(dirname "$0")/.."
text=$(mktemp)
trap 'rm -f "$text"' EXIT
find src kernels tests docs scripts -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
     -o -name '*.md' -o -name '*.sh' \) -print0 | sort -z | xargs -0 cat > "$text"
./mokc prepare --text "$text" --vocab 151936 --out "$out" --val-fraction 0 > /dev/null
