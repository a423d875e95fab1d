"""A Jacobi solver with NumPy on the ranks of a world: seed 001's Laplace workload.

    accio run -n 4 python3 -m accio.demo.laplace --n 4096 --iters 100

A grid ``X`` (``--n`` × ``--n`` float64) starts at 1.0 on its border and pseudo-random
inside. Each iteration adds ``coef`` times the 5-point Laplacian of ``X`` to every cell
that is not on the border, then the ranks exchange halos with ``accio.grid.HaloExchange``
(over shared memory; a large array lives in private memory on huge pages where the host
gives them to private memory only, and its ghosts are copied in from a staging area). Each
cell is computed by the same expression whatever rank owns it, so every decomposition
gives the grid of one rank bit for bit: ``--check`` gathers it on rank 0 and prints its
CRC-32, ``--out FILE.npy`` saves it.

Rank 0 prints the time per iteration and its split, averaged over the ranks: compute (the NumPy sweep),
communicate (moving the faces) and sync (waiting for the neighbours to be done with their
ghosts). A rank whose neighbour computes longer waits for it in sync (or, in mpi4py, inside
``Sendrecv``); ``--phases`` puts a barrier after each sweep, timed as sync, so that
communicate is the exchange alone in both programs. ``bench/laplace_mpi4py.py`` beside the package's sources is the same program
with mpi4py (``Sendrecv`` of contiguous faces), run with ``mpirun``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zlib

import numpy as np

import accio
import accio.grid

COEF = 0.2


def initial(gy: np.ndarray, gx: np.ndarray, n: int) -> np.ndarray:
    """The starting value of the cells at global rows ``gy`` and columns ``gx``
    (broadcast): 1.0 on the border, a fixed pseudo-random value in [0, 1) inside."""
    h = (gy.astype(np.uint64) * np.uint64(n) + gx.astype(np.uint64)) * np.uint64(0x9E3779B1)
    v = (h % np.uint64(1 << 32)).astype(np.float64) / float(1 << 32)
    border = (gy == 0) | (gy == n - 1) | (gx == 0) | (gx == n - 1)
    return np.where(border, 1.0, v)


def updated(start: int, owned: int, n: int) -> tuple[int, int]:
    """The owned cells of one axis that are updated (all but the grid's border), as a
    half-open range of global indices."""
    return max(start, 1), min(start + owned, n - 1)


class Sweep:
    """``X += coef · ∇²X`` on rows ``r`` and columns ``c`` (local, half-open) of ``u``,
    with its temporaries made once: (((up + down) + left) + right − 4·X) · coef + X for
    every cell, the same order on every rank."""

    def __init__(self, u: np.ndarray, r: tuple[int, int], c: tuple[int, int], coef: float = COEF):
        self.u, self.coef = u, coef
        (r0, r1), (c0, c1) = r, c
        self.mid = u[r0:r1, c0:c1]
        self.up, self.down = u[r0 - 1 : r1 - 1, c0:c1], u[r0 + 1 : r1 + 1, c0:c1]
        self.left, self.right = u[r0:r1, c0 - 1 : c1 - 1], u[r0:r1, c0 + 1 : c1 + 1]
        self.lap = np.empty(self.mid.shape)
        self.tmp = np.empty(self.mid.shape)

    def __call__(self) -> None:
        lap, tmp = self.lap, self.tmp
        np.add(self.up, self.down, out=lap)
        lap += self.left
        lap += self.right
        np.multiply(self.mid, 4.0, out=tmp)
        lap -= tmp
        lap *= self.coef
        self.mid += lap


def report(impl: str, a: argparse.Namespace, ranks: int, dims, total: float, phases, array: str = "numpy") -> None:
    """Prints the time per iteration (as text, or one JSON line with ``--json``): `total`
    seconds of the loop and `phases`, the (compute, communicate, sync) seconds averaged
    over the ranks; `array`: where rank 0's array lives."""
    ms = 1e3 / a.iters
    compute, communicate, sync = phases
    line = {
        "impl": impl,
        "n": a.n,
        "ranks": ranks,
        "dims": "x".join(map(str, dims)),
        "iters": a.iters,
        "total_ms": total * ms,
        "compute_ms": compute * ms,
        "communicate_ms": communicate * ms,
        "sync_ms": sync * ms,
        "array": array,
    }
    if a.json:
        sys.stdout.write(json.dumps(line) + "\n")
    else:
        sys.stdout.write(
            f"laplace {line['n']}x{line['n']} f64, {line['ranks']} rank(s) ({line['dims']}), "
            f"{line['iters']} iterations ({line['impl']}): "
            f"{line['total_ms']:.3f} ms/iter: compute {line['compute_ms']:.3f}, "
            f"communicate {line['communicate_ms']:.3f}, sync {line['sync_ms']:.3f}\n"
        )
    sys.stdout.flush()


def finish(grid: np.ndarray | None, a: argparse.Namespace) -> None:
    """On rank 0 with the gathered grid: prints its CRC-32 and saves it where asked."""
    if grid is None:
        return
    sys.stdout.write(f"grid crc32 {zlib.crc32(np.ascontiguousarray(grid).data):08x}\n")
    sys.stdout.flush()
    if a.out:
        np.save(a.out, grid)


def arguments(prog: str, argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=1024, help="grid cells per side (default 1024)")
    ap.add_argument("--iters", type=int, default=50, help="iterations (default 50)")
    ap.add_argument("--dims", default=None, help="ranks per axis, as RxC (default: chosen)")
    ap.add_argument("--check", action="store_true", help="gather the grid on rank 0, print its CRC-32")
    ap.add_argument("--out", default=None, help="save the gathered grid to this .npy file")
    ap.add_argument("--json", action="store_true", help="print the timing as one JSON line")
    ap.add_argument(
        "--phases",
        action="store_true",
        help="a barrier after each sweep, timed as sync, so that communicate is the exchange "
        "alone (not the wait for a slower neighbour's sweep)",
    )
    ap.add_argument(
        "--array",
        default="auto",
        choices=["auto", "shared", "private"],
        help="accio: where each rank's array lives (accio.grid.HaloExchange's array=; "
        "default auto: private, on huge pages, for arrays of 8 MiB and more where the host "
        "gives huge pages to private memory only)",
    )
    a = ap.parse_args(argv)
    if a.n < 3 or a.iters < 1:
        ap.error("--n must be at least 3 and --iters at least 1")
    if a.dims is not None:
        try:
            a.dims = [int(x) for x in a.dims.lower().split("x")]
            assert len(a.dims) == 2 and min(a.dims) > 0
        except (ValueError, AssertionError):
            ap.error(f"--dims {a.dims}: not RxC with R, C >= 1")
    a.check = a.check or a.out is not None
    return a


def main(argv: list[str] | None = None) -> int:
    a = arguments("python3 -m accio.demo.laplace", argv)
    with accio.World() as world:
        ex = accio.grid.HaloExchange(world, (a.n, a.n), dims=a.dims, array=a.array)
        u = ex.array
        (hy, hx), (sy, sx), (ly, lx) = ex.halo, ex.start, ex.owned
        gy = np.arange(sy - hy, sy + ly + hy).clip(0, a.n - 1)[:, None]
        gx = np.arange(sx - hx, sx + lx + hx).clip(0, a.n - 1)[None, :]
        u[...] = initial(gy, gx, a.n)
        ry, rx = updated(sy, ly, a.n), updated(sx, lx, a.n)
        sweep = Sweep(u, (ry[0] - sy + hy, ry[1] - sy + hy), (rx[0] - sx + hx, rx[1] - sx + hx))
        ex.exchange()
        world.barrier()
        compute = communicate = sync = 0.0
        t0 = time.perf_counter()
        for _ in range(a.iters):
            c0 = time.perf_counter()
            sweep()
            c1 = time.perf_counter()
            compute += c1 - c0
            if a.phases:
                world.barrier()
                sync += time.perf_counter() - c1
                s, c = ex.exchange()
                communicate += s + c  # after the barrier: the exchange's own handshake
            else:
                s, c = ex.exchange()
                sync += s
                communicate += c
        world.barrier()
        total = time.perf_counter() - t0
        # Every rank's phases, averaged on rank 0: ranks sharing cores see very different
        # waits (the one the scheduler favours hardly waits), so one rank's would mislead.
        mine = np.array([compute, communicate, sync])
        if world.rank != 0:
            world.endpoint(0).send(mine)
        else:
            for r in range(1, world.size):
                other = np.empty(3)
                world.endpoint(r).recv_into(other, timeout=60)
                mine += other
            report("accio", a, world.size, ex.dims, total, mine / world.size, ex.array_memory)
        if a.check:
            finish(gather(world, ex, a.n), a)
    return 0


def gather(world: accio.World, ex: accio.grid.HaloExchange, n: int) -> np.ndarray | None:
    """The whole grid on rank 0 (None elsewhere): every rank sends its owned cells."""
    mine = np.ascontiguousarray(ex.interior)
    if world.rank != 0:
        ep = world.endpoint(0)
        ep.send(np.array(ex.start + ex.owned, dtype=np.int64))
        ep.send(mine)
        return None
    grid = np.empty((n, n))
    (sy, sx), (ly, lx) = ex.start, ex.owned
    grid[sy : sy + ly, sx : sx + lx] = mine
    for r in range(1, world.size):
        ep = world.endpoint(r)
        sy, sx, ly, lx = (int(v) for v in np.frombuffer(ep.recv(timeout=60), dtype=np.int64))
        block = np.empty((ly, lx))
        ep.recv_into(block, timeout=60)
        grid[sy : sy + ly, sx : sx + lx] = block
    return grid


if __name__ == "__main__":
    sys.exit(main())
