#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages mokc builds against, if any is missing (`make deps`).
# As root it runs apt-get; otherwise it prints the exact command to run.
set -euo pipefail

declare -A pkg_of=(
  [libcjson]=libcjson-dev
  [hdf5-serial]=libhdf5-dev
  [ompi-c]=libopenmpi-dev
)
missing=()
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
for pc in "${!pkg_of[@]}"; do
  if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists "$pc" 2>/dev/null; then
    missing+=("${pkg_of[$pc]}")
  fi
done
command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
command -v make >/dev/null 2>&1 || missing+=(make)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "mokc: missing packages: ${missing[*]}" >&2
  echo "---> HINT: run: sudo apt-get update && sudo $cmd" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
$cmd >/dev/null
echo "installed: ${missing[*]}"
