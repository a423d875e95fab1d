#!/usr/bin/env bash
# Installs Debian's headless-capable Chromium for the HTML report test
# (crates/report/tests/html_chromium.rs), which CI runs with ACCIO_REQUIRE_PEER_TOOLS=1.
# Idempotent: does nothing when chromium is already on PATH. Same locally and in CI.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
    echo "install-chromium: $(chromium --version 2>/dev/null | head -n1) already installed"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-chromium: no apt-get here; install chromium by hand" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
echo "install-chromium: installing chromium from Debian"
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
echo "install-chromium: $(chromium --version 2>/dev/null | head -n1)"
