"""Every rank talks to every other rank: ``accio run -n 4 python3 -m accio.demo.world``.

For each pair, over the endpoint ``World.endpoint`` gives (the backend the rule picks):
a message each way, then a one-sided write of ``--bytes`` bytes into the peer's window,
signalled with ``fence_signal`` and checked by the peer. Prints one line per pair and rank:

    rank 0 <-> rank 1: shm ok (same node (...))

and exits 1 on the first byte that differs. Runs the same under ``mpirun -n 4`` when accio
was built with MPI.
"""

from __future__ import annotations

import argparse
import sys

import accio


def say(line: str) -> None:
    """Prints one line in one write, so that lines of ranks sharing a terminal or a pipe
    do not interleave mid-line (``print`` writes the newline separately)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _pattern(n: int, rank: int) -> bytes:
    return bytes((i * 7 + rank) & 0xFF for i in range(n))


def exchange(world: accio.World, peer: int, nbytes: int) -> str:
    """One message each way and a checked RMA write each way with ``peer``; returns the
    backend used."""
    ep = world.endpoint(peer)
    win = ep.register(8 + nbytes, "rw")
    ep.send(win.offset.to_bytes(8, "little"))
    remote = int.from_bytes(ep.recv(timeout=30), "little")
    ep.vwrite_to(_pattern(nbytes, world.rank), remote + 8)
    ep.fence_signal(remote=(remote, 1))
    win.wait_u64(win.offset, 1, timeout=30)
    got = bytes(memoryview(win)[8 : 8 + nbytes])
    if got != _pattern(nbytes, peer):
        raise SystemExit(f"rank {world.rank} <- rank {peer} over {ep.backend}: RMA data differs")
    ep.send(b"done")
    ep.recv(timeout=30)
    return ep.backend


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python3 -m accio.demo.world",
        description="Every pair of ranks exchanges messages and a checked RMA write.",
    )
    ap.add_argument("--bytes", type=int, default=1 << 16, help="bytes of each RMA write")
    a = ap.parse_args(argv)
    if a.bytes < 1:
        ap.error(f"--bytes {a.bytes}: must be 1 or more")
    with accio.World() as world:
        me = world.rank
        say(f"rank {me} of {world.size} on {world.node}, node shared with ranks {world.node_ranks}")
        # Every pair in one order all ranks agree on, so that both ends of a pair meet.
        for x in range(world.size):
            for y in range(x + 1, world.size):
                if me not in (x, y):
                    continue
                peer = y if me == x else x
                backend = exchange(world, peer, a.bytes)
                scheme, reason = world.choice(peer)
                assert backend == scheme, (backend, scheme)
                say(f"rank {me} <-> rank {peer}: {backend} ok ({reason})")
        world.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())
