#!/usr/bin/env bash
# Gets a training corpus and turns it into token files with `mokc prepare`.
#
#   scripts/fetch-data.sh             the Devil's Dictionary (Ambrose Bierce, public domain, ~380 KB)
#                                     from Debian's dict-devil package -> data/devil.h5, data/devil-val.h5
#   scripts/fetch-data.sh TEXT_FILE   any text file -> data/<name>.h5, data/<name>-val.h5
#
# The package comes from the installed /usr/share/dictd/devil.dict.dz when present, else from
# `apt-get download` (no root needed) unpacked with `dpkg -x`; the .dz file is gzip. Steps whose
# outputs exist and are newer than their inputs are skipped, so running it twice is cheap.
# MOKC=path overrides the mokc binary (default ./mokc, built by `make`); DEVIL_DZ=path the
# installed dictionary file looked for first (a missing path forces the download).
set -euo pipefail

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }
say() { echo "fetch-data: $*"; }
die() { echo "fetch-data: error: $*" >&2; exit 1; }

case "${1:-}" in
    -h|--help) usage; exit 0 ;;
esac
[ $# -le 1 ] || die "too many arguments; usage: scripts/fetch-data.sh [TEXT_FILE]"

# Resolve the user's file before moving to the repository root.
user_text=""
if [ $# -eq 1 ]; then
    [ -e "$1" ] || die "text file '$1' does not exist"
    [ -f "$1" ] || die "'$1' is not a regular file"
    [ -r "$1" ] || die "cannot read '$1' (permissions)"
    [ -s "$1" ] || die "text file '$1' is empty"
    user_text=$(realpath "$1")
fi

cd "$(dirname "${BASH_SOURCE[0]}")/.."
MOKC=${MOKC:-./mokc}
mkdir -p data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -n "$user_text" ]; then
    text=$user_text
    name=$(basename "$text")
    [ "${name%.*}" != "" ] && name=${name%.*}
    out="data/$name.h5"
    val="data/$name-val.h5"
else
    text=data/devils-dictionary.txt
    out=data/devil.h5
    val=data/devil-val.h5
    if [ -s "$text" ]; then
        say "have $text"
    else
        dz=${DEVIL_DZ:-/usr/share/dictd/devil.dict.dz}
        if [ -r "$dz" ]; then
            say "using the installed $dz"
        else
            command -v apt-get >/dev/null && command -v dpkg >/dev/null ||
                die "apt-get/dpkg not found; put any text file somewhere and run: scripts/fetch-data.sh FILE"
            say "downloading Debian package dict-devil (apt-get download, no root needed)"
            (cd "$tmp" && apt-get download dict-devil) ||
                die "'apt-get download dict-devil' failed: no network, or the package lists are stale (run 'sudo apt-get update'); or give any text file: scripts/fetch-data.sh FILE"
            deb=$(ls "$tmp"/dict-devil_*.deb 2>/dev/null | head -n 1)
            [ -n "$deb" ] || die "apt-get download left no dict-devil_*.deb in $tmp"
            dpkg -x "$deb" "$tmp/pkg"
            dz="$tmp/pkg/usr/share/dictd/devil.dict.dz"
            [ -r "$dz" ] || die "$deb does not contain usr/share/dictd/devil.dict.dz"
        fi
        # Write to a temporary name first so that an interrupted run leaves no half-written text.
        gzip -dc "$dz" > "$tmp/devil.txt" || die "cannot decompress $dz (a .dz file is gzip)"
        [ -s "$tmp/devil.txt" ] || die "$dz decompressed to nothing"
        mv "$tmp/devil.txt" "$text"
        say "wrote $text ($(wc -c < "$text") bytes)"
    fi
fi

if [ "$out" -nt "$text" ] && [ "$val" -nt "$text" ]; then
    say "up to date: $out and $val (delete them to prepare again)"
    exit 0
fi
[ -x "$MOKC" ] || die "$MOKC not found or not executable; build it first with 'make' (or set MOKC=path)"
"$MOKC" prepare --text "$text" --out "$out" --val-out "$val" --val-fraction 0.05
