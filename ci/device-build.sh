#!/usr/bin/env bash
# Builds, here (Rust needed), what the GPU machine's run (ci/device.sh) takes along: the
# stripped accio binary with --features cuda, the test binaries that exercise GPU memory,
# and the Python package with its extension (abi3, --features cuda). Into DIR (default
# .dev, which .git/info/exclude should list so that the device tool can carry it):
#   bash ci/device-build.sh [DIR]
# then on the GPU machine: bash ci/device.sh DIR [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.dev}
mkdir -p "$dir/tests" "$dir/py"

cargo build --release -p accio-cli --features cuda
strip -o "$dir/accio" target/release/accio

# The integration tests whose GPU branches run there (elsewhere they say "skipped").
tests=$(cargo test --release --no-run \
    --features accio-merge/cuda,accio-device/cuda,accio/cuda,accio-testkit/cuda \
    -p accio-device --test memory -p accio-merge --test device -p accio --test device \
    -p accio-testkit --test cuda \
    --message-format=json \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        # "path+file:///…/crates/merge#accio-merge@0.1.0"; "…/crates/accio#0.1.0" when the
        # name is the folder name; older cargo: "accio-merge 0.1.0 (…)".
        pid = m["package_id"]
        url, _, frag = pid.partition("#")
        pkg = frag.split("@")[0] if "@" in frag else url.rstrip("/").split("/")[-1] if frag else pid.split()[0]
        print(pkg + "." + m["target"]["name"], m["executable"])')
while read -r name exe; do
    strip -o "$dir/tests/$name" "$exe"
done <<<"$tests"

(cd bindings/python && cargo build --release --features cuda,abi3)
rm -rf "$dir/py/accio"
cp -r bindings/python/python/accio "$dir/py/accio"
find "$dir/py/accio" -name __pycache__ -prune -exec rm -rf {} +
strip -o "$dir/py/accio/_accio.abi3.so" bindings/python/target/release/lib_accio.so
du -sh "$dir"
