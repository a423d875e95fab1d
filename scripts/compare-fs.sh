#!/usr/bin/env bash
# compare-fs.sh: `accio bench fs` side by side with fio running the equivalent job, on
# /dev/shm (tmpfs) and on an ext4 file system in a loop device that the script creates and
# removes, single-threaded and with 2 threads, interleaved repetition by repetition so that
# machine noise hits both tools alike. Then one `accio bench fs` run over /dev/shm, a ramfs
# the script mounts and the ext4 loop file system, printing the Colfax-style summary table.
#
#   mode        accio                               fio (psync, bs=4M, one file per job,
#                                                        --iomem_align=4096, --fallocate=none,
#                                                        --scramble_buffers=0, --fadvise_hint=0,
#                                                        --thread --group_reporting)
#   write       fresh files, close timed, no sync   --rw=write on removed files
#   write+sync  the same + fsync inside the timing  --rw=write --end_fsync=1 on removed files
#   cold read   drop_caches (root), then read       sync; echo 3 > drop_caches; --rw=read
#   re-read     read again, warm                    --rw=read --invalidate=0
#
# Write modes run one at a time, each tool right after writing and removing as much data as
# it will write (see warm() below), so that both start from the same state of the VM's
# memory; which tool goes first alternates by repetition.
# The fio options make its job do what accio's does: a page-aligned buffer (glibc's malloc
# puts fio's 16 bytes past a page, which slows the kernel's copy), files created by the
# writes (fio preallocates by default, so its writes would land on existing pages), the
# same buffer every write (fio rewrites bytes of it before each write by default), no
# access-pattern hint. One difference stays: fio's 2-job figure is total bytes over the
# longest job's runtime, and fio starts its jobs one after the other, not at a barrier.
# Every figure is the median and min–max over REPS runs (accio runs with --repeats 1 each time,
# fio once); the ratio is accio / fio of the medians, and the target is 0.9–1.1.
#
# The loop device is set up with --direct-io=on, so that a cold read on it reaches the disk
# instead of the host's page cache of the image file (drop_caches empties both anyway).
#
# With --control, fio runs in accio's place too (an A/A test: the same schedule, warm-ups
# and alternation, fio against itself). Its table is the noise floor of the comparison on
# this machine: a row that fio cannot hold within ±10% of itself says nothing about accio.
#
# Usage: scripts/compare-fs.sh [--reps N] [--size SIZE] [--threads "1 2"] [--control]
#                              [--accio PATH] [--out DIR]
#   --reps N        repetitions (default 5)
#   --size SIZE     file size per thread, fio syntax (default 1G; small files make
#                   fio's millisecond runtimes coarse)
#   --threads LIST  thread counts, space-separated (default "1 2")
#   --control       fio in both columns (see above); skips the summary table
#   --accio PATH    the accio binary (default: target/release/accio, built if missing)
#   --out DIR       keep raw outputs here (default: a new directory under ${TMPDIR:-/tmp})
# Needs root (loop device, ramfs, drop_caches), fio, jq, mkfs.ext4, losetup.

set -euo pipefail

REPS=5
SIZE=1G
THREADS="1 2"
ACCIO=""
OUT=""
CONTROL=0
while [ $# -gt 0 ]; do
    case "$1" in
        --reps) REPS="$2"; shift 2 ;;
        --size) SIZE="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --control) CONTROL=1; shift ;;
        --accio) ACCIO="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "compare-fs: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
done
case "$REPS" in ''|*[!0-9]*) echo "compare-fs: --reps needs a number" >&2; exit 2 ;; esac
[ "$REPS" -ge 3 ] || echo "compare-fs: note: $REPS repetitions; medians want at least 3" >&2
[ "$(id -u)" -eq 0 ] || { echo "compare-fs: needs root (loop device, ramfs, drop_caches)" >&2; exit 2; }
for t in fio jq mkfs.ext4 losetup; do
    command -v "$t" >/dev/null || { echo "compare-fs: $t not found (apt-get install fio jq e2fsprogs mount)" >&2; exit 2; }
