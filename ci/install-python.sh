#!/usr/bin/env bash
# Installs what the Python-side tests need: pyarrow, to read accio's Arrow IPC and Parquet
# output with a reader we did not write (crates/merge/tests/pyarrow.rs). Idempotent and
# quiet: does nothing when pyarrow already imports. Debian's python3 is "externally
# managed" (PEP 668), hence --break-system-packages where pip knows the flag.
set -euo pipefail

if ! command -v python3 >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-pip) >/dev/null
    else
        echo "install-python: no python3 and no apt-get; pyarrow tests will fail under ACCIO_REQUIRE_PEER_TOOLS=1" >&2
        exit 0
    fi
fi
if python3 -c 'import pyarrow' >/dev/null 2>&1; then
    echo "install-python: pyarrow $(python3 -c 'import pyarrow; print(pyarrow.__version__)') already installed"
    exit 0
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip) >/dev/null
fi
flags=(--quiet --disable-pip-version-check --no-input)
if python3 -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
    flags+=(--break-system-packages)
fi
python3 -m pip install "${flags[@]}" pyarrow
echo "install-python: pyarrow $(python3 -c 'import pyarrow; print(pyarrow.__version__)') installed"
