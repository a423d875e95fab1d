"""accio.World: Python programs as ranks of a world launched by `accio run`."""

import os
import subprocess
import sys
import textwrap

import pytest

import accio


def run(accio_bin, n, script, *args, env=None, timeout=60):
    """`accio run -n N python3 -c SCRIPT ARGS`; returns the CompletedProcess."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(
        [accio_bin, "run", "-n", str(n), "--", sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        env=e,
        timeout=timeout,
    )


def test_four_ranks_reach_every_other_rank_over_the_backend_the_rule_picks(accio_bin):
    e = dict(os.environ)
    p = subprocess.run(
        [accio_bin, "run", "-n", "4", sys.executable, "-m", "accio.demo.world", "--bytes", "100000"],
        capture_output=True,
        text=True,
        timeout=60,
        env=e,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    pairs = [l for l in lines if "<->" in l]
    assert len(pairs) == 12, p.stdout
    for a in range(4):
        for b in range(4):
            if a != b:
                assert any(l.startswith(f"rank {a} <-> rank {b}: shm ok (same node ") for l in pairs), (a, b, p.stdout)
    assert sum(l.startswith("rank ") and " of 4 on " in l for l in lines) == 4


def test_the_rule_can_be_overridden_and_says_why(accio_bin):
    p = subprocess.run(
        [accio_bin, "run", "-n", "3", sys.executable, "-m", "accio.demo.world", "--bytes", "5000"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, ACCIO_TRANSPORT="tcp"),
    )
    assert p.returncode == 0, p.stderr
    pairs = [l for l in p.stdout.splitlines() if "<->" in l]
    assert len(pairs) == 6, p.stdout
    assert all(": tcp ok (" in l and "ACCIO_TRANSPORT" in l for l in pairs), p.stdout


def test_rank_size_cached_endpoints_barrier_and_numpy_into_the_callers_buffer(accio_bin):
    script = """
        import sys
        import time
        import numpy as np
        import accio

        with accio.World() as w:
            me, n = w.rank, w.size
            assert repr(w) == f"<accio.World rank {me} of {n}>"
            right, left = (me + 1) % n, (me - 1) % n
            # Lower rank connects first; both ends of each pair call endpoint.
            for p in sorted({right, left}):
                w.endpoint(p)
            ep = w.endpoint(right)
            assert w.endpoint(right) is ep  # cached: one connection per peer
            assert w.choice(right)[0] == ep.backend == "shm"
            # A ring shift of 2 MiB NumPy arrays, received straight into the caller's array.
            out = np.full(1 << 18, me, dtype=np.float64)
            got = np.zeros_like(out)
            ep.send(out)
            assert w.endpoint(left).recv_into(got, timeout=30) == out.nbytes
            assert (got == left).all()
            # Nobody leaves a barrier before the last rank enters it.
            time.sleep(0.3 * me)
            entered = time.time()
            w.barrier(timeout=30)
            left_at = time.time()
            # One write per line: print() writes the newline apart, and ranks share stdout.
            sys.stdout.write(f"{me} {entered:.6f} {left_at:.6f}\\n")
            sys.stdout.flush()
            # Arguments are checked, naming the call and the rank.
            for bad, text in [(n, "outside the world of"), (me, "is this rank"), (-1, "is negative")]:
                try:
                    w.endpoint(bad)
                except accio.InvalidArgument as e:
                    assert "World.endpoint: rank=" in str(e) and text in str(e), str(e)
                else:
                    raise AssertionError(f"endpoint({bad}) did not raise")
            # A closed endpoint is made anew by the next call (collective again).
            ep.close()
            w.endpoint(left).close()
            for p in sorted({right, left}):
                w.endpoint(p)
            w.endpoint(right).send(b"again %d" % me)
            assert w.endpoint(left).recv(timeout=30) == b"again %d" % left
            w.barrier()
        try:
            w.endpoint(right)
        except accio.Error as e:
            assert "closed" in str(e), str(e)
        else:
            raise AssertionError("a closed world gave an endpoint")
    """
    p = run(accio_bin, 3, script)
    assert p.returncode == 0, p.stderr
    rows = [l.split() for l in p.stdout.splitlines()]
    assert len(rows) == 3, p.stdout
    last_in = max(float(r[1]) for r in rows)
    for r in rows:
        assert float(r[2]) >= last_in, f"rank {r[0]} left the barrier before the last entered: {p.stdout}"


def test_a_barrier_that_times_out_can_be_resumed(accio_bin):
    script = """
        import sys
        import time
        import accio

        w = accio.World()
        if w.rank == 1:
            time.sleep(1.0)
        timeouts = 0
        while True:
            try:
                w.barrier(timeout=0.1)
                break
            except accio.Timeout as e:
                assert "no barrier message from rank" in str(e) and "within" in str(e), str(e)
                timeouts += 1
        w.barrier(timeout=10)
        sys.stdout.write(f"{w.rank} {timeouts}\\n")
        w.close()
    """
    p = run(accio_bin, 2, script)
    assert p.returncode == 0, p.stderr
    got = dict(l.split() for l in p.stdout.splitlines())
    assert int(got["0"]) >= 5 and int(got["1"]) == 0, p.stdout


def test_a_process_not_started_as_a_rank_is_told_how_to_start_it():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCIO_", "OMPI_", "PMI", "SLURM_"))}
    p = subprocess.run(
        [sys.executable, "-c", "import accio; accio.World()"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert p.returncode == 1
    assert "accio.Error: ACCIO_RANK: not set: start the program with `accio run -n N`" in p.stderr, p.stderr


def laplace(accio_bin, n, *args):
    """`accio run -n N python3 -m accio.demo.laplace ARGS`: (timing line, crc line)."""
    p = subprocess.run(
        [accio_bin, "run", "-n", str(n), sys.executable, "-m", "accio.demo.laplace", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 2, p.stdout
    return lines


@pytest.mark.parametrize(
    "ranks,dims,phases,array",
    [(2, None, False, "auto"), (3, "1x3", False, "private"), (3, "3x1", True, "private"), (4, None, True, "auto"),
     (6, "2x3", False, "shared")],
)
def test_the_numpy_jacobi_on_many_ranks_computes_the_grid_of_one(accio_bin, ranks, dims, phases, array, tmp_path):
    grid = ["--n", "61", "--iters", "7", "--check"]
    one = laplace(accio_bin, 1, *grid, "--out", str(tmp_path / "one.npy"))
    extra = (["--dims", dims] if dims else []) + (["--phases"] if phases else []) + ["--array", array]
    many = laplace(accio_bin, ranks, *grid, *extra, "--out", str(tmp_path / "many.npy"))
    assert many[1] == one[1] and one[1].startswith("grid crc32 ")
    import numpy as np

    a, b = np.load(tmp_path / "one.npy"), np.load(tmp_path / "many.npy")
    assert a.shape == (61, 61) and (a == b).all()
    # The run did something: the inside moved away from its start, the border did not.
    from accio.demo.laplace import initial

    start = initial(np.arange(61)[:, None], np.arange(61)[None, :], 61)
    assert (a[0] == 1.0).all() and (a[:, -1] == 1.0).all()
    assert np.abs(a[1:-1, 1:-1] - start[1:-1, 1:-1]).mean() > 0.01
    want = f"{ranks} rank(s) ({dims or ('2x2' if ranks == 4 else '2x1')}), 7 iterations (accio): "
    assert want in many[0], many[0]


def test_halo_exchange_fills_ghosts_with_the_neighbours_faces(accio_bin):
    script = """
        import numpy as np
        import accio, accio.grid

        with accio.World() as w:
            ex = accio.grid.HaloExchange(w, (6, 10), dims=(1, 2), periodic=(False, True))
            assert ex.local_shape == (6, 7) and ex.halo == (0, 1) and ex.owned == (6, 5)
            assert ex.start == (0, 5 * w.rank) and ex.coords == (0, w.rank) and ex.dims == (1, 2)
            u = ex.array
            assert u.dtype == np.float64 and u.flags.writeable and not u.flags.owndata
            ex.interior[...] = np.arange(60).reshape(6, 10)[:, 5 * w.rank : 5 * w.rank + 5]
            sync, communicate = ex.exchange()
            assert sync >= 0 and communicate >= 0
            # x is periodic over 2 ranks: both ghost columns come from the other rank.
            full = np.arange(60).reshape(6, 10)
            assert (u[:, 0] == full[:, (5 * w.rank - 1) % 10]).all(), u
            assert (u[:, 6] == full[:, (5 * w.rank + 5) % 10]).all(), u
            # Rows split over 2 ranks: contiguous faces, written straight into a shared
            # array's ghosts, or staged and copied in for a private one, mixed too.
            full = np.arange(60.0).reshape(6, 10)
            for mine in ("shared", "private", ("shared", "private")[w.rank]):
                ex = accio.grid.HaloExchange(w, (6, 10), dims=(2, 1), periodic=(True, False), array=mine)
                assert ex.array_memory == mine and ex.local_shape == (5, 10)
                ex.interior[...] = full[3 * w.rank : 3 * w.rank + 3]
                ex.exchange()
                u = ex.array
                assert (u[0] == full[(3 * w.rank - 1) % 6]).all() and (u[4] == full[(3 * w.rank + 3) % 6]).all(), (mine, u)
            for kw, text in [(dict(dims=(2, 2)), "make 4 ranks, the world has 2"),
                             (dict(array="swap"), "\\"swap\\" is not an array memory: auto, shared or private"),
                             (dict(path="carrier pigeon"), "neither \\"rma\\" nor \\"messages\\""),
                             (dict(dtype="int8"), "neither \\"float64\\" nor \\"float32\\"")]:
                try:
                    accio.grid.HaloExchange(w, (6, 10), **kw)
                except accio.InvalidArgument as e:
                    assert text in str(e), str(e)
                else:
                    raise AssertionError(kw)
    """
    p = run(accio_bin, 2, script)
    assert p.returncode == 0, p.stderr


def test_ranks_lines_never_interleave_mid_line(accio_bin):
    # print(a, b) writes each piece apart; accio run forwards each rank's stdout by lines.
    script = """
        import accio
        with accio.World() as w:
            for i in range(300):
                print("rank", w.rank, "line", i, "end", flush=True)
    """
    p = run(accio_bin, 4, script)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 1200
    for r in range(4):
        mine = [l for l in lines if l.startswith(f"rank {r} ")]
        assert mine == [f"rank {r} line {i} end" for i in range(300)]


def test_threads_asking_for_one_peer_at_once_share_one_connection(accio_bin):
    script = """
        import sys, threading, time
        import accio

        with accio.World() as w:
            if w.rank == 0:
                got, start = [], threading.Barrier(4)
                def ask():
                    start.wait()
                    got.append(w.endpoint(1))
                ts = [threading.Thread(target=ask) for _ in range(4)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                assert len(got) == 4 and all(e is got[0] for e in got), got
                got[0].send(b"one connection")
            else:
                time.sleep(0.3)  # the four threads of rank 0 meet while rank 1 is late
                assert w.endpoint(0).recv(timeout=10) == b"one connection"
            w.barrier(timeout=10)
            sys.stdout.write(f"rank {w.rank} ok\\n")
    """
    p = run(accio_bin, 2, script, env={"ACCIO_WORLD_TIMEOUT_MS": "3000"})
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.splitlines()) == ["rank 0 ok", "rank 1 ok"]
