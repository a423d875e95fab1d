#!/usr/bin/env bash
# compare-merge.sh: the merging file service's must-show figures (issue 17) in one run,
# interleaved repetition by repetition so that machine noise hits every tool alike:
#
#   - `accio bench merge`, P producer processes x F buffers x 2 MiB into one file over shm,
#     for P = 1, 16 and 60, each with producers writing in place (write_mode=direct, one
#     copy) and through the merger's slots (write_mode=copy, two copies), into /dev/shm
#     (tmpfs) and into an ext4 file system on a loop device the script creates (synced at
#     close there);
#   - beside it, fio writing as many bytes with one job and 2 MiB records into the same file
#     system: `--rw=write` on tmpfs, `--rw=write --end_fsync=1` on ext4 (fio options as in
#     compare-fs.sh, so that fio creates and fills a fresh file as the merger does);
#   - fio with P jobs (processes) writing P disjoint ranges of one new file, 2 MiB records:
#     the same work as P producers writing in place, without accio (its "fio P, 1 file"
#     column; at P = 1 the one-job figure above);
#   - and the ceiling `accio bench merge` measures itself in the same invocation (`bench fs`
#     write, or write+sync, best of one stream and one per core, 2 MiB records, same path).
#
# Each tool's turn starts right after the same untimed write-and-remove of a run's worth of
# data in /dev/shm (see warm() below). Every figure is the median and min–max over REPS
# runs. The ratios are of the medians.
#
# Usage: scripts/compare-merge.sh [--reps N] [--producers "1 16 60"] [--mib M]
#                                 [--producer-nice N] [--in-place M] [--accio PATH] [--out DIR]
#   --reps N        repetitions (default 5)
#   --producers L   producer process counts (default "1 16 60")
#   --mib M         MiB per run, split over the producers in 2 MiB buffers (default 960:
#                   60 x 8 x 2 MiB, 16 x 30, 1 x 480)
#   --producer-nice N  the producers' CPU priority, 0-19 (default 0; see accio bench merge --help)
#   --in-place M    how direct producers write whole blocks (ACCIO_MERGE_IN_PLACE): auto
#                   (default: on tmpfs, one producer alone splits blocks of 512 KiB and more
#                   between a pwrite and a thread inserting pages, several insert pages;
#                   elsewhere one pwrite), pwrite, insert, split, or map (a shared mapping of
#                   the room, fallocate + MADV_POPULATE_WRITE + memcpy); to measure the choice
#   --accio PATH    the accio binary (default: target/release/accio, built if missing)
#   --out DIR       keep raw outputs here (default: a new directory under ${TMPDIR:-/tmp})
# Needs root (loop device), fio, jq, mkfs.ext4, losetup.
# Targets (issue 17): direct >= 0.9x the tmpfs single-stream ceiling at 1 and 16 producers, >= 0.8x at 60;
# ext4 with sync: direct >= 0.9x fio --end_fsync=1.

set -euo pipefail

REPS=5
PLIST="1 16 60"
MIB=960
NICE=0
ACCIO=""
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --reps) REPS="$2"; shift 2 ;;
        --producers) PLIST="$2"; shift 2 ;;
        --mib) MIB="$2"; shift 2 ;;
        --in-place) export ACCIO_MERGE_IN_PLACE="$2"; shift 2 ;;
        --producer-nice) NICE="$2"; shift 2 ;;
        --accio) ACCIO="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "compare-merge: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
done
for v in "$REPS" "$MIB" "$NICE" $PLIST; do
    case "$v" in ''|*[!0-9]*) echo "compare-merge: --reps, --producers, --mib and --producer-nice need numbers" >&2; exit 2 ;; esac
done
[ "$(id -u)" -eq 0 ] || { echo "compare-merge: needs root (loop device)" >&2; exit 2; }
for t in fio jq mkfs.ext4 losetup; do
    command -v "$t" >/dev/null || { echo "compare-merge: $t not found (apt-get install fio jq e2fsprogs mount)" >&2; exit 2; }
