#!/usr/bin/env bash
# The mpi backend against the same Open MPI used directly (benches/peers/mpi_bw_lat.c,
# osu-style), two ranks on one node and two ranks across two namespace "hosts"
# (scripts/netns-world.sh), interleaved repetition by repetition. Prints the medians (min-max)
# of streaming bandwidth at 2 MiB and one-way latency at 8 B, and the ratios the issue asks
# for: accio mpi / Open MPI bandwidth (>= 0.95) and latency (<= 1.1x + 0.1 us).
#
# Usage: scripts/compare-mpi.sh [REPETITIONS (default 5)]
# Needs: mpicc/mpirun (openmpi-bin libopenmpi-dev), libclang-dev, python3; root for the
# namespace half (skipped with the reason otherwise).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
reps=${1:-5}
cd "$ROOT"
cargo build --release -q -p accio-cli --features mpi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
mpicc -O2 -Wall -o "$OUT/mpi_bw_lat" benches/peers/mpi_bw_lat.c
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
FLAGS=(--mca pml_ucx_tls any --mca pml_ucx_devices any --mca osc ucx)
ACCIO=(target/release/accio bench matrix --backends mpi --sizes 8,2M --reps 5)

# "BW LAT": medians of mpi_bw_lat's samples at 2 MiB and 8 B, from its output on stdin.
parse_peer() {
    python3 -c '
import sys, statistics as s
bw, lat = [], []
for l in sys.stdin:
    f = l.split()
    if len(f) >= 3 and f[0] == "bw" and f[1] == "2097152": bw.append(float(f[2]))
    if len(f) >= 3 and f[0] == "lat" and f[1] == "8": lat.append(float(f[2]))
print(s.median(bw), s.median(lat))'
}
parse_accio() {
    python3 -c '
import json, sys, statistics as s
r = json.load(open(sys.argv[1]))
def med(metric, size):
    for f in r["figures"]:
        p = f["params"]
        if f["metric"] == metric and p.get("backend") == "mpi" and p.get("size") == size \
           and p["src"].startswith("r0 ") and p["dst"].startswith("r1 "):
            return s.median(f["samples"])
print(med("stream_bw", 2097152), med("latency", 8))' "$1"
}

declare -A res
for rep in $(seq "$reps"); do
    for where in node hosts; do
        if [ "$where" = node ]; then
            p=$(mpirun "${root[@]}" "${FLAGS[@]}" -n 2 "$OUT/mpi_bw_lat" -s 8,2M -r 5 | parse_peer) \
                || { echo "rep $rep node: the Open MPI run failed"; continue; }
            mpirun "${root[@]}" "${FLAGS[@]}" -n 2 "${ACCIO[@]}" --json "$OUT/a.json" >/dev/null 2>&1 \
                || { echo "rep $rep node: the accio run failed"; continue; }
        else
            o=$(timeout 300 scripts/netns-world.sh -n 2 "$OUT/mpi_bw_lat" -s 8,2M -r 5 2>&1) \
                || { echo "rep $rep hosts: the Open MPI run failed: $(tail -3 <<<"$o")"; continue; }
            if grep -q '^skipped:' <<<"$o"; then echo "hosts: $o"; continue; fi
            p=$(parse_peer <<<"$o")
            timeout 300 scripts/netns-world.sh -n 2 "${ACCIO[@]}" --json "$OUT/a.json" >/dev/null 2>&1 \
                || { echo "rep $rep hosts: the accio run failed"; continue; }
        fi
        a=$(parse_accio "$OUT/a.json")
        res[$where]+="$p $a;"
        echo "rep $rep $where: openmpi bw/lat $p  accio-mpi bw/lat $a"
    done
done
for where in node hosts; do
    [ -n "${res[$where]:-}" ] || continue
    python3 -c '
import sys, statistics as s
rows = [list(map(float, r.split())) for r in sys.argv[2].split(";") if r.strip()]
col = lambda i: [r[i] for r in rows]
m = lambda v: f"{s.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"
pb, pl, ab, al = col(0), col(1), col(2), col(3)
print(f"{sys.argv[1]}: 2 MiB bandwidth GB/s: Open MPI {m(pb)}, accio mpi {m(ab)}, ratio {s.median(ab)/s.median(pb):.2f} (need >= 0.95)")
lim = 1.1 * s.median(pl) + 0.1
verdict = "ok" if s.median(al) <= lim else "over"
print(f"{sys.argv[1]}: 8 B one-way latency us: Open MPI {m(pl)}, accio mpi {m(al)}, limit {lim:.2f} -> {verdict}")
' "$where" "${res[$where]}"
done
