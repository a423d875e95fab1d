"""Arguments: out-of-range values raise InvalidArgument naming the call and the argument,
offsets are offsets in the registered address space everywhere, a fence mark never issued
is refused, and the package's namespace is accio's API only."""

import threading

import numpy as np
import pytest

import accio
from conftest import connected_pair

TYPING_NAMES = {"Iterator", "Union", "NamedTuple", "Optional", "Any", "Dict", "List",
                "annotations", "builtin_open", "mmap", "os", "json", "typing"}


def test_the_namespace_is_accios_api_only():
    public = {n for n in dir(accio) if not n.startswith("_")}
    assert public == set(accio.__all__), public ^ set(accio.__all__)
    assert not public & TYPING_NAMES
    results = {n for n in dir(accio.results) if not n.startswith("_")}
    assert results == set(accio.results.__all__) == {"SCHEMA", "VERSION", "load", "load_rows"}


def test_invalid_argument_is_an_accio_error_and_a_value_error():
    assert issubclass(accio.InvalidArgument, accio.Error)
    assert issubclass(accio.InvalidArgument, ValueError)
    assert accio.InvalidArgument.__module__ == "accio"
    assert accio.InvalidArgument.__doc__


@pytest.fixture
def pair(shm_addr):
    a, b, lst = connected_pair(shm_addr)
    win = b.register(8192)
    b.send(win.offset.to_bytes(8, "little"))
    remote = int.from_bytes(a.recv(timeout=5), "little")
    yield a, b, lst, win, remote
    a.close()
    b.close()


def _refused(call, text):
    """`call()` raises InvalidArgument (a ValueError) whose message starts with `text`."""
    with pytest.raises(ValueError) as e:
        call()
    assert isinstance(e.value, accio.InvalidArgument), repr(e.value)
    assert str(e.value).startswith(text), str(e.value)
    return str(e.value)


def test_negative_sizes_offsets_and_marks_name_the_argument(pair):
    a, b, lst, win, remote = pair
    mine = a.register(4096)
    cases = [
        (lambda: a.register(-1), "register: length=-1 is negative"),
        (lambda: a.write_to(-1, 8, remote), "write_to: local_offset=-1 is negative"),
        (lambda: a.write_to(mine.offset, -8, remote), "write_to: length=-8 is negative"),
        (lambda: a.write_to(mine.offset, 8, -4096), "write_to: remote_offset=-4096 is negative"),
        (lambda: a.read_from(-1, 8, remote), "read_from: local_offset=-1 is negative"),
        (lambda: a.read_from(mine.offset, -1, remote), "read_from: length=-1 is negative"),
        (lambda: a.read_from(mine.offset, 8, -1), "read_from: remote_offset=-1 is negative"),
        (lambda: a.vwrite_to(b"12345678", -1), "vwrite_to: remote_offset=-1 is negative"),
        (lambda: a.vread_from(bytearray(8), -1), "vread_from: remote_offset=-1 is negative"),
        (lambda: a.fence_wait(-1), "fence_wait: mark=-1 is negative"),
        (lambda: a.fence_signal(local=(-8, 1)), "fence_signal: local offset=-8 is negative"),
        (lambda: a.fence_signal(remote=(remote, -1)), "fence_signal: remote value=-1 is negative"),
        (lambda: a.unregister(-1), "unregister: window=-1 is negative"),
        (lambda: win.load_u64(-8), "load_u64: offset=-8 is negative"),
        (lambda: win.store_u64(win.offset, -1), "store_u64: value=-1 is negative"),
        (lambda: win.wait_u64(-8, 1), "wait_u64: offset=-8 is negative"),
    ]
    for call, text in cases:
        _refused(call, text)
    # Too large for 64 bits is refused the same way, with the limit.
    msg = _refused(lambda: a.write_to(mine.offset, 8, 2**64), "write_to: remote_offset=18446744073709551616 is larger")
    assert "2**64 - 1" in msg
    _refused(lambda: a.fence_wait(2**70), "fence_wait: mark=1180591620717411303424 is larger")
    # Not an int at all: PyO3's TypeError, which names the argument too.
    with pytest.raises(TypeError, match="length"):
        a.register(1.5)
    # Nothing happened: the window still holds zeros and the endpoints still work.
    assert not np.frombuffer(win, dtype=np.uint64).any()
    a.write_to(mine.offset, 8, remote, sync=True)
    a.fence_signal(remote=(remote + 8, 3))
    win.wait_u64(win.offset + 8, 3, timeout=5)


