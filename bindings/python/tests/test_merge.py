"""The merging file service from Python: threads, processes, Arrow, containers, results."""

import json
import multiprocessing as mp
import threading

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pytest

import accio

CTX = mp.get_context("spawn")


def test_threads_write_through_the_merger_into_one_container(shm_addr, tmp_path):
    path = tmp_path / "out.accio"
    threads, blocks = 6, 20
    with accio.Merger(shm_addr, path, budget=16 << 20, slot_bytes=64 << 10) as m:
        errors = []

        def work(i):
            try:
                with accio.Producer(m.addr) as p:
                    for k in range(blocks):
                        # bytes, NumPy arrays and memoryviews all go in
                        arr = np.full(1000 + k, i * 1000 + k, dtype=np.int64)
                        seq = p.write(arr if k % 2 else arr.tobytes())
                        assert seq == k
                    p.write_record(b"rec-%d" % i)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert not errors, errors
        m.wait_done(threads, timeout=30)
    with accio.open(path) as f:
        assert f.verify()
        got = list(f)
        assert len(got) == threads * (blocks + 1)
        per = f.producers()
        assert len(per) == threads and all(b == blocks + 1 for b, _ in per.values())
        raw = [b for b in got if b.kind == "raw"]
        for b in raw:
            arr = np.frombuffer(b.data, dtype=np.int64)
            assert arr.size == 1000 + b.seq and (arr == arr[0]).all() and arr[0] % 1000 == b.seq
        recs = sorted(bytes(b.data[4:]) for b in got if b.kind == "records")
        assert recs == sorted(b"rec-%d" % i for i in range(threads))
        del raw, got, arr, b


