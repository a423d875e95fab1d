#!/usr/bin/env bash
# The GPU machine's run (no Rust, no network there): accio's GPU figures beside the CUDA C
# reference and PyTorch, the merged file from device buffers, and the tests that need a
# GPU, in one go of a few minutes. Build what it takes here first:
#   bash ci/device-build.sh .dev        (accio, the GPU test binaries, the Python package)
# then, from the repository root on the GPU machine (nvcc and python3 on PATH):
#   bash ci/device.sh .dev [OUT_DIR]    (OUT_DIR defaults to $OUT, else ./device-out)
# Each step runs under its own time limit and says how it ended; the run goes on after a
# failed step and exits non-zero if any failed. Extra flags for `accio bench device` go in
# ACCIO_DEVICE_ARGS.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=$(realpath "${1:?usage: ci/device.sh DIR_FROM_DEVICE_BUILD [OUT_DIR]}")
out=$(realpath -m "${2:-${OUT:-device-out}}")
mkdir -p "$out"
accio=$dir/accio
failed=()

# step NAME SECONDS COMMAND...: runs it, at most SECONDS, and reports.
step() {
    local name=$1 limit=$2 t0=$SECONDS rc
    shift 2
    echo "== $name"
    timeout -k 5 "$limit" "$@"
    rc=$?
    echo "-- $name: exit $rc after $((SECONDS - t0)) s"
    [ "$rc" -eq 0 ] || failed+=("$name")
}

echo "== node"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,pcie.link.gen.max,pcie.link.width.max,memory.total \
    --format=csv || true
grep -m1 "model name" /proc/cpuinfo || true
"$accio" info | tee "$out/info.txt"

step "CUDA C reference (benches/peers/nvbw_ref.cu)" 120 bash -c \
    "set -o pipefail; nvcc -O2 -arch=native -o /tmp/nvbw_ref benches/peers/nvbw_ref.cu && /tmp/nvbw_ref 0 5 | tee '$out/nvbw_ref.jsonl'"

# shellcheck disable=SC2086
step "accio bench device (with device windows over shm and tcp)" 240 "$accio" bench device --json "$out/accio-device.json" ${ACCIO_DEVICE_ARGS:-}

step "PyTorch's copies (benches/peers/torch_copies.py)" 60 bash -c \
    "set -o pipefail; python3 benches/peers/torch_copies.py 5 | tee '$out/torch.jsonl'"
step "CuPy's copies (benches/peers/cupy_copies.py)" 60 bash -c \
    "set -o pipefail; python3 benches/peers/cupy_copies.py 5 | tee '$out/cupy.jsonl'"

echo "== side by side (GPU 0)"
python3 - "$out/accio-device.json" "$out/nvbw_ref.jsonl" "$out/torch.jsonl" "$out/cupy.jsonl" <<'PY' || failed+=("table")
import json, os, sys
acc = json.load(open(sys.argv[1]))["figures"] if os.path.exists(sys.argv[1]) else []
def lines(p):
    return [json.loads(l) for l in open(p) if l.startswith("{")] if os.path.exists(p) else []
ref = lines(sys.argv[2])
torch = {(r["metric"], r["memory"], r["size"]): r for r in lines(sys.argv[3])}
cupy = {(r["metric"], r["memory"], r["size"]): r for r in lines(sys.argv[4])}
gpu0 = acc[0]["params"]["gpu"] if acc else None
mine = {(f["metric"], f["params"].get("memory"), f["params"]["size"]): f
        for f in acc if f["bench"] == "device" and f["params"].get("gpu") == gpu0}
print(f"{'metric':12} {'memory':9} {'size':>10} {'accio':>9} {'ref':>9} {'vs ref':>7} {'torch':>9} {'cupy':>9} {'of ceiling':>10}")
for r in ref:
    f = mine.get((r["metric"], r["memory"], r["size"]))
    if f is None:
        continue
    a, b = f["summary"]["median"], r["value"]
    ratio = b / a if r["unit"] == "us" else a / b  # > 1: accio better
    t = torch.get((r["metric"], r["memory"], r["size"]))
    q = cupy.get((r["metric"], r["memory"], r["size"]))
    c = (f.get("ceiling") or {}).get("ratio")
    print(f"{r['metric']:12} {r['memory']:9} {r['size']:>10} {a:9.3f} {b:9.3f} {ratio:7.3f} "
          f"{'' if t is None else format(t['value'], '9.3f'):>9} "
          f"{'' if q is None else format(q['value'], '9.3f'):>9} {'' if c is None else f'{c:10.1%}'}  {r['unit']}")
for (m, mem, size), f in sorted(mine.items(), key=lambda kv: (kv[0][0], kv[0][2])):
    if m in ("d2d_ipc", "latency_flag"):
        c = f.get("ceiling") or {}
        print(f"{m:12} {mem or '':9} {size:>10} {f['summary']['median']:9.3f}  "
              f"(min {f['summary']['min']:.3f}, max {f['summary']['max']:.3f}) {f['unit']}"
              + (f"; {c['ratio']:.1%} of {c['name']} {c['value']:.1f}" if c.get("ratio") else ""))
