#!/usr/bin/env bash
# Builds and installs the Python package (`pip install ./bindings/python`) the way a user
# does, then runs its pytest suite: two processes, threads and multiprocessing workers
# through the merger, pyarrow reading the merged Arrow file, NumPy zero-copy windows,
# exceptions, Ctrl-C. Installs what it needs (python3 + pip from Debian if missing; maturin,
# numpy, pyarrow, pandas, pytest from PyPI). Fails if pytest collects no test (exit 5).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-pip python3-dev) >/dev/null
fi
flags=(--disable-pip-version-check --no-input)
if python3 -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
    flags+=(--break-system-packages)
fi
python3 -m pip install --quiet "${flags[@]}" "maturin>=1.5,<2" numpy pyarrow pandas pytest

# Share the workspace's target directory: the accio and Arrow crates built by
# `cargo test --workspace --release` are reused instead of compiled a second time.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
start=$(date +%s)
# -v streams cargo's "Compiling ..." lines (pip is silent for minutes without it), as the
# README's install line does.
python3 -m pip install -v "${flags[@]}" --no-build-isolation --force-reinstall --no-deps \
    ./bindings/python
echo "python-bindings: built and installed in $(( $(date +%s) - start )) s"

# The wheel's extension is stripped (pyproject.toml: [tool.maturin] strip = true): no
# debug sections, no symbol table beyond the dynamic one.
so=$(python3 -c 'import accio._accio as m; print(m.__file__)')
echo "python-bindings: $so is $(stat -c %s "$so") bytes"
if readelf -S "$so" | grep -qE '\.debug_|\.symtab'; then
    echo "python-bindings: $so is not stripped" >&2
    exit 1
fi

# The crate is outside the workspace, so the workspace's fmt and clippy steps miss it; its
# lints run here, on the stable-ABI build (one wheel for CPython >= 3.11), which must keep
# compiling too; with the cuda feature (CUDA arrays into Producer.write), which the GPU
# machine's run uses.
(cd bindings/python && cargo fmt --check && cargo clippy --release --quiet --all-targets --features abi3,cuda -- -D warnings)

# The worlds of tests/test_world.py are launched by `accio run`: the CLI the workspace's
# tests built (a missing binary then fails those tests instead of skipping them).
export ACCIO_BIN="$CARGO_TARGET_DIR/release/accio"
[ -x "$ACCIO_BIN" ] || cargo build --release -p accio-cli

# Run from outside the source tree so `import accio` is the installed package.
cd bindings/python/tests
rc=0
python3 -m pytest -q -p no:cacheprovider . || rc=$?
if [ "$rc" -eq 5 ]; then
    echo "python-bindings: pytest collected no tests" >&2
    exit 1
fi
exit "$rc"
