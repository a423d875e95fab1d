#!/usr/bin/env bash
# The GPU machine's run (no Rust, no network there): accio's GPU figures beside the CUDA C
# reference, same machine, same run. Build the binary elsewhere:
#   cargo build --release -p accio-cli --features cuda && strip -o accio target/release/accio
# then, from the repository root on the GPU machine (nvcc and python3 on PATH):
#   bash ci/device.sh ./accio [OUT_DIR]        (OUT_DIR defaults to $OUT, else ./device-out)
# Extra flags for `accio bench device` (e.g. --quick) go in ACCIO_DEVICE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
accio=$(realpath "${1:?usage: ci/device.sh PATH_TO_ACCIO [OUT_DIR]}")
out=${2:-${OUT:-device-out}}
mkdir -p "$out"

echo "== node"
nvidia-smi --query-gpu=index,name,pci.bus_id,pcie.link.gen.max,pcie.link.width.max,memory.total \
    --format=csv || true
"$accio" info | tee "$out/info.txt"

echo "== accio bench device"
# shellcheck disable=SC2086
"$accio" bench device --json "$out/accio-device.json" ${ACCIO_DEVICE_ARGS:-} | tee "$out/accio-device.txt"

echo "== CUDA C reference (benches/peers/nvbw_ref.cu)"
nvcc --version | tail -1
nvcc -O2 -o "$out/nvbw_ref" benches/peers/nvbw_ref.cu
"$out/nvbw_ref" 0 5 | tee "$out/nvbw_ref.jsonl"

echo "== side by side (GPU 0)"
python3 - "$out/accio-device.json" "$out/nvbw_ref.jsonl" <<'EOF'
import json, sys
acc = json.load(open(sys.argv[1]))["figures"]
ref = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
gpu0 = acc[0]["params"]["gpu"] if acc else None
mine = {(f["metric"], f["params"]["memory"], f["params"]["size"]): f
        for f in acc if f["bench"] == "device" and f["params"]["gpu"] == gpu0}
print(f"{'metric':12} {'memory':9} {'size':>10} {'accio':>9} {'ref':>9} {'vs ref':>9} {'of ceiling':>10}")
for r in ref:
    f = mine.get((r["metric"], r["memory"], r["size"]))
    if f is None:
        continue
    a, b = f["summary"]["median"], r["value"]
    ratio = b / a if r["unit"] == "us" else a / b  # > 1: accio better
    c = (f.get("ceiling") or {}).get("ratio")
    print(f"{r['metric']:12} {r['memory']:9} {r['size']:>10} {a:9.3f} {b:9.3f} {ratio:9.3f} "
          f"{'' if c is None else f'{c:10.1%}'}  {r['unit']}")
print("vs ref: accio's rate / the reference's (latency: the reference's time / accio's); "
      "above 1 accio is faster. of ceiling: accio's share of its ceiling (PCIe link, memory).")
EOF