def test_negative_timeouts_name_the_call_and_the_argument(pair, shm_addr):
    a, b, lst, win, remote = pair
    _refused(lambda: a.recv(timeout=-1), "recv: timeout=-1 is not a number of seconds >= 0")
    _refused(lambda: a.recv_into(bytearray(8), timeout=-0.5), "recv_into: timeout=-0.5")
    _refused(lambda: lst.accept(timeout=-1), "accept: timeout=-1 ")
    _refused(lambda: accio.connect(lst.addr, timeout=-1), "connect: timeout=-1 ")
    _refused(lambda: win.wait_u64(win.offset, 1, timeout=float("nan")), "wait_u64: timeout=NaN")
    # The refused recv consumed nothing.
    b.send(b"still here")
    assert a.recv(timeout=5) == b"still here"


def test_merger_and_producer_arguments_name_themselves(shm_addr, tmp_path):
    path = tmp_path / "args.accio"
    _refused(lambda: accio.Merger(shm_addr, path, budget=-1), "Merger: budget=-1 is negative")
    _refused(lambda: accio.Merger(shm_addr, path, slot_bytes=-4096), "Merger: slot_bytes=-4096")
    msg = _refused(lambda: accio.Merger(shm_addr, path, credit=2**32), "Merger: credit=4294967296 is larger")
    assert "4294967295" in msg
    with accio.Merger(shm_addr, path) as m:
        _refused(lambda: accio.Producer(m.addr, timeout=-2), "Producer: timeout=-2 ")
        _refused(lambda: m.wait_done(-1), "wait_done: producers=-1 is negative")
        _refused(lambda: m.close(patience=-1), "close: patience=-1 ")
        # The refused close left the merger open: a producer still gets in.
        with accio.Producer(m.addr) as p:
            p.write(b"x" * 100)
    assert len(accio.open(path)) == 1


@pytest.mark.parametrize("backend", ["shm", "tcp"])
def test_fence_wait_of_a_mark_never_issued_raises(backend, shm_addr):
    a, b, lst = connected_pair(shm_addr if backend == "shm" else "tcp://127.0.0.1:0")
    assert a.fence_mark() == 0
    a.fence_wait(0)
    msg = _refused(lambda: a.fence_wait(12345), "invalid argument to fence_wait: mark 12345")
    assert "latest is 0" in msg
    win = b.register(4096)
    b.send(win.offset.to_bytes(8, "little"))
    remote = int.from_bytes(a.recv(timeout=5), "little")
    a.vwrite_to(b"z" * 64, remote)
    m = a.fence_mark()
    assert m > 0
    _refused(lambda: a.fence_wait(m + 1), f"invalid argument to fence_wait: mark {m + 1}")
    a.fence_wait(m)
    a.fence_wait(0)
    assert bytes(memoryview(win)[:64]) == b"z" * 64


def test_one_offset_convention_signal_and_wait_name_the_same_offset(pair):
    a, b, lst, win, remote = pair
    assert remote == win.offset
    flag = win.offset + 4096  # what both sides call the flag word
    t = threading.Thread(target=lambda: (a.vwrite_to(np.arange(512, dtype=np.uint64), remote),
                                         a.fence_signal(remote=(flag, 7))))
    t.start()
    win.wait_u64(flag, 7, timeout=10)
    t.join()
    assert win.load_u64(flag) == 7
    assert (np.frombuffer(win, dtype=np.uint64, count=512) == np.arange(512)).all()
    # A local fence_signal word and the Window's own accessors: the same offsets again.
    b.fence_signal(local=(win.offset + 16, 9))
    assert win.load_u64(win.offset + 16) == 9
    win.store_u64(win.offset + 8192 - 8, 5)
    assert np.frombuffer(win, dtype=np.uint64)[-1] == 5
    assert win.load_u64(win.offset + 8192 - 8) == 5


def test_a_window_position_where_an_offset_belongs_says_how_to_write_it(pair):
    a, b, lst, win, remote = pair
    with pytest.raises(accio.OutOfWindow) as e:
        win.wait_u64(8, 1, timeout=0)
    msg = str(e.value)
    assert f"window {win.offset:#x}..{win.offset + 8192:#x}" in msg
    assert f"window.offset + 0x8" in msg and f"{win.offset + 8:#x}" in msg
    with pytest.raises(accio.OutOfWindow, match="is not inside window"):
        win.load_u64(win.offset + 8192)
    with pytest.raises(accio.OutOfWindow, match="is not inside window"):
        win.store_u64(win.offset + 8192 - 4, 1)
    with pytest.raises(accio.InvalidArgument, match="not 8-byte aligned"):
        win.load_u64(win.offset + 3)