done

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ACCIO="${ACCIO:-$ROOT/target/release/accio}"
[ -x "$ACCIO" ] || (cd "$ROOT" && cargo build --release -p accio-cli)
OUT="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/accio-compare-merge-XXXXXX")}"
mkdir -p "$OUT"

BYTES=$((MIB << 20))
WORK=$(mktemp -d /var/tmp/accio-compare-merge-XXXXXX)
IMG="$WORK/ext4.img"
EXT4="$WORK/ext4"
SHM="/dev/shm/accio-compare-merge.$$"
LOOP=""
cleanup() {
    set +e
    mountpoint -q "$EXT4" && umount "$EXT4"
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    rm -rf "$WORK" "$SHM"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Room for the merged file, the ceiling's 1 GiB file and fio's, plus slack.
# Written whole, not sparse: a sparse image makes the host allocate on first write, so a
# file that ext4 places in blocks used before (the host already allocated them) writes
# several times faster than one in blocks never touched, and which one a tool gets depends
# on ext4's allocator (new directories go to new block groups), not on the tool.
dd if=/dev/zero of="$IMG" bs=4M count=$(($((2 * BYTES + (5 << 29))) >> 22)) conv=fsync status=none
LOOP=$(losetup -f --show --direct-io=on "$IMG")
mkfs.ext4 -q -F "$LOOP"
mkdir -p "$EXT4" "$SHM"
mount "$LOOP" "$EXT4"

declare -A S   # samples: S[fs/what]="x y z"

# Writes and removes a run's worth of data in /dev/shm, untimed, right before each tool's
# turn. On VMs that hand freed memory back to the host, the first touch of a page is slow
# (MACHINE_NOTES trait 2), and the page cache a file system writes into comes from the same
# free pages: without this, whichever tool runs right after another tool freed its files
# writes into pages the host still backs and looks several times faster.
warm() {
    dd if=/dev/zero of="$SHM/warm" bs=4M count=$(((BYTES + (1 << 30)) >> 22)) status=none
    rm -f "$SHM/warm"
}

echo "compare-merge: $(bash "$(dirname "$0")/host-line.sh"); producers $PLIST, $MIB MiB per run, $REPS reps; raw output in $OUT" >&2
for rep in $(seq "$REPS"); do
    for fs in shm ext4; do
        dir=$SHM; fio_extra=(); [ $fs = ext4 ] && { dir=$EXT4; fio_extra=(--end_fsync=1); }
        for P in $PLIST; do
            F=$(( (MIB / 2 + P - 1) / P )); bytes=$((P * F * (2 << 20)))
            echo "compare-merge: rep $rep/$REPS, $fs, $P x $F x 2 MiB" >&2
            warm
            "$ACCIO" bench merge "$dir" --backend shm --write-mode direct,copy --producers "$P" \
                --buffers "$F" --placement processes --no-naive --repetitions 1 \
                --producer-nice "$NICE" --json "$OUT/accio.json" >/dev/null 2>>"$OUT/accio.log"
            for m in direct copy; do
                S[$fs/$P/$m]+="$(jq -r --arg m "$m" '[.figures[] | select(.bench=="merge" and .metric=="merge" and .params.write_mode==$m)][0].summary.median' "$OUT/accio.json") "
            done
            S[$fs/$P/ceiling]+="$(jq -r '[.figures[] | select(.bench=="merge" and .metric=="merge")][0].ceiling.value' "$OUT/accio.json") "
            # The issue's target is against one stream: the ceiling's 1-thread figure.
            S[$fs/$P/x1]+="$(jq -r '[.figures[] | select(.bench=="fs" and .params.for=="merge ceiling" and .params.threads==1)][0].summary.median' "$OUT/accio.json") "
            mkdir -p "$dir/fio"
            warm
            fio --name=fio --directory="$dir/fio" --rw=write --bs=2M --size="$bytes" --numjobs=1 \
                --ioengine=psync --iomem_align=4096 --fallocate=none --scramble_buffers=0 \
                --fadvise_hint=0 --thread --output-format=json "${fio_extra[@]}" > "$OUT/fio.json"
            S[$fs/$P/fio]+="$(jq -r '.jobs[0].write.bw_bytes / 1e9' "$OUT/fio.json") "
            rm -rf "$dir/fio"
            # The same work without accio: P writers, each its own range of one new file
            # (the limit of P producers writing in place, whose writes take turns on the
            # file's inode lock). One process per job, as the producers are.
            if [ "$P" -gt 1 ]; then
                mkdir -p "$dir/fio"
                warm
                fio --name=fiop --filename="$dir/fio/one" --rw=write --bs=2M --size=$((F * 2))M \
                    --offset_increment=$((F * 2))M --numjobs="$P" --ioengine=psync --iomem_align=4096 \
                    --fallocate=none --scramble_buffers=0 --fadvise_hint=0 --group_reporting \
                    --output-format=json "${fio_extra[@]}" > "$OUT/fiop.json"
                S[$fs/$P/fiop]+="$(jq -r '.jobs[0].write.bw_bytes / 1e9' "$OUT/fiop.json") "
                rm -rf "$dir/fio"
            else
                S[$fs/$P/fiop]+="$(echo ${S[$fs/$P/fio]} | awk '{print $NF}') "
            fi
        done
    done
done

# "median min max" of a list of numbers.
stats() { printf '%s\n' $1 | sort -g | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; printf "%.3f %.3f %.3f\n", m, v[1], v[NR]}'; }
fmt() { set -- $1; printf '%.2f (%.2f–%.2f)' "$1" "$2" "$3"; }
med() { set -- $1; echo "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }

echo
echo "merge of P producer processes (nice $NICE) x 2 MiB buffers, $MIB MiB per run, GB/s: median (min–max) over $REPS runs"
echo "1 stream: bench fs, one thread writing one fresh file in the same invocation (the issue's single-stream ceiling);"
echo "best: the bench's own ceiling, the best of 1 stream and one per core (one file each)"
printf '%-9s %-3s %-20s %-20s %-20s %-20s %-20s %-20s %-8s %-8s %-8s %-8s %-8s %-8s %s\n' "fs" "P" "merge direct" "merge copy" "1 stream" "best (bench)" "fio 1 job" "fio P, 1 file" "dir/1str" "dir/best" "dir/fio" "dir/fioP" "fioP/1st" "copy/1st" "dir/copy"
for fs in shm ext4; do
    for P in $PLIST; do
        d=$(stats "${S[$fs/$P/direct]}"); c=$(stats "${S[$fs/$P/copy]}")
        ce=$(stats "${S[$fs/$P/ceiling]}"); fi=$(stats "${S[$fs/$P/fio]}"); x1=$(stats "${S[$fs/$P/x1]}")
        fp=$(stats "${S[$fs/$P/fiop]}")
        label=/dev/shm; [ $fs = ext4 ] && label="ext4+sync"
        printf '%-9s %-3s %-20s %-20s %-20s %-20s %-20s %-20s %-8s %-8s %-8s %-8s %-8s %-8s %s\n' "$label" "$P" "$(fmt "$d")" "$(fmt "$c")" \
            "$(fmt "$x1")" "$(fmt "$ce")" "$(fmt "$fi")" "$(fmt "$fp")" "$(ratio "$(med "$d")" "$(med "$x1")")" \
            "$(ratio "$(med "$d")" "$(med "$ce")")" "$(ratio "$(med "$d")" "$(med "$fi")")" \
            "$(ratio "$(med "$d")" "$(med "$fp")")" "$(ratio "$(med "$fp")" "$(med "$x1")")" \
            "$(ratio "$(med "$c")" "$(med "$x1")")" "$(ratio "$(med "$d")" "$(med "$c")")"
    done
done
echo "targets (issue 17): /dev/shm direct >= 0.9x the single-stream ceiling (dir/1str) at 1 and 16 producers, >= 0.8x at 60; ext4+sync direct >= 0.9x fio"
echo "fioP/1st: what P writers into one file reach without accio, against one stream (the limit of the same work)"
