#!/usr/bin/env bash
# Runs every cargo-fuzz target for a while (default 30 s each; FUZZ_SECONDS overrides).
# Needs a nightly toolchain and cargo-fuzz; installs cargo-fuzz from crates.io when missing.
# Where either cannot be had, says so and exits 0: the stable randomized decoder tests in
# `cargo test` still run. A crash found by the fuzzer fails the script.
set -uo pipefail
cd "$(dirname "$0")/.."
secs="${FUZZ_SECONDS:-30}"

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: skipped: no nightly toolchain (cargo-fuzz needs one)"
    exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    if ! timeout 600 cargo install --locked cargo-fuzz >/tmp/accio-cargo-fuzz-install.log 2>&1; then
        echo "fuzz: skipped: cargo-fuzz could not be installed (see /tmp/accio-cargo-fuzz-install.log)"
        exit 0
    fi
fi
set -e
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for target in $(cargo +nightly fuzz list); do
    echo "fuzz: $target for ${secs}s"
    status=0
    cargo +nightly fuzz run "$target" -- -max_total_time="$secs" -print_final_stats=1 \
        >"$log" 2>&1 || status=$?
    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==|SUMMARY|Done)" "$log" || true
    # A crash fails the script, with what the fuzzer said about it. (Read from the log:
    # under pipefail, a status taken from a pipeline ending in `|| true` is always 0.)
    if [ "$status" -ne 0 ]; then
        grep -E -A12 "panicked|ERROR|Failing input" "$log" | head -60
        echo "fuzz: $target failed (exit $status)"
        exit 1
    fi
done
