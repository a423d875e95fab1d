#!/usr/bin/env bash
# compare-python.sh: the Python package's figures beside Rust's and mpi4py's, measured in
# one run, interleaved repetition by repetition so that machine noise hits every side alike
# (issue 16's must-show).
#
#   figure                      Python (bindings/python/bench/pybench.py)   compared with
#   shm one-way latency, 8 B    send + recv_into ping-pong, 2 processes     `accio bench transport` latency shm 8;
#                                                                            mpi4py Send/Recv ping-pong
#                                                                            (mpirun -np 2 --bind-to core)
#   shm two-sided bw, 2 MiB     send + recv_into ping-pong of NumPy arrays,  mpi4py Send/Recv ping-pong of NumPy
#                               2 processes                                 arrays (mpirun -np 2 --bind-to core)
#   shm RMA write bw, 2 MiB     vwrite_to from a NumPy array (and write_to   `accio bench transport` rma_write_bw shm 2M
#                               from a window), fenced passes
#   merge into /dev/shm         Merger + 8 multiprocessing workers x 64 x    `accio bench merge /dev/shm --producers 8
#                               2 MiB, Producer.write(numpy array)            --buffers 64 --sizes 2M --placement processes`
#   latency next to a busy      the latency ping-pong unpinned (--no-pin),   mpi4py's ping-pong under mpirun, as its
#   process                     a spinning Python loop running beside it     users launch it, the same loop beside it
#   Jacobi 4096x4096, 100 it.   `accio run -n R python3 -m accio.demo.laplace` `mpirun -n R python3 laplace_mpi4py.py`
#   on 2 and 4 ranks            (accio.grid.HaloExchange)                   (the same kernel; Sendrecv of faces),
#                                                                            and once more: the A/A control
#
# All latencies use one method (every round trip timed, a sample is a batch's median round
# trip halved); a run contributes its median, the table shows median (min–max) over runs.
#
# Usage: scripts/compare-python.sh [--reps N] [--accio PATH] [--python PY] [--out DIR] [--no-laplace]
#   --reps N      repetitions of every side (default 3)
#   --accio PATH  the accio binary (default target/release/accio;
#                 `cargo build --release -p accio-cli`)
#   --python PY   the interpreter with the accio package (default python3;
#                 `pip install ./bindings/python`)
#   --out DIR     keep raw outputs here (default: a new directory under ${TMPDIR:-/tmp})
#   --no-laplace  leave the Jacobi rows out (about 60 s per repetition)
# Needs jq. mpi4py rows need mpirun (openmpi-bin) and mpi4py (`pip install mpi4py`); without
# them the rows are left out and said so. Installs nothing.

set -euo pipefail

REPS=3
ACCIO=""
PY=python3
OUT=""
LAPLACE=1
while [ $# -gt 0 ]; do
    case "$1" in
        --no-laplace) LAPLACE=0; shift ;;
        --reps) REPS="$2"; shift 2 ;;
        --accio) ACCIO="$2"; shift 2 ;;
        --python) PY="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "compare-python: unknown argument $1 (try --help)" >&2; exit 2 ;;
    esac
done
case "$REPS" in ''|*[!0-9]*|0) echo "compare-python: --reps needs a number >= 1" >&2; exit 2 ;; esac

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ACCIO="${ACCIO:-$ROOT/target/release/accio}"
BENCH="$ROOT/bindings/python/bench/pybench.py"
OUT="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/accio-compare-python-XXXXXX")}"
mkdir -p "$OUT"

command -v jq >/dev/null || { echo "compare-python: jq is missing (apt-get install jq)" >&2; exit 1; }
if [ ! -x "$ACCIO" ]; then
    echo "compare-python: no accio binary at $ACCIO; build it with cargo build --release -p accio-cli" >&2
    exit 1
fi
if ! (cd / && "$PY" -c 'import accio, numpy') 2>/dev/null; then
    echo "compare-python: $PY cannot import accio and numpy; pip install ./bindings/python numpy" >&2
    exit 1
fi
HAVE_MPI=1
if ! command -v mpirun >/dev/null || ! "$PY" -c 'import mpi4py' 2>/dev/null; then
    echo "compare-python: mpirun or mpi4py missing (apt-get install openmpi-bin; pip install mpi4py): mpi4py row left out" >&2
    HAVE_MPI=0
fi