def _worker(addr, i, n, size):
    with accio.Producer(addr) as p:
        data = np.full(size // 8, i, dtype=np.uint64)
        for k in range(n):
            data[0] = k
            p.write(data)


def test_multiprocessing_workers_write_one_file(shm_addr, tmp_path):
    path = tmp_path / "mp.accio"
    workers, n, size = 4, 16, 256 << 10
    m = accio.Merger(shm_addr, path, budget=8 << 20, slot_bytes=size)
    ps = [CTX.Process(target=_worker, args=(m.addr, i, n, size)) for i in range(workers)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(60)
        assert p.exitcode == 0
    summary = m.close()
    assert summary["blocks"] == workers * n and summary["payload_bytes"] == workers * n * size
    assert summary["stats"]["finished"] == workers and summary["stats"]["lost"] == 0
    f = accio.open(path)
    seen = {}
    for b in f:
        arr = np.frombuffer(b.data, dtype=np.uint64)
        assert arr[0] == b.seq
        seen.setdefault(int(arr[1]), []).append(b.seq)
    assert sorted(seen) == list(range(workers))
    assert all(s == list(range(n)) for s in seen.values())


def test_pyarrow_reads_the_merged_arrow_file(shm_addr, tmp_path):
    path = tmp_path / "out.arrow"
    schema = pa.schema([("worker", pa.int32()), ("x", pa.float64()), ("tag", pa.string())])
    threads, batches, rows = 4, 5, 1000
    m = accio.Merger(shm_addr, path, format="arrow", schema=schema)

    def work(i):
        with accio.Producer(m.addr) as p:
            for k in range(batches):
                p.write(pa.record_batch(
                    [pa.array([i] * rows, pa.int32()),
                     pa.array(np.arange(rows) + k * rows, pa.float64()),
                     pa.array([f"w{i}b{k}"] * rows)],
                    schema=schema))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    s = m.close()
    assert s["rows"] == threads * batches * rows
    table = pa.ipc.open_file(str(path)).read_all()
    assert table.schema.equals(schema)
    assert table.num_rows == threads * batches * rows
    for i in range(threads):
        mine = table.filter(pa.compute.equal(table["worker"], i))
        assert sorted(mine["x"].to_pylist()) == list(map(float, range(batches * rows)))


def test_wrong_schema_is_refused_with_the_reason(shm_addr, tmp_path):
    schema = pa.schema([("a", pa.int64())])
    m = accio.Merger(shm_addr, tmp_path / "x.arrow", format="arrow", schema=schema)
    p = accio.Producer(m.addr)
    p.write(pa.record_batch([pa.array([1.5])], names=["b"]))
    with pytest.raises(accio.Error, match="schema"):
        p.finish()
    m.close()
    with pytest.raises(accio.InvalidArgument, match="schema"):
        accio.Merger(shm_addr + "-2", tmp_path / "y.arrow", format="arrow")
    with pytest.raises(accio.InvalidArgument, match="format"):
        accio.Merger(shm_addr + "-3", tmp_path / "y.x", format="csv")


def test_an_arrow_array_that_is_not_a_batch_is_a_type_error(shm_addr, tmp_path):
    schema = pa.schema([("a", pa.int64())])
    with accio.Merger(shm_addr, tmp_path / "t.arrow", format="arrow", schema=schema) as m:
        with accio.Producer(m.addr) as p:
            with pytest.raises(TypeError, match="RecordBatch"):
                p.write(pa.array([1, 2, 3]))
            with pytest.raises(TypeError, match="contiguous"):
                p.write(object())
            p.write(pa.record_batch([pa.array([1, 2, 3])], schema=schema))
    assert pa.ipc.open_file(str(tmp_path / "t.arrow")).read_all().num_rows == 3


def test_fork_started_workers_work_too(shm_addr, tmp_path):
    path = tmp_path / "fork.accio"
    m = accio.Merger(shm_addr, path)
    ps = [mp.get_context("fork").Process(target=_worker, args=(m.addr, i, 4, 8192))
          for i in range(3)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(60)
        assert p.exitcode == 0
    assert m.close()["blocks"] == 12
    assert len(accio.open(path)) == 12


def test_oversized_block_raises(shm_addr, tmp_path):
    with accio.Merger(shm_addr, tmp_path / "o.accio", slot_bytes=64 << 10) as m:
        with accio.Producer(m.addr) as p:
            assert p.max_block == 64 << 10
            with pytest.raises(accio.MessageTooLarge, match="does not fit"):
                p.write(bytes((64 << 10) + 1))


def test_open_refuses_a_file_that_is_not_a_container(tmp_path):
    bad = tmp_path / "bad.accio"
    bad.write_bytes(b"not a container at all" * 10)
    with pytest.raises(accio.MergeFailed, match="bad.accio"):
        accio.open(bad)


def test_results_load(tmp_path):
    doc = {
        "schema": "accio-results", "version": 1, "accio_version": "0.1.0",
        "started_unix": 0, "command": ["accio", "bench"], "host": {}, "warnings": [],
        "figures": [
            {"bench": "transport", "metric": "latency", "unit": "us",
             "params": {"backend": "shm", "size": 8}, "samples": [0.5, 0.7, 0.6],
             "summary": {"median": 0.6, "min": 0.5, "max": 0.7, "n": 3},
             "ceiling": {"name": "one memcpy of 8", "value": 0.3, "source": "measured",
                         "ratio": 0.5}},
            {"bench": "merge", "metric": "throughput", "unit": "GB/s",
             "params": {"producers": 8}, "samples": [2.0],
             "summary": {"median": 2.0, "min": 2.0, "max": 2.0, "n": 1}},
        ],
    }
    p = tmp_path / "results.json"
    p.write_text(json.dumps(doc))
    rows = accio.results.load_rows(p)
    assert rows[0]["median"] == 0.6 and rows[0]["param.backend"] == "shm"
    assert rows[1]["ceiling"] is None and rows[1]["param.producers"] == 8
    df = accio.results.load(p)
    import pandas as pd

    assert isinstance(df, pd.DataFrame)
    assert list(df["bench"]) == ["transport", "merge"]
    assert df.loc[0, "ratio"] == 0.5
    p.write_text(json.dumps({**doc, "version": 99}))
    with pytest.raises(ValueError, match="version 99"):
        accio.results.load(p)


def test_results_load_without_pandas_gives_dicts(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pandas(name, *a, **k):
        if name == "pandas":
            raise ImportError("no pandas here")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"schema": "accio-results", "version": 1, "figures": []}))
    assert accio.results.load(p) == []


def test_a_producer_fills_a_lent_buffer_in_place_from_numpy(shm_addr, tmp_path):
    path = tmp_path / "lent.accio"
    with accio.Merger(shm_addr, str(path)) as m, accio.Producer(m.addr) as p:
        buf = p.buffer()
        assert buf.capacity == p.max_block and "lent" in repr(buf)
        a = np.frombuffer(buf, dtype=np.float64)
        a[:1000] = np.arange(1000.0)
        # A view still alive would write into memory that is another block's after the
        # commit: refused, and the buffer stays lent.
        with pytest.raises(BufferError, match="1 view"):
            buf.commit(8000)
        with pytest.raises(accio.Error, match="a buffer is out"):
            p.write(b"no")
        with pytest.raises(accio.Error, match="a buffer is out"):
            p.finish()
        del a
        with pytest.raises(accio.InvalidArgument, match="length=2097153"):
            buf.commit(p.max_block + 1)
        assert buf.commit(8000) == 0
        with pytest.raises(accio.Error, match="already committed"):
            buf.commit(8)
        with pytest.raises(BufferError):
            memoryview(buf)
        with p.buffer() as b:
            v = memoryview(b)
            v[:3] = b"abc"
            v.release()
            b.commit(3)
        with p.buffer():
            pass  # given back unused
        lost = p.buffer()
        del lost  # dropped: given back too
        p.write(b"tail")
    blocks = list(accio.open(path))
    assert [(b.seq, len(b.data)) for b in blocks] == [(0, 8000), (1, 3), (2, 4)]
    assert (np.frombuffer(blocks[0].data, dtype=np.float64) == np.arange(1000.0)).all()
    assert bytes(blocks[1].data) == b"abc" and bytes(blocks[2].data) == b"tail"
