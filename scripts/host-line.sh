#!/usr/bin/env bash
# host-line.sh: one line naming the host a comparison ran on, for the top of every table
# (accio's lead over its peers depends on the CPU: vendor, family and model, core count and
# cache sizes), e.g.
#   host: AMD EPYC (AuthenticAMD family 26 model 2), 2 CPUs, caches per instance L1d 48K
#   L2 1M L3 32M, kernel 6.18.0
set -euo pipefail
field() { lscpu 2>/dev/null | sed -n "s/^$1:[[:space:]]*//p" | head -1; }
cache() { lscpu -C 2>/dev/null | awk -v n="$1" '$1 == n { print $2; exit }'; }
model=$(field 'Model name')
[ -n "$model" ] || model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)
caches=""
for c in L1d L2 L3; do
    s=$(cache "$c")
    [ -n "$s" ] && caches="$caches $c $s"
done
echo "host: ${model:-unknown CPU} ($(field 'Vendor ID') family $(field 'CPU family') model $(field 'Model')), $(nproc) CPUs,${caches:+ caches per instance$caches,} kernel $(uname -r)"