log() { echo "compare-python: $*" >&2; }
LAPLACE_PY="$ROOT/bindings/python/bench/laplace_mpi4py.py"
FLOOR_PY="$ROOT/bindings/python/bench/barrier_floor.py"
# A process that keeps one CPU busy for the "busy" rows: a spinning Python loop.
BUSY=""
busy_start() { "$PY" -c 'while True: pass' & BUSY=$!; }
busy_stop() { kill "$BUSY" 2>/dev/null; wait "$BUSY" 2>/dev/null || true; BUSY=""; }
trap 'busy_stop' EXIT
P=8 F=64
echo "compare-python: $(bash "$(dirname "$0")/host-line.sh"); $REPS reps; raw output in $OUT" >&2
for rep in $(seq "$REPS"); do
    log "rep $rep/$REPS: rust transport (shm, 8 B and 2 MiB)"
    timeout 600 "$ACCIO" bench transport --backend shm --sizes 8,2M --json "$OUT/rust-transport.$rep.json" \
        >/dev/null 2>>"$OUT/rust.log"
    log "rep $rep/$REPS: python latency"
    (cd / && timeout 300 "$PY" "$BENCH" latency --size 8) > "$OUT/py-latency.$rep.json"
    if [ "$HAVE_MPI" = 1 ]; then
        log "rep $rep/$REPS: mpi4py latency"
        (cd / && timeout 300 mpirun -np 2 --allow-run-as-root --bind-to core "$PY" "$BENCH" mpi-latency --size 8) \
            > "$OUT/mpi4py-latency.$rep.json" 2>>"$OUT/mpi.log" || { log "mpirun failed, see $OUT/mpi.log"; HAVE_MPI=0; }
    fi
    log "rep $rep/$REPS: python latency, unpinned, a busy process beside it"
    busy_start
    (cd / && timeout 300 "$PY" "$BENCH" latency --size 8 --no-pin) > "$OUT/py-latency-busy.$rep.json"
    if [ "$HAVE_MPI" = 1 ]; then
        log "rep $rep/$REPS: mpi4py latency, a busy process beside it"
        (cd / && timeout 300 mpirun -np 2 --allow-run-as-root --bind-to core "$PY" "$BENCH" mpi-latency --size 8) \
            > "$OUT/mpi4py-latency-busy.$rep.json" 2>>"$OUT/mpi.log" || { log "mpirun failed, see $OUT/mpi.log"; HAVE_MPI=0; }
    fi
    busy_stop
    log "rep $rep/$REPS: python two-sided 2 MiB"
    (cd / && timeout 300 "$PY" "$BENCH" bw --size 2M) > "$OUT/py-bw.$rep.json"
    if [ "$HAVE_MPI" = 1 ]; then
        log "rep $rep/$REPS: mpi4py two-sided 2 MiB"
        (cd / && timeout 300 mpirun -np 2 --allow-run-as-root --bind-to core "$PY" "$BENCH" mpi-bw --size 2M) \
            > "$OUT/mpi4py-bw.$rep.json" 2>>"$OUT/mpi.log" || { log "mpirun failed, see $OUT/mpi.log"; HAVE_MPI=0; }
    fi
    log "rep $rep/$REPS: python rma 2 MiB"
    (cd / && timeout 300 "$PY" "$BENCH" rma --size 2M) > "$OUT/py-rma.$rep.json"
    log "rep $rep/$REPS: rust merge ($P processes x $F x 2 MiB into /dev/shm)"
    timeout 600 "$ACCIO" bench merge /dev/shm --backend shm --producers "$P" --buffers "$F" --sizes 2M \
        --placement processes --no-naive --repetitions 1 --json "$OUT/rust-merge.$rep.json" \
        >/dev/null 2>>"$OUT/rust.log"
    log "rep $rep/$REPS: python merge ($P multiprocessing workers x $F x 2 MiB into /dev/shm)"
    (cd / && timeout 600 "$PY" "$BENCH" merge --dir /dev/shm --workers "$P" --buffers "$F" --size 2M) \
        > "$OUT/py-merge.$rep.json"
    if [ "$LAPLACE" = 1 ]; then
        # Each program as its users run it, then with --phases (a barrier after each sweep,
        # so that communicate is the exchange alone, not the wait for a slower neighbour).
        for r in 2 4; do
            for phases in "" --phases; do
                tag="$r${phases:+-phases}"
                log "rep $rep/$REPS: python Jacobi 4096x4096 x 100 on $r ranks (accio run) $phases"
                (cd / && timeout 600 "$ACCIO" run -n "$r" "$PY" -m accio.demo.laplace --n 4096 --iters 100 \
                    --json $phases) > "$OUT/py-laplace-$tag.$rep.json"
                if [ "$HAVE_MPI" = 1 ]; then
                    log "rep $rep/$REPS: mpi4py Jacobi 4096x4096 x 100 on $r ranks (mpirun) $phases"
                    (cd / && timeout 600 mpirun -np "$r" --allow-run-as-root --oversubscribe "$PY" "$LAPLACE_PY" \
                        --n 4096 --iters 100 --json $phases) > "$OUT/mpi4py-laplace-$tag.$rep.json" \
                        2>>"$OUT/mpi.log" || { log "mpirun failed, see $OUT/mpi.log"; HAVE_MPI=0; }
                fi
                if [ "$HAVE_MPI" = 1 ] && [ -z "$phases" ]; then
                    # The A/A control: the same mpi4py program once more, so the table
                    # shows how far two runs of one program differ in these minutes.
                    log "rep $rep/$REPS: mpi4py Jacobi on $r ranks again (the A/A control)"
                    (cd / && timeout 600 mpirun -np "$r" --allow-run-as-root --oversubscribe "$PY" "$LAPLACE_PY" \
                        --n 4096 --iters 100 --json) > "$OUT/mpi4py-laplace-$tag-again.$rep.json" \
                        2>>"$OUT/mpi.log" || log "mpirun failed, see $OUT/mpi.log"
                fi
            done
        done
        log "rep $rep/$REPS: control on 4 ranks: a barrier right after a barrier (accio, mpi4py)"
        (cd / && timeout 300 "$ACCIO" run -n 4 "$PY" "$FLOOR_PY" accio) > "$OUT/py-floor.$rep.json"
        if [ "$HAVE_MPI" = 1 ]; then
            (cd / && timeout 300 mpirun -np 4 --allow-run-as-root --oversubscribe "$PY" "$FLOOR_PY" mpi4py) \
                > "$OUT/mpi4py-floor.$rep.json" 2>>"$OUT/mpi.log" || log "mpirun failed, see $OUT/mpi.log"
        fi
    fi
