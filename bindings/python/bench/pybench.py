"""Python-side figures for scripts/compare-python.sh, measured like `accio bench`.

    python3 pybench.py latency [--size 8] [--batches 15] [--batch-time 0.02]
    python3 pybench.py bw [--size 2M] [--passes 5]
    mpirun -np 2 --bind-to core python3 pybench.py mpi-bw [--size 2M]
    python3 pybench.py rma [--size 2M] [--passes 15]
    python3 pybench.py merge --dir /dev/shm [--workers 8] [--buffers 64] [--size 2M]
    mpirun -np 2 --bind-to core python3 pybench.py mpi-latency [--size 8]

Each prints one JSON object on stdout: {"figure": ..., "unit": ..., "samples": [...],
"median": ...}. Methods (the same as the Rust bench's, see crates/bench):

- latency: ping-pong between this process and a second one it starts (pinned to another
  CPU when there are two; not pinned with --no-pin, as a plain Python process is); every round trip timed on its own, a sample is the median round
  trip of one batch, halved. accio: `send` + `recv_into` over shm. mpi4py: `Send` +
  `Recv` of NumPy buffers, the same batches.
- bw: two-sided bandwidth, a ping-pong of SIZE-byte NumPy arrays between this process and
  a second one (pinned as for latency): passes of N round trips (~0.2 s), GB/s per pass
  (2 x N x SIZE / time). accio: `send` + `recv_into` over shm. mpi4py: `Send` + `Recv`.
- rma: `vwrite_to` of a 2 MiB NumPy array into the peer's window, passes of N writes
  (~0.2 s) closed by fence_mark + fence_wait, GB/s per pass (10^9 B/s). Also `write_to` from a registered
  window (`rma_window`).
- merge: W multiprocessing workers (spawn) connect a Producer each and prepare their
  array; all start together; each writes B blocks and finishes; the clock stops when
  Merger.close() has written the index. GB/s = W*B*S / time.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def size_arg(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(s[:-1] if s[-1:] in "KMG" else s) * mult


def pin(cpu):
    if os.environ.get("PYBENCH_NO_PIN"):
        return
    if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() >= 2:
        try:
            os.sched_setaffinity(0, {cpu % os.cpu_count()})
        except OSError:
            pass


def emit(figure, unit, samples, **extra):
    print(json.dumps({"figure": figure, "unit": unit, "samples": samples,
                      "median": statistics.median(samples), **extra}), flush=True)


def batches_of_rtts(pingpong, batches, batch_time):
    """Warm up, size a batch to `batch_time` seconds, return per-batch median RTT / 2 in us."""
    t = time.perf_counter()
    for _ in range(2000):
        pingpong()
    rtt = (time.perf_counter() - t) / 2000
    iters = max(10, min(100_000, int(batch_time / max(rtt, 1e-9))))
    rtts = [0.0] * iters
    samples = []
    clock = time.perf_counter
    for _ in range(batches):
        t = clock()
        for i in range(iters):
            pingpong()
            now = clock()
            rtts[i] = now - t
            t = now
        samples.append(statistics.median(rtts) / 2 * 1e6)
    return samples, iters


def cmd_latency(a):
    import accio

    addr = f"shm://accio-pybench-{os.getpid()}"
    lst = accio.listen(addr)
    peer = subprocess.Popen([sys.executable, __file__, "_echo", addr])
    pin(0)
    ep = lst.accept(timeout=30)
    msg = bytes(a.size)
    buf = bytearray(max(a.size, 1))
    send, recv_into = ep.send, ep.recv_into

    def pingpong():
        send(msg)
        recv_into(buf)

    samples, iters = batches_of_rtts(pingpong, a.batches, a.batch_time)
    ep.send(b"stop")
    peer.wait(30)
    emit("python accio latency", "us", samples, size=a.size, per_sample=iters)


def passes_of_round_trips(pingpong, size, passes, pass_time):
    """Warm up, size a pass to `pass_time` seconds, return GB/s per pass (both ways)."""
    t = time.perf_counter()
    for _ in range(20):
        pingpong()
    rtt = (time.perf_counter() - t) / 20
    n = max(5, int(pass_time / max(rtt, 1e-9)))
    samples = []
    for _ in range(passes):
        t = time.perf_counter()
        for _ in range(n):
            pingpong()
        samples.append(2 * n * size / (time.perf_counter() - t) / 1e9)
    return samples, n


def cmd_bw(a):
    import accio

    addr = f"shm://accio-pybench-{os.getpid()}"
    lst = accio.listen(addr)
    peer = subprocess.Popen([sys.executable, __file__, "_echo", addr, "--size", str(a.size)])
    pin(0)
    ep = lst.accept(timeout=30)
    src = np.random.randint(0, 255, a.size, dtype=np.uint8)
    dst = np.empty(a.size, dtype=np.uint8)
    send, recv_into = ep.send, ep.recv_into

    def pingpong():
        send(src)
        recv_into(dst)

    samples, n = passes_of_round_trips(pingpong, a.size, a.passes, a.pass_time)
    assert np.array_equal(src, dst)
    ep.send(b"stop")
    peer.wait(30)
    emit("python accio two-sided bw", "GB/s", samples, size=a.size, per_sample=n)


def cmd_mpi_bw(a):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    src = np.random.randint(0, 255, a.size, dtype=np.uint8)
    dst = np.empty(a.size, dtype=np.uint8)
    Send, Recv = comm.Send, comm.Recv
    if comm.Get_rank() == 0:
        def pingpong():
            Send(src, dest=1)
            Recv(dst, source=1)

        samples, n = passes_of_round_trips(pingpong, a.size, a.passes, a.pass_time)
        assert np.array_equal(src, dst)
        comm.Send(np.array([1], dtype=np.uint8), dest=1, tag=7)
        emit("mpi4py two-sided bw", "GB/s", samples, size=a.size, per_sample=n)
    else:
        mpi_echo(comm, dst)


def cmd_echo(a):
    import accio

    pin(1)
    ep = accio.connect(a.addr, timeout=30)
    buf = np.empty(max(a.size, 1 << 20), dtype=np.uint8)
    send, recv_into = ep.send, ep.recv_into
    mv = memoryview(buf)
    while True:
        n = recv_into(buf)
        if n == 4 and bytes(buf[:4]) == b"stop":
            return
        send(mv[:n])


def cmd_mpi_latency(a):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    msg = np.zeros(a.size, dtype=np.uint8)
    buf = np.zeros(a.size, dtype=np.uint8)
    Send, Recv = comm.Send, comm.Recv
    if rank == 0:
        def pingpong():
            Send(msg, dest=1)
            Recv(buf, source=1)

        samples, iters = batches_of_rtts(pingpong, a.batches, a.batch_time)
        comm.Send(np.array([1], dtype=np.uint8), dest=1, tag=7)
        emit("mpi4py latency", "us", samples, size=a.size, per_sample=iters)
    else:
        mpi_echo(comm, buf)


def mpi_echo(comm, buf):
    """Rank 1: sends every message back until rank 0's stop (tag 7)."""
    from mpi4py import MPI

    status = MPI.Status()
    while True:
        comm.Recv(buf, source=0, tag=MPI.ANY_TAG, status=status)
        if status.Get_tag() == 7:
            return
        comm.Send(buf, dest=0)


