"""The floor under a Jacobi exchange on more ranks than cores, for compare-python.sh:

    accio run -n 4 python3 barrier_floor.py accio
    mpirun -n 4 --oversubscribe python3 barrier_floor.py mpi4py

Each iteration does NumPy work of about a Jacobi sweep's length, a barrier, then times a
second barrier right after the first: no data moves, yet every rank must run once more,
and on a node with fewer cores than ranks that means waiting for the scheduler to run the
ranks that share a core. Prints one JSON line: the mean over ranks of each rank's median.
"""

import json
import sys
import time

import numpy as np

ITERS = 30


def main():
    mode = sys.argv[1]
    a = np.random.default_rng(1).random((2048, 4096))
    if mode == "mpi4py":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, size, barrier = comm.rank, comm.size, comm.Barrier
    else:
        import accio

        world = accio.World()
        rank, size, barrier = world.rank, world.size, world.barrier
    times = []
    for _ in range(ITERS):
        np.multiply(a, 1.0000001, out=a)
        np.add(a, 0.0, out=a)
        barrier()
        t0 = time.perf_counter()
        barrier()
        times.append(time.perf_counter() - t0)
    med = float(np.median(times))
    if mode == "mpi4py":
        meds = comm.gather(med, root=0)
    elif rank != 0:
        world.endpoint(0).send(np.array([med]))
    else:
        meds = [med]
        for r in range(1, size):
            x = np.empty(1)
            world.endpoint(r).recv_into(x, timeout=60)
            meds.append(float(x[0]))
    if rank == 0:
        sys.stdout.write(json.dumps({"impl": mode, "ranks": size, "second_barrier_ms": 1e3 * sum(meds) / size,
                                     "per_rank_ms": [1e3 * m for m in meds]}) + "\n")
    if mode != "mpi4py":
        world.close()


if __name__ == "__main__":
    main()
