#!/usr/bin/env bash
# compare-builds.sh: two builds of accio side by side on the data paths, interleaved
# repetition by repetition (A, B, A, B, ...) so that the host's phases hit both alike:
# shm and tcp latency and streaming bandwidth (`accio bench transport`), and the merger
# over shm with producers writing in place and through slots, into /dev/shm (`accio bench
# merge`). For a change that must cost nothing on the data path (a handshake, a lock, a
# credential check): every figure of B beside A's, median and min-max over the
# repetitions, and the ratio of the medians, with A's own spread as the noise to judge it by.
#
# Usage: scripts/compare-builds.sh OLD_ACCIO NEW_ACCIO [--reps N] [--out DIR]
#   --reps N   repetitions of each build (default 5)
#   --out DIR  keep the raw JSON here (default: a new directory under ${TMPDIR:-/tmp})
# Prints the host's CPU model first. Needs python3.
set -euo pipefail

[ $# -ge 2 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
A=$1 B=$2
shift 2
REPS=5
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
        --reps) REPS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        *) echo "compare-builds: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$REPS" in ''|*[!0-9]*) echo "compare-builds: --reps needs a number" >&2; exit 2 ;; esac
for bin in "$A" "$B"; do
    [ -x "$bin" ] || { echo "compare-builds: $bin is not an executable" >&2; exit 2; }
done
[ -n "$OUT" ] || OUT=$(mktemp -d "${TMPDIR:-/tmp}/accio-compare-builds.XXXXXX")
mkdir -p "$OUT"

echo "compare-builds: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) CPUs; $REPS repetitions; raw output in $OUT"
echo "  A = $A"
echo "  B = $B"

run() { # build tag rep
    local bin=$1 tag=$2 rep=$3
    "$bin" bench transport --backend shm,tcp --sizes 8,64K,2M --quick \
        --json "$OUT/transport-$tag-$rep.json" >/dev/null 2>"$OUT/transport-$tag-$rep.err"
    "$bin" bench merge /dev/shm --producers 1,16 --placement processes --backend shm \
        --write-mode direct,copy --sizes 2M --no-naive --repetitions 1 \
        --json "$OUT/merge-$tag-$rep.json" >/dev/null 2>"$OUT/merge-$tag-$rep.err"
}

for rep in $(seq 1 "$REPS"); do
    echo "repetition $rep/$REPS" >&2
    run "$A" A "$rep"
    run "$B" B "$rep"
done

python3 - "$OUT" "$REPS" <<'EOF'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])

def figures(path):
    doc = json.load(open(path))
    for f in doc.get("figures", []):
        p = f.get("params", {})
        keys = [f.get("bench", ""), f.get("metric", "")]
        for k in ("backend", "size", "write_mode", "producers", "placement", "direction"):
            if k in p:
                keys.append(f"{k}={p[k]}")
        yield " ".join(str(k) for k in keys), f["summary"]["median"], f.get("unit", "")

rows = {}
for tag in "AB":
    for rep in range(1, reps + 1):
        for kind in ("transport", "merge"):
            try:
                for key, value, unit in figures(f"{out}/{kind}-{tag}-{rep}.json"):
                    rows.setdefault((key, unit), {"A": [], "B": []})[tag].append(value)
            except FileNotFoundError:
                pass

def cell(v):
    return f"{statistics.median(v):.4g} ({min(v):.4g}-{max(v):.4g})" if v else "-"

print(f"{'figure':58} {'unit':6} {'A median (min-max)':24} {'B median (min-max)':24} B/A   noise(A)")
for (key, unit), v in sorted(rows.items()):
    a, b = v["A"], v["B"]
    if not a or not b:
        continue
    ratio = statistics.median(b) / statistics.median(a)
    spread = (max(a) - min(a)) / statistics.median(a)
    flag = "" if abs(ratio - 1) <= spread else "  <- beyond A's spread"
    print(f"{key[:58]:58} {unit[:6]:6} {cell(a):24} {cell(b):24} {ratio:5.2f} {spread:5.2f}{flag}")
EOF
