"""The Jacobi solver of ``accio.demo.laplace`` written with mpi4py, for comparison:

    mpirun -n 4 python3 laplace_mpi4py.py --n 4096 --iters 100

The same grid, initial values, kernel (``accio.demo.laplace.Sweep``, imported, so that the
compute is the same code) and output; the halo exchange is what the mpi4py tutorial
teaches: a Cartesian communicator, and per axis two ``Sendrecv`` shifts of contiguous
faces (rows as they are; columns copied into a contiguous buffer and back). Every rank
holds one ghost layer on each side; ``MPI.PROC_NULL`` neighbours at the border make those
calls no-ops. Same flags as the accio demo (``--check`` prints the gathered grid's CRC-32,
which must equal the accio run's).
"""

import sys
import time

import numpy as np
from mpi4py import MPI

from accio.demo.laplace import Sweep, arguments, finish, initial, report, updated


def main(argv=None):
    a = arguments("laplace_mpi4py.py", argv)
    comm = MPI.COMM_WORLD
    dims = a.dims or MPI.Compute_dims(comm.size, 2)
    cart = comm.Create_cart(dims, periods=[False, False], reorder=False)
    cy, cx = cart.Get_coords(cart.rank)
    # The same split as accio.grid: the first (n % d) ranks of an axis own one cell more.
    def split(n, d, c):
        q, r = divmod(n, d)
        return c * q + min(c, r), q + (1 if c < r else 0)

    (sy, ly), (sx, lx) = split(a.n, dims[0], cy), split(a.n, dims[1], cx)
    u = np.empty((ly + 2, lx + 2))
    gy = np.arange(sy - 1, sy + ly + 1).clip(0, a.n - 1)[:, None]
    gx = np.arange(sx - 1, sx + lx + 1).clip(0, a.n - 1)[None, :]
    u[...] = initial(gy, gx, a.n)
    ry, rx = updated(sy, ly, a.n), updated(sx, lx, a.n)
    sweep = Sweep(u, (ry[0] - sy + 1, ry[1] - sy + 1), (rx[0] - sx + 1, rx[1] - sx + 1))
    up, down = cart.Shift(0, 1)
    left, right = cart.Shift(1, 1)
    col_out, col_in = np.empty(ly), np.empty(ly)

    def exchange():
        # Rows are contiguous: sent and received in place.
        cart.Sendrecv(u[ly, 1:-1], dest=down, recvbuf=u[0, 1:-1], source=up)
        cart.Sendrecv(u[1, 1:-1], dest=up, recvbuf=u[ly + 1, 1:-1], source=down)
        # Columns are strided: packed, sent, received, unpacked.
        if right != MPI.PROC_NULL or left != MPI.PROC_NULL:
            col_out[:] = u[1:-1, lx]
            cart.Sendrecv(col_out, dest=right, recvbuf=col_in, source=left)
            if left != MPI.PROC_NULL:
                u[1:-1, 0] = col_in
            col_out[:] = u[1:-1, 1]
            cart.Sendrecv(col_out, dest=left, recvbuf=col_in, source=right)
            if right != MPI.PROC_NULL:
                u[1:-1, lx + 1] = col_in

    exchange()
    cart.Barrier()
    compute = communicate = sync = 0.0
    t0 = time.perf_counter()
    for _ in range(a.iters):
        c0 = time.perf_counter()
        sweep()
        c1 = time.perf_counter()
        if a.phases:
            cart.Barrier()
        c2 = time.perf_counter()
        exchange()
        compute += c1 - c0
        sync += c2 - c1
        communicate += time.perf_counter() - c2
    cart.Barrier()
    total = time.perf_counter() - t0
    # Every rank's phases, averaged (as the accio demo reports them).
    phases = cart.gather((compute, communicate, sync), root=0)
    if cart.rank == 0:
        mean = [sum(p[i] for p in phases) / cart.size for i in range(3)]
        report("mpi4py", a, cart.size, dims, total, mean)
    if a.check:
        blocks = cart.gather((sy, sx, np.ascontiguousarray(u[1:-1, 1:-1])), root=0)
        grid = None
        if cart.rank == 0:
            grid = np.empty((a.n, a.n))
            for by, bx, b in blocks:
                grid[by : by + b.shape[0], bx : bx + b.shape[1]] = b
        finish(grid, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
