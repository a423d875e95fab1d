#!/usr/bin/env bash
# Installs what the Python-side tests need (pyarrow for reading accio's Arrow/Parquet
# output with a reader we did not write). Filled in with the merging file service.
set -euo pipefail
echo "install-python: nothing to install yet"
