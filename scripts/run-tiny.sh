#!/usr/bin/env bash
# `make run`: train configs/tiny.json on the Devil's Dictionary (prepared by scripts/fetch-data.sh)
# and print the final train and validation loss. Extra arguments go to `mokc train`.
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${MOKC_SPEC:-configs/tiny.json}
echo "== ./mokc train $spec $*"
start=$(date +%s)
./mokc train "$spec" "$@"
echo "== done in $(( $(date +%s) - start )) s"
