#!/usr/bin/env bash
# Several "hosts" on one machine: two network + UTS namespaces joined by a veth pair
# (addresses 10.77.0.1 and 10.77.0.2 on the veth ends only), and mpirun, started inside the
# first, launching ranks into both through a small rsh agent that enters the namespace of
# the host it is asked for (MACHINE_NOTES item 8). Removes everything it made on exit.
#
# Usage: scripts/netns-world.sh [-n RANKS] [--] PROGRAM [ARGS...]
#   RANKS (default 4) are split evenly over the two hosts. Where namespaces cannot be made
#   (not root, no `ip`, no unshare), prints "skipped: REASON" and exits 0.
# Environment: MPIRUN_FLAGS adds mpirun options.
set -euo pipefail

n=4
if [ "${1:-}" = "-n" ]; then n=$2; shift 2; fi
if [ "${1:-}" = "--" ]; then shift; fi
[ $# -ge 1 ] || { echo "usage: $0 [-n RANKS] PROGRAM [ARGS...]" >&2; exit 2; }

skip() { echo "skipped: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "creating network namespaces needs root"
command -v ip >/dev/null || skip "no ip command (iproute2)"
command -v unshare >/dev/null || skip "no unshare command (util-linux)"
command -v mpirun >/dev/null || skip "no mpirun (openmpi-bin)"

tag="accio$$"
h1="$tag-h1"
h2="$tag-h2"
tmp=$(mktemp -d)
cleanup() {
    ip netns del "$h1" 2>/dev/null || true
    ip netns del "$h2" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

ip netns add "$h1" 2>"$tmp/err" || skip "cannot create a network namespace: $(cat "$tmp/err")"
ip netns add "$h2"
ip link add e0 netns "$h1" type veth peer name e0 netns "$h2" 2>"$tmp/err" \
    || skip "cannot create a veth pair: $(cat "$tmp/err")"
ip -n "$h1" addr add 10.77.0.1/24 dev e0
ip -n "$h2" addr add 10.77.0.2/24 dev e0
for h in "$h1" "$h2"; do
    ip -n "$h" link set lo up
    ip -n "$h" link set e0 up
done
# Each host gets its own UTS namespace and host name as well.
unshare --uts true 2>"$tmp/err" || skip "cannot create a UTS namespace: $(cat "$tmp/err")"

# The rsh agent: mpirun calls it as `agent HOST COMMAND...` for the remote host.
cat >"$tmp/agent" <<AGENT
#!/bin/sh
host=\$1; shift
case "\$host" in
    10.77.0.1) ns=$h1; name=host1 ;;
    10.77.0.2) ns=$h2; name=host2 ;;
    *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name; \$*"
AGENT
chmod +x "$tmp/agent"

per=$(( (n + 1) / 2 ))
rest=$(( n - per ))
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
cmd=(mpirun "${root[@]}" -n "$n" --host "10.77.0.1:$per,10.77.0.2:$rest"
    --mca plm_rsh_agent "$tmp/agent"
    --mca btl_tcp_if_include e0 --mca oob_tcp_if_include e0
    --mca pml_ucx_tls any --mca pml_ucx_devices any --mca osc ucx
    ${MPIRUN_FLAGS:-} "$@")
# mpirun's own host: the first namespace, host name host1.
ip netns exec "$h1" unshare --uts sh -c 'hostname host1; exec "$@"' sh "${cmd[@]}"