done

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ACCIO="${ACCIO:-$ROOT/target/release/accio}"
if [ ! -x "$ACCIO" ]; then
    (cd "$ROOT" && cargo build --release -p accio-cli)
fi
OUT="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/accio-compare-fs-XXXXXX")}"
mkdir -p "$OUT"

# Sizes in bytes, for the loop image and the sanity checks.
bytes() { numfmt --from=iec "${1%B}"; }
SIZE_B=$(bytes "$SIZE")
MAX_T=$(printf '%s\n' $THREADS | sort -n | tail -1)

WORK=$(mktemp -d /var/tmp/accio-compare-fs-XXXXXX)
IMG="$WORK/ext4.img"
EXT4="$WORK/ext4"
RAMFS="$WORK/ramfs"
SHM="/dev/shm/accio-compare-fs.$$"
LOOP=""
cleanup() {
    set +e
    mountpoint -q "$EXT4" && umount "$EXT4"
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    mountpoint -q "$RAMFS" && umount "$RAMFS"
    rm -rf "$WORK" "$SHM"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ext4 on a loop device: room for fio's files, a warm-up's and accio's, plus slack.
# Written whole, not sparse: a sparse image makes the host allocate on first write, so a
# file that ext4 places in blocks used before (the host already allocated them) writes
# several times faster than one in blocks never touched, and which one a tool gets depends
# on ext4's allocator (new directories go to new block groups), not on the tool.
dd if=/dev/zero of="$IMG" bs=4M count=$(($((3 * MAX_T * SIZE_B + (512 << 20))) >> 22)) conv=fsync status=none
LOOP=$(losetup -f --show --direct-io=on "$IMG")
mkfs.ext4 -q -F "$LOOP"
mkdir -p "$EXT4" "$RAMFS" "$SHM"
mount "$LOOP" "$EXT4"
mount -t ramfs ramfs "$RAMFS"

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# Writes and removes N x SIZE in DIR, untimed, right before each tool's turn. On VMs that
# hand freed memory back to the host the first touch of a page is slow (MACHINE_NOTES trait
# 2): without this, whichever tool runs second writes into pages the first one just freed
# and looks several times faster.
warm() {
    local n=$1 dir=$2
    for i in $(seq "$n"); do
        dd if=/dev/zero of="$dir/warm.$i" bs=4M count=$((SIZE_B / (4 << 20))) status=none
    done
    rm -f "$dir"/warm.*
}

# fio job for MODE with N jobs in DIR; prints GB/s.
fio_run() {
    local mode=$1 n=$2 dir=$3 extra=() rw=write key=write
    case "$mode" in
        write) rm -f "$dir"/fio.* ;;
        write+sync) rm -f "$dir"/fio.*; extra=(--end_fsync=1) ;;
        cold-read) drop; rw=read; key=read ;;
        re-read) rw=read; key=read; extra=(--invalidate=0) ;;
    esac
    fio --name=fio --directory="$dir" --rw=$rw --bs=4M --size="$SIZE" --numjobs="$n" \
        --ioengine=psync --iomem_align=4096 --fallocate=none --scramble_buffers=0 \
        --fadvise_hint=0 --thread --group_reporting \
        --output-format=json "${extra[@]}" > "$OUT/fio.json"
    jq -r ".jobs[0].$key.bw_bytes / 1e9" "$OUT/fio.json"
}

MODES="write write+sync cold-read re-read"
declare -A A F   # samples: A[fs/n/mode]="x y z"

