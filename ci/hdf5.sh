#!/usr/bin/env bash
# The HDF5 sink (accio-merge's `hdf5` feature): installs the system's libhdf5 (Debian's
# libhdf5-dev, which `hdf5-metno` links) and h5py, then runs crates/merge/tests/hdf5.rs with
# h5py required: the merged file read mid-run, after close, and after the merger was killed.
# Idempotent; about 2 minutes from a warm target/ (the hdf5 crates build once).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! dpkg -s libhdf5-dev >/dev/null 2>&1 || ! command -v pkg-config >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libhdf5-dev pkg-config) >/dev/null
fi
ci/install-python.sh
if ! python3 -c 'import h5py, numpy' >/dev/null 2>&1; then
    flags=(--quiet --disable-pip-version-check --no-input)
    if python3 -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
        flags+=(--break-system-packages)
    fi
    python3 -m pip install "${flags[@]}" h5py numpy
fi
echo "hdf5: libhdf5 $(dpkg-query -W -f='${Version}' libhdf5-dev), h5py $(python3 -c 'import h5py; print(h5py.__version__)')"
ACCIO_REQUIRE_PEER_TOOLS=1 cargo test --release -p accio-merge --features hdf5 --test hdf5
cargo clippy --release -p accio-merge --features hdf5 --all-targets -- -D warnings
