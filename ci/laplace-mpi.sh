#!/usr/bin/env bash
# The MPI reference of `accio demo laplace` (benches/peers/laplace_mpi.c) and accio compute
# the same grid bit for bit: small 2D and 3D grids, 2 to 4 ranks, uneven splits, contiguous
# and packed faces; the digests of the final grids must be equal. Installs Open MPI from
# Debian when mpicc is missing. Needs a built accio (cargo build --release -p accio-cli).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenmpi-dev openmpi-bin) >/dev/null
fi
accio="${ACCIO:-target/release/accio}"
[ -x "$accio" ] || cargo build --release -p accio-cli
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
mpicc -O3 -ffp-contract=off -Wall -Werror -o "$out/laplace_mpi" benches/peers/laplace_mpi.c
mpirun=(mpirun --allow-run-as-root --oversubscribe --mca pml_ucx_tls any --mca pml_ucx_devices any)
fails=0
for case in "61x47 3x1 3" "61x47 1x2 2" "61x47 2x2 4" "17x13x11 1x3x1 3" "16x16x16 2x1x2 4"; do
    set -- $case
    ref=$("${mpirun[@]}" -n "$3" "$out/laplace_mpi" -g "$1" -d "$2" -i 12 | awk '/^digest/ {print $2}')
    got=$("$accio" demo laplace --grid "$1" --dims "$2" --ranks "$3" --iters 12 --bind none \
        | sed -n 's/^digest of the final grid: \(0x[0-9a-f]*\).*/\1/p')
    if [ -n "$ref" ] && [ "$ref" = "$got" ]; then
        echo "laplace-mpi: grid $1 dims $2: accio and MPI agree ($got)"
    else
        echo "laplace-mpi: grid $1 dims $2: MPI reference $ref, accio $got: DIFFERENT" >&2
        fails=$((fails + 1))
    fi
done
echo "laplace-mpi: $((5 - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
