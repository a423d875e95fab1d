#!/usr/bin/env bash
# compare-c.sh: the C merger example (bindings/c/examples/merge.c, built against the
# installed libaccio with pkg-config) beside `accio bench merge` with the same shape, in
# one run, interleaved repetition by repetition (which one goes first alternates):
#
#   C        merge --producers P --blocks F --size S DIR/file   (P pthreads, one
#            accio_producer each, accio_producer_write F times, accio_merger_close)
#   Rust     accio bench merge DIR --backend shm --placement threads --producers P
#            --buffers F --sizes S --no-naive --no-sync --repetitions 1
#
# Both: an shm merger with the default 256 MiB budget and S-byte slots, producers that
# connect and get their first slots untimed, start together at a barrier, and a clock
# stopped when the merger's close returned; nothing is fsynced. Before each tool's turn a
# run's worth of data is written to /dev/shm and removed, untimed (MACHINE_NOTES trait 2:
# first touch of freed memory is slow on this VM), as in compare-merge.sh.
# Every figure is the median and min–max over REPS runs; the ratio is C / Rust of the
# medians, and the target is >= 0.9.
#
# Usage: scripts/compare-c.sh [--reps N] [--producers P] [--buffers F] [--size S] [--dir DIR]
#   --reps N        repetitions (default 5)
#   --producers P   producer threads (default 60, the seed's worker count)
#   --buffers F     blocks per producer (default 8: 60 x 8 x 2 MiB = 960 MiB per run;
#                   100 is the seed's 12 GiB run and needs that much free in DIR)
#   --size S        block size (default 2M)
#   --dir DIR       where the merged file goes (default /dev/shm)
# Needs cc and pkg-config; builds and installs libaccio into a temporary prefix first.

set -euo pipefail

REPS=5
P=60
F=8
SIZE=2M
DIR=/dev/shm
while [ $# -gt 0 ]; do
    case "$1" in
        --reps) REPS="$2"; shift 2 ;;
        --producers) P="$2"; shift 2 ;;
        --buffers) F="$2"; shift 2 ;;
        --size) SIZE="$2"; shift 2 ;;
        --dir) DIR="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "compare-c: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
done
for v in "$REPS" "$P" "$F"; do
    case "$v" in ''|*[!0-9]*) echo "compare-c: --reps, --producers and --buffers need numbers" >&2; exit 2 ;; esac
done
case "$SIZE" in [0-9]*[KkMm]|[0-9]*) ;; *) echo "compare-c: --size takes bytes with an optional K or M suffix" >&2; exit 2 ;; esac
for t in cc pkg-config; do
    command -v "$t" >/dev/null || { echo "compare-c: $t not found (apt-get install gcc pkg-config)" >&2; exit 2; }
done
[ -d "$DIR" ] || { echo "compare-c: $DIR is not a directory" >&2; exit 2; }

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/accio-compare-c-XXXXXX")"
SHM="/dev/shm/accio-compare-c.$$"
cleanup() { rm -rf "$WORK" "$SHM" "$DIR/accio-compare-c.$$.accio"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$SHM"

bash "$ROOT/bindings/c/install.sh" --prefix "$WORK/prefix" >&2
(cd "$ROOT" && cargo build --release -p accio-cli >&2)
ACCIO="$ROOT/target/release/accio"
export PKG_CONFIG_PATH="$WORK/prefix/lib/pkgconfig"
cc -O2 -std=c11 -D_GNU_SOURCE "$ROOT/bindings/c/examples/merge.c" \
    $(pkg-config --cflags --libs accio) -lpthread -o "$WORK/merge"

bytes_of() { case "$1" in *[Kk]) echo $(( ${1%?} << 10 )) ;; *[Mm]) echo $(( ${1%?} << 20 )) ;; *) echo "$1" ;; esac; }
BYTES=$((P * F * $(bytes_of "$SIZE")))
warm() {
    dd if=/dev/zero of="$SHM/warm" bs=4M count=$(((BYTES + (1 << 30)) >> 22)) status=none
    rm -f "$SHM/warm"
}

C_S=""
R_S=""
run_c() {
    warm
    local out
    out=$("$WORK/merge" --producers "$P" --blocks "$F" --size "$SIZE" "$DIR/accio-compare-c.$$.accio")
    echo "$out" >> "$WORK/c.log"
    C_S+="$(echo "$out" | sed -n 's/^throughput_bytes_per_s=//p' | awk '{printf "%.4f", $1 / 1e9}') "
}
run_rust() {
    warm
    local out
    out=$("$ACCIO" bench merge "$DIR" --backend shm --placement threads --producers "$P" \
        --buffers "$F" --sizes "$SIZE" --no-naive --no-sync --repetitions 1 \
        --export-csv - 2>>"$WORK/rust.log")
    R_S+="$(echo "$out" | awk -F, '$1 == "merge" && $2 == "merge" { printf "%.4f", $5; exit }') "
}

echo "compare-c: $(bash "$(dirname "$0")/host-line.sh"); $P producer threads x $F x $SIZE = $((BYTES >> 20)) MiB per run into $DIR, $REPS reps" >&2
for rep in $(seq "$REPS"); do
    echo "compare-c: rep $rep/$REPS" >&2
    if [ $((rep % 2)) = 1 ]; then run_c; run_rust; else run_rust; run_c; fi
done

# "median min max" of a list of numbers.
stats() { printf '%s\n' $1 | sort -g | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "%.3f %.3f %.3f\n", m, v[1], v[NR]}'; }
fmt() { set -- $1; printf '%.2f (%.2f–%.2f)' "$1" "$2" "$3"; }
med() { set -- $1; echo "$1"; }

c=$(stats "$C_S"); r=$(stats "$R_S")
echo
echo "merge of $P producer threads x $F x $SIZE into $DIR over shm, GB/s: median (min–max) over $REPS runs"
printf '%-24s %-24s %s\n' "C (libaccio, merge.c)" "Rust (accio bench merge)" "C/Rust"
printf '%-24s %-24s %s\n' "$(fmt "$c")" "$(fmt "$r")" \
    "$(awk -v a="$(med "$c")" -v b="$(med "$r")" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')"
echo "samples: C $C_S| Rust $R_S"
echo "target: C/Rust >= 0.9"