# accio bench fs for the comma-separated MODES with N threads in DIR; adds to A. With
# --control, fio instead, with its files in DIR/ctl.
accio_run() {
    local modes=$1 n=$2 dir=$3 m v
    if [ "$CONTROL" -eq 1 ]; then
        mkdir -p "$dir/ctl"
        for m in ${modes//,/ }; do
            A[$fs/$n/$m]+="$(fio_run "$m" "$n" "$dir/ctl") "
        done
        return
    fi
    "$ACCIO" bench fs "$dir" --threads "$n" --file-size "$SIZE" --record-size 4M \
        --repeats 1 --modes "$modes" --json "$OUT/accio.json" >/dev/null 2>>"$OUT/accio.log"
    for m in ${modes//,/ }; do
        v=$(jq -r --arg m "$m" '.figures[] | select(.bench=="fs" and .metric==$m) | .summary.median' "$OUT/accio.json")
        A[$fs/$n/$m]+="$v "
    done
}

echo "compare-fs: $(bash "$(dirname "$0")/host-line.sh"); load $(cut -d' ' -f1-3 /proc/loadavg); file size $SIZE per thread, 4M records, $REPS reps; raw output in $OUT" >&2
for rep in $(seq "$REPS"); do
    for fs in shm ext4; do
        dir=$SHM; [ $fs = ext4 ] && dir=$EXT4
        mkdir -p "$dir/fio"
        for n in $THREADS; do
            echo "compare-fs: rep $rep/$REPS, $fs, $n thread(s)" >&2
            # Write modes one at a time, each tool right after the same warm-up, the tool
            # that goes first alternating by repetition; then the read modes.
            for m in write write+sync; do
                if [ $((rep % 2)) -eq 1 ]; then
                    warm "$n" "$dir"; accio_run "$m" "$n" "$dir"
                    warm "$n" "$dir"; F[$fs/$n/$m]+="$(fio_run "$m" "$n" "$dir/fio") "
                else
                    warm "$n" "$dir"; F[$fs/$n/$m]+="$(fio_run "$m" "$n" "$dir/fio") "
                    warm "$n" "$dir"; accio_run "$m" "$n" "$dir"
                fi
            done
            accio_run cold-read,re-read "$n" "$dir"
            for m in cold-read re-read; do
                F[$fs/$n/$m]+="$(fio_run "$m" "$n" "$dir/fio") "
            done
            rm -f "$dir"/fio/fio.* "$dir"/ctl/fio.*
        done
    done
done

# "median min max" of a list of numbers.
stats() { printf '%s\n' $1 | sort -g | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "%.3f %.3f %.3f\n", m, v[1], v[NR]}'; }
fmt() { set -- $1; printf '%.2f (%.2f–%.2f)' "$1" "$2" "$3"; }

TOOL=accio; [ "$CONTROL" -eq 1 ] && TOOL="fio (control)"
echo
echo "$TOOL vs fio, GB/s: median (min–max) over $REPS runs; file size $SIZE per thread, 4M records"
printf '%-9s %-7s %-11s %-22s %-22s %-8s %s\n' "fs" "threads" "mode" "${TOOL%% *}" "fio" "ratio" "within ±10%"
for fs in shm ext4; do
    for n in $THREADS; do
        for m in $MODES; do
            a=$(stats "${A[$fs/$n/$m]}"); f=$(stats "${F[$fs/$n/$m]}")
            r=$(awk -v a="${a%% *}" -v f="${f%% *}" 'BEGIN { printf "%.2f", (f > 0) ? a / f : 0 }')
            ok=$(awk -v r="$r" 'BEGIN { print (r >= 0.9 && r <= 1.1) ? "yes" : "no" }')
            label=$fs; [ $fs = shm ] && label=/dev/shm
            printf '%-9s %-7s %-11s %-22s %-22s %-9s %s\n' "$label" "$n" "$m" "$(fmt "$a")" "$(fmt "$f")" "$r" "$ok"
        done
    done
done

[ "$CONTROL" -eq 1 ] && exit 0
echo
echo "accio bench fs /dev/shm (tmpfs) + ramfs + ext4 loop, threads $(echo $THREADS | tr ' ' ,), $SIZE per thread:"
"$ACCIO" bench fs "$SHM" "$RAMFS" "$EXT4" --threads "$(echo $THREADS | tr ' ' ,)" --file-size "$SIZE" \
    --json "$OUT/summary.json" 2>>"$OUT/accio.log" | tee "$OUT/summary.txt" | sed -n '/^Summary/,$p'
echo "(per-path tables: $OUT/summary.txt; JSON: $OUT/summary.json)"