done

"$PY" - "$OUT" "$REPS" "$HAVE_MPI" "$LAPLACE" <<'PYEOF'
import json, statistics, sys
out, reps, have_mpi, laplace = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"

def rust(kind, metric, size):
    vals = []
    for r in range(1, reps + 1):
        doc = json.load(open(f"{out}/rust-{kind}.{r}.json"))
        for f in doc["figures"]:
            p = f["params"]
            if f["metric"] == metric and p.get("backend") == "shm" and (size is None or p.get("size") == size):
                vals.append(f["summary"]["median"])
                break
    return vals

def py(name, figure):
    vals = []
    for r in range(1, reps + 1):
        try:
            lines = open(f"{out}/{name}.{r}.json").read().split("\n")
        except FileNotFoundError:
            continue
        for line in filter(None, lines):
            d = json.loads(line)
            if d["figure"] == figure:
                vals.append(d["median"])
    return vals

def fmt(v):
    a = abs(v)
    return f"{v:.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}" if a >= 1 else f"{v:.3f}"

def cell(v, unit):
    return "-" if not v else f"{fmt(statistics.median(v))} ({fmt(min(v))}–{fmt(max(v))}) {unit}"

rows = []
def row(figure, a, peer, p, unit, target):
    ratio = statistics.median(a) / statistics.median(p) if a and p else None
    ok = ""
    if ratio is not None and target:
        op, want = target.split()
        ok = "ok" if (ratio >= float(want) if op == ">=" else ratio <= float(want)) else "MISSED"
    rows.append([figure, cell(a, unit), peer, cell(p, unit),
                 "-" if ratio is None else f"{fmt(ratio)}x", f"{target} {ok}".strip()])

M = 1 << 20
lat = py("py-latency", "python accio latency")
if have_mpi:
    row("shm latency 8 B (one-way)", lat, "mpi4py Send/Recv ping-pong",
        py("mpi4py-latency", "mpi4py latency"), "us", "<= 0.5")
    row("latency 8 B, unpinned, busy process beside", py("py-latency-busy", "python accio latency"),
        "mpi4py, same busy process", py("mpi4py-latency-busy", "mpi4py latency"), "us", "<= 1.0")