for f in acc:
    p = f["params"]
    if f["bench"] == "device" and p.get("gpu") == gpu0 and f["metric"].startswith("window_"):
        c = f.get("ceiling") or {}
        print(f"{f['metric']:12} {p.get('backend', ''):9} {p['size']:>10} {f['summary']['median']:9.3f}  "
              f"(min {f['summary']['min']:.3f}, max {f['summary']['max']:.3f}) {f['unit']}"
              + (f"; {c['ratio']:.1%} of {c['name']} {c['value']:.2f}" if c.get("ratio") else ""))
print("vs ref: accio's rate / the reference's (latency: the reference's time / accio's); "
      "above 1 accio is faster. of ceiling: accio's share of its ceiling (PCIe link, memory).")
PY

# The matrix of two ranks with GPUs as endpoints (item 5): host and GPU memory of each
# rank, write_to between them over shm and tcp.
step "accio bench matrix: 2 ranks, GPUs as endpoints" 120 bash -c \
    "set -o pipefail; '$accio' run -n 2 '$accio' bench matrix --reps 3 --sizes 8,4M --json '$out/matrix.json' > '$out/matrix.md' && python3 -c '
import json, sys
for f in json.load(open(sys.argv[1]))[\"figures\"]:
    if f[\"metric\"] == \"device_bw\":
        p = f[\"params\"]
        print(p[\"src\"], \"->\", p[\"dst\"], p[\"backend\"], p[\"size\"], round(f[\"summary\"][\"median\"], 3), \"GB/s\")
' '$out/matrix.json'"

kept=/dev/shm/accio-device-merge.accio
rm -f "$kept"
# Threads share one CUDA context; processes have one each, which the GPU time-slices
# without MPS: both placements, and two block sizes, to tell where the time goes. The
# processes' exits (their contexts' teardown) come after the clock: `exit s` below.
step "merge: 8 producers writing from device memory" 180 "$accio" bench merge \
    /dev/shm /tmp --source device --producers 8 --placement threads,processes --backend shm \
    --sizes 2M,16M --write-mode direct --reps 3 --keep "$kept" --json "$out/merge-device.json"
step "accio verify (the last merged file from device memory)" 30 "$accio" verify "$kept"
rm -f "$kept"

# The same producer processes with the CUDA MPS daemon, which runs the processes' work in
# one context (skipped where the machine has no MPS).
mps() {
    command -v nvidia-cuda-mps-control >/dev/null || { echo "no nvidia-cuda-mps-control here"; return 0; }
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/accio-mps CUDA_MPS_LOG_DIRECTORY=/tmp/accio-mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d || return 1
    "$accio" bench merge /dev/shm --source device --producers 8 --placement processes \
        --backend shm --sizes 2M --write-mode direct --reps 3 --json "$out/merge-device-mps.json"
    local rc=$?
    echo quit | nvidia-cuda-mps-control
    return $rc
}
export accio out
export -f mps
step "merge: 8 producer processes from device memory, under MPS" 90 bash -c mps

step "GPU tests, Rust (device memory, device RMA and windows over shm and tcp, Producer::write_device)" 150 bash -c \
    "for t in '$dir'/tests/*; do echo \"-- \$t\"; \"\$t\" --test-threads 1 || exit 1; done"
step "GPU tests, Python (CuPy and PyTorch arrays into Producer.write and through vwrite_to/vread_from)" 120 env \
    PYTHONPATH="$dir/py" python3 -m pytest -q -p no:cacheprovider bindings/python/tests/test_cuda.py

step "merge: the same shapes from host memory" 150 "$accio" bench merge \
    /dev/shm /tmp --producers 8 --placement threads,processes --backend shm \
    --sizes 2M,16M --write-mode direct --reps 3 --no-naive --json "$out/merge-host.json"

echo "== merge from device and from host memory, 8 producers"
python3 - "$out/merge-device.json" "$out/merge-host.json" "$out/merge-device-mps.json" <<'PY' || failed+=("merge table")
import json, os, sys
def figs(p):
    return [f for f in json.load(open(p))["figures"] if f["metric"] == "merge"] if os.path.exists(p) else []
dev, host, mps = (figs(p) for p in sys.argv[1:4])
key = lambda f: (f["params"]["path"], f["params"]["placement"], f["params"]["buffer_bytes"],
                 f["params"].get("write_mode"))
hmap, mmap = {key(f): f for f in host}, {key(f): f for f in mps}
print(f"{'path':9} {'producers':9} {'block':>5} {'mode':6} {'device GB/s (min-max)':23} "
      f"{'MPS':>6} {'host':>6} {'fs ceiling':>10} {'dev/ceiling':>11} {'exit s':>7}")
for f in dev:
    s, c, h, m = f["summary"], f.get("ceiling") or {}, hmap.get(key(f)), mmap.get(key(f))
    g = lambda x: "" if x is None else format(x["summary"]["median"], ".3f")
    print(f"{f['params']['path']:9} {f['params']['placement']:9} "
          f"{f['params']['buffer_bytes'] >> 20:>4}M {f['params'].get('write_mode', ''):6} "
          f"{s['median']:6.3f} ({s['min']:.3f}-{s['max']:.3f})    {g(m):>6} {g(h):>6} "
          f"{c.get('value', float('nan')):10.3f} {c.get('ratio', float('nan')):11.1%} "
          f"{'' if f['params'].get('producer_exit_s') is None else format(f['params']['producer_exit_s'], '.3f'):>7}")
PY

if [ "${#failed[@]}" -gt 0 ]; then
    printf 'FAILED: %s\n' "${failed[@]}"
    exit 1
fi
echo "all steps passed"
