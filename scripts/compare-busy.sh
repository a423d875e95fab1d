#!/usr/bin/env bash
# compare-busy.sh: 8 B one-way latency over shared memory with every CPU kept busy by
# another process, accio beside UCX, interleaved run by run (issue 32's "under load").
#
#   accio        `accio bench transport --backend shm --sizes 8 --only latency --no-pin`:
#                both ends unpinned, as plain processes are; a figure is the median over
#                batches of each batch's median round trip, halved
#   UCX          `ucx_perftest -t tag_lat -s 8` over posix shared memory, both ends
#                unpinned; a figure is its 50th percentile one-way latency
#   the load     one `python3 -c 'while True: pass'` per CPU, started before each
#                measurement and stopped after it (so both sides meet the same load)
#
# Usage: scripts/compare-busy.sh [--reps N] [--accio PATH] [--out DIR] [--busy K]
#   --reps N     runs of each side (default 5)
#   --busy K     busy processes (default: one per CPU, nproc)
# Needs ucx_perftest (Debian: ucx-utils) and python3. Installs nothing.
set -euo pipefail

REPS=5
ACCIO=""
OUT=""
BUSY="$(nproc)"
while [ $# -gt 0 ]; do
    case "$1" in
        --reps) REPS="$2"; shift 2 ;;
        --accio) ACCIO="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --busy) BUSY="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "compare-busy: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
done
case "$REPS$BUSY" in *[!0-9]*) echo "compare-busy: --reps and --busy take numbers" >&2; exit 2 ;; esac

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ACCIO="${ACCIO:-$ROOT/target/release/accio}"
OUT="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/accio-compare-busy-XXXXXX")}"
mkdir -p "$OUT"
[ -x "$ACCIO" ] || { echo "compare-busy: no accio at $ACCIO (cargo build --release -p accio-cli)" >&2; exit 1; }
command -v ucx_perftest >/dev/null || { echo "compare-busy: ucx_perftest is missing (apt-get install ucx-utils)" >&2; exit 1; }

log() { echo "compare-busy: $*" >&2; }
pids=()
busy_start() { for _ in $(seq "$BUSY"); do python3 -c 'while True: pass' & pids+=($!); done; sleep 0.2; }
busy_stop() { [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null || true; pids=(); }
trap busy_stop EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "compare-busy: $(bash "$ROOT/scripts/host-line.sh"); $BUSY busy process(es); $REPS reps; raw output in $OUT" >&2
for rep in $(seq "$REPS"); do
    busy_start
    log "rep $rep/$REPS: accio shm 8 B, unpinned"
    timeout 300 "$ACCIO" bench transport --backend shm --sizes 8 --only latency --no-pin \
        --json "$OUT/accio.$rep.json" > /dev/null 2> "$OUT/accio.$rep.err" || log "accio failed, see $OUT/accio.$rep.err"
    busy_stop
    busy_start
    log "rep $rep/$REPS: ucx_perftest tag_lat 8 B, unpinned"
    p="$(port)"
    UCX_TLS=posix,self timeout 120 ucx_perftest -t tag_lat -p "$p" > "$OUT/ucx-server.$rep.out" 2>&1 &
    srv=$!
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        sleep 0.3
        if UCX_TLS=posix,self timeout 120 ucx_perftest 127.0.0.1 -p "$p" -t tag_lat -s 8 -n 200000 \
            > "$OUT/ucx.$rep.out" 2>&1; then
            break
        fi
    done
    wait "$srv" 2>/dev/null || true
    busy_stop
done

OUT="$OUT" REPS="$REPS" python3 - <<'PY'
import json, os, re, statistics as st
out, reps = os.environ["OUT"], int(os.environ["REPS"])
acc, ucx = [], []
for r in range(1, reps + 1):
    try:
        d = json.load(open(f"{out}/accio.{r}.json"))
        acc += [f["summary"]["median"] for f in d["figures"]
                if f["metric"] == "latency" and f["params"].get("backend") == "shm"
                and f["params"].get("size") == 8]
    except (OSError, ValueError):
        pass
    try:
        m = re.search(r"^Final:\s+\d+\s+([0-9.]+)", open(f"{out}/ucx.{r}.out").read(), re.M)
        if m:
            ucx.append(float(m.group(1)))
    except OSError:
        pass
cell = lambda v: f"{st.median(v):.3f} ({min(v):.3f}-{max(v):.3f}) us" if v else "-"
print(f"\n8 B one-way latency over shm, unpinned, every CPU busy; median (min-max) over {reps} runs")
print(f"  accio                 {cell(acc)}   runs: {', '.join(f'{x:.3f}' for x in acc)}")
print(f"  ucx_perftest tag_lat  {cell(ucx)}   runs: {', '.join(f'{x:.3f}' for x in ucx)}")
if acc and ucx:
    ratio = st.median(acc) / st.median(ucx)
    print(f"  accio / UCX           {ratio:.3f}x   target <= 1.0: {'ok' if ratio <= 1.0 else 'MISSED'}")
print(f"raw outputs: {out}")
PY