def cmd_rma(a):
    import accio

    addr = f"shm://accio-pybench-rma-{os.getpid()}"
    lst = accio.listen(addr)
    peer = subprocess.Popen([sys.executable, __file__, "_target", addr, str(a.size)])
    pin(0)
    ep = lst.accept(timeout=30)
    remote = int.from_bytes(ep.recv(timeout=30), "little")
    src = np.full(a.size, 0x5A, dtype=np.uint8)  # faulted in by the fill
    win = ep.register(a.size, "r")
    np.frombuffer(win, dtype=np.uint8)[:] = 0x5A
    out = {}
    for name, write in (("vwrite_to", lambda: ep.vwrite_to(src, remote)),
                        ("write_to", lambda: ep.write_to(win.offset, a.size, remote))):
        # as the Rust bench: an untimed warm-up pass of 64 MiB sets how many writes fill
        # a pass of --pass-time
        warm = max(4, min(4000, (64 << 20) // a.size))
        t = time.perf_counter()
        for _ in range(warm):
            write()
        ep.fence_wait(ep.fence_mark())
        per_write = (time.perf_counter() - t) / warm
        count = max(8, int(a.pass_time / max(per_write, 1e-9)))
        samples = []
        for _ in range(a.passes):
            t = time.perf_counter()
            for _ in range(count):
                write()
            ep.fence_wait(ep.fence_mark())
            samples.append(count * a.size / (time.perf_counter() - t) / 1e9)
        out[name] = samples
    ep.send(b"stop")
    peer.wait(30)
    emit("python accio rma_write_bw vwrite_to", "GB/s", out["vwrite_to"], size=a.size)
    emit("python accio rma_write_bw write_to", "GB/s", out["write_to"], size=a.size)


def cmd_target(a):
    import accio

    pin(1)
    ep = accio.connect(a.addr, timeout=30)
    win = ep.register(a.size, "rw")
    np.frombuffer(win, dtype=np.uint8)[:] = 0  # fault the window in
    ep.send(win.offset.to_bytes(8, "little"))
    ep.recv()


def _merge_worker(addr, size, buffers, ready, go):
    import accio

    p = accio.Producer(addr)
    data = np.full(size, 0x5A, dtype=np.uint8)  # the worker's in-memory buffer, faulted in
    ready.wait()
    go.wait()
    for _ in range(buffers):
        p.write(data)
    p.finish()


def wait_warm(m, workers):
    """As the Rust bench: wait until every producer is connected and the slot count has
    stopped moving (slots lent at connect are registered), so the clock measures the merge."""
    last, steady, deadline = None, 0, time.monotonic() + 30
    while time.monotonic() < deadline and steady < 5:
        s = m.stats()
        now = (s["slots"], s["active"])
        steady = steady + 1 if s["active"] == workers and now == last else 0
        last = now
        time.sleep(0.002)


def cmd_merge(a):
    import multiprocessing as mp

    import accio

    ctx = mp.get_context("spawn")
    samples = []
    for rep in range(a.repetitions):
        path = os.path.join(a.dir, f"accio-pybench-{os.getpid()}-{rep}.accio")
        addr = f"shm://accio-pybench-merge-{os.getpid()}-{rep}"
        m = accio.Merger(addr, path, budget=a.budget, sync="close")
        ready, go = ctx.Barrier(a.workers + 1), ctx.Barrier(a.workers + 1)
        ws = [ctx.Process(target=_merge_worker, args=(addr, a.size, a.buffers, ready, go))
              for _ in range(a.workers)]
        for w in ws:
            w.start()
        ready.wait()
        wait_warm(m, a.workers)
        t = time.perf_counter()
        go.wait()
        # close() returns once every producer finished and the index is written: the
        # merge is done. The workers' interpreters shut down after that, untimed (8 of
        # them took 15% more on top of a 1 GiB merge on 2 vCPUs).
        s = m.close()
        secs = time.perf_counter() - t
        for w in ws:
            w.join()
        os.remove(path)
        total = a.workers * a.buffers * a.size
        if s["payload_bytes"] != total or any(w.exitcode for w in ws):
            sys.exit(f"pybench merge: wrote {s['payload_bytes']} of {total} bytes")
        samples.append(total / secs / 1e9)
    emit("python accio merge", "GB/s", samples, workers=a.workers, buffers=a.buffers,
         size=a.size, dir=a.dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("latency", "mpi-latency"):
        p = sub.add_parser(name)
        p.add_argument("--size", type=size_arg, default=8)
        if name == "latency":
            p.add_argument("--no-pin", action="store_true", help="leave both processes unpinned")
        p.add_argument("--batches", type=int, default=11)
        p.add_argument("--batch-time", type=float, default=0.08)
    for name in ("rma", "bw", "mpi-bw"):
        p = sub.add_parser(name)
        p.add_argument("--size", type=size_arg, default=2 << 20)
        p.add_argument("--passes", type=int, default=5)
        p.add_argument("--pass-time", type=float, default=0.2)
    p = sub.add_parser("merge")
    p.add_argument("--dir", default="/dev/shm")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--buffers", type=int, default=64)
    p.add_argument("--size", type=size_arg, default=2 << 20)
    p.add_argument("--budget", type=size_arg, default=256 << 20)
    p.add_argument("--repetitions", type=int, default=1)
    p = sub.add_parser("_echo")
    p.add_argument("addr")
    p.add_argument("--size", type=size_arg, default=1 << 20)
    p = sub.add_parser("_target")
    p.add_argument("addr")
    p.add_argument("size", type=int)
    a = ap.parse_args()
    if getattr(a, "no_pin", False):
        os.environ["PYBENCH_NO_PIN"] = "1"  # inherited by the echo process
    {"latency": cmd_latency, "mpi-latency": cmd_mpi_latency, "rma": cmd_rma,
     "bw": cmd_bw, "mpi-bw": cmd_mpi_bw,
     "merge": cmd_merge, "_echo": cmd_echo, "_target": cmd_target}[a.cmd](a)


if __name__ == "__main__":
    main()