row("shm latency 8 B (one-way)", lat, "Rust accio bench transport", rust("transport", "latency", 8), "us", "")
if have_mpi:
    row("shm two-sided 2 MiB, send + recv_into(numpy)", py("py-bw", "python accio two-sided bw"),
        "mpi4py Send/Recv ping-pong", py("mpi4py-bw", "mpi4py two-sided bw"), "GB/s", ">= 1.0")
rrma = rust("transport", "rma_write_bw", 2 * M)
row("RMA write 2 MiB, vwrite_to(numpy)", py("py-rma", "python accio rma_write_bw vwrite_to"),
    "Rust write_to (accio bench)", rrma, "GB/s", ">= 0.9")
row("RMA write 2 MiB, write_to(window)", py("py-rma", "python accio rma_write_bw write_to"),
    "Rust write_to (accio bench)", rrma, "GB/s", ">= 0.9")
if have_mpi:
    row("RMA write 2 MiB, write_to(window)", py("py-rma", "python accio rma_write_bw write_to"),
        "mpi4py Send/Recv ping-pong", py("mpi4py-bw", "mpi4py two-sided bw"), "GB/s", ">= 1.0")
row("merge 8 procs x 64 x 2 MiB, /dev/shm", py("py-merge", "python accio merge"),
    "Rust accio bench merge, same shape", rust("merge", "merge", None), "GB/s", ">= 0.8")

def jacobi(name, field):
    vals = []
    for r in range(1, reps + 1):
        try:
            d = json.loads(open(f"{out}/{name}.{r}.json").read().strip().splitlines()[0])
        except (FileNotFoundError, IndexError):
            continue
        vals.append(d[field] if isinstance(field, str) else sum(d[f] for f in field))
    return vals

if laplace and have_mpi:
    for r in (2, 4):
        a, m = f"py-laplace-{r}", f"mpi4py-laplace-{r}"
        row(f"Jacobi 4096^2 x 100, {r} ranks: total per iteration", jacobi(a, "total_ms"),
            "mpi4py Sendrecv, same kernel", jacobi(m, "total_ms"), "ms", "<= 1.0")
        # How far apart two runs of one program land in these minutes (each ratio above
        # this far from 1 says nothing about either library).
        row(f"control, {r} ranks: mpi4py total, run again", jacobi(m + "-again", "total_ms"),
            "mpi4py total (the row above)", jacobi(m, "total_ms"), "ms", "")
        row(f"Jacobi {r} ranks: compute per iteration", jacobi(a, "compute_ms"),
            "mpi4py, the same NumPy sweep", jacobi(m, "compute_ms"), "ms", "")
        # As the programs run, a rank waits for a slower neighbour's sweep inside the
        # exchange (accio: sync; mpi4py: inside Sendrecv), so both waits are counted.
        row(f"Jacobi {r} ranks: exchange incl. waiting", jacobi(a, ("communicate_ms", "sync_ms")),
            "mpi4py Sendrecv time", jacobi(m, "communicate_ms"), "ms", "")
        # With --phases a barrier after each sweep takes that wait: the exchange alone.
        row(f"Jacobi {r} ranks: communicate (--phases)", jacobi(a + "-phases", "communicate_ms"),
            "mpi4py Sendrecv after a Barrier", jacobi(m + "-phases", "communicate_ms"), "ms", "<= 0.5")

if laplace:
    # The floor under the 4-rank exchange: a barrier right after a barrier moves no data,
    # yet costs each rank a turn of the scheduler where ranks outnumber cores.
    row("control, 4 ranks: a second barrier", jacobi("py-floor", "second_barrier_ms"),
        "mpi4py Barrier, the same", jacobi("mpi4py-floor", "second_barrier_ms") if have_mpi else [], "ms", "")

headers = ["figure", "Python median (min–max)", "compared with", "its median (min–max)", "ratio", "target"]
width = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
print(f"\naccio from Python vs Rust and mpi4py: {reps} runs each, interleaved; median (min–max) "
      "over runs; ratio = Python / other (lower is better for latency, higher for bandwidth)")
for line in [headers, ["-" * w for w in width]] + rows:
    print("  ".join(c.ljust(w) for c, w in zip(line, width)).rstrip())
print(f"raw outputs: {out}")
PYEOF
