#!/usr/bin/env bash
# Model-checks the shm ring with loom (crates.io `loom`): the producer/consumer handoff
# across the wrap, the futex sleep/wake protocol (no lost wake-up) and the last look at the
# ring after a peer's close (no lost last message). The models in
# crates/shm/src/loom_models.rs run the real ring and link code with loom's atomics, a loom
# futex and a loom cell per line of ring data (crates/shm/src/sync.rs).
#
# Run from anywhere:  ci/loom.sh
# Bound the search with LOOM_MAX_PREEMPTIONS (default 4: about 3 s here; 5 takes about 15 s); loom's other LOOM_* variables
# apply too. Builds in target/loom (or $CARGO_TARGET_DIR/loom), so the `--cfg loom`
# build does not invalidate the normal one.
set -euo pipefail
cd "$(dirname "$0")/.."

export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-4}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
export RUSTFLAGS="${RUSTFLAGS:-} --cfg loom"
echo "loom: accio-shm models, LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS"
cargo test --release -p accio-shm --lib loom_models -- --test-threads=1
