"""Endpoints from Python: two processes, zero-copy NumPy windows, RMA, fences, errors."""

import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import accio
from conftest import connected_pair

CTX = mp.get_context("spawn")


def _rma_peer(addr, n):
    """The other process: learns the server window's offset, writes n uint64 counting up
    with vwrite_to straight from a NumPy array, then raises the flag with fence_signal."""
    ep = accio.connect(addr, timeout=10)
    remote = int.from_bytes(ep.recv(timeout=10), "little")
    data = np.arange(n, dtype=np.uint64) * 3
    ep.vwrite_to(data, remote + 4096)
    # and a second piece from a registered local window through write_to
    local = ep.register(4096, "r")
    np.frombuffer(local, dtype=np.uint64)[:] = 7
    ep.write_to(local.offset, 4096, remote + 4096 + data.nbytes)
    ep.fence_signal(remote=(remote, 1))
    assert ep.recv(timeout=10) == b"done"


def test_two_processes_write_to_is_visible_through_numpy_without_copy(shm_addr):
    n = 1 << 16
    lst = accio.listen(shm_addr)
    peer = CTX.Process(target=_rma_peer, args=(shm_addr, n))
    peer.start()
    ep = lst.accept(timeout=20)
    win = ep.register(4096 + n * 8 + 4096, "rw")
    flag = np.frombuffer(win, dtype=np.uint64, count=1)
    body = np.frombuffer(win, dtype=np.uint64, offset=4096, count=n)
    tail = np.frombuffer(win, dtype=np.uint64, offset=4096 + n * 8, count=512)
    assert not body.any()  # fresh windows are zeroed
    # the array is a view of the window's memory, not a copy of it
    assert body.base is not None and isinstance(memoryview(win), memoryview)
    assert body.flags.writeable
    ep.send(win.offset.to_bytes(8, "little"))
    win.wait_u64(win.offset, 1, timeout=20)  # the offset the peer's fence_signal named
    assert flag[0] == 1
    # the arrays were made before the peer wrote: they show its data, so they are views
    np.testing.assert_array_equal(body, np.arange(n, dtype=np.uint64) * 3)
    assert (tail == 7).all()
    ep.send(b"done")
    peer.join(20)
    assert peer.exitcode == 0


def test_local_store_through_numpy_reaches_peer_read(shm_addr):
    a, b, lst = connected_pair(shm_addr)
    win = b.register(8192, "r")
    arr = np.frombuffer(win, dtype=np.float64)
    arr[:] = np.linspace(0, 1, arr.size)
    b.send(win.offset.to_bytes(8, "little"))
    off = int.from_bytes(a.recv(timeout=5), "little")
    out = np.zeros(1024, dtype=np.float64)
    a.vread_from(out, off)
    np.testing.assert_array_equal(out, arr)
    # read_from into a local window
    mine = a.register(8192, "none")
    a.read_from(mine.offset, 8192, off)
    assert bytes(memoryview(mine)) == arr.tobytes()


def test_a_window_exports_dlpack_views_that_keep_its_memory(shm_addr):
    import gc

    a, b, lst = connected_pair(shm_addr)
    win = b.register(8192, "rw")
    assert win.__dlpack_device__() == (1, 0)
    view = np.from_dlpack(win)  # NumPy 2 asks for a DLPack 1.0 capsule
    assert view.dtype == np.uint8 and view.shape == (8192,) and view.flags.writeable
    assert np.shares_memory(view, np.frombuffer(win, dtype=np.uint8))
    view[16:24] = 3
    assert win.load_u64(win.offset + 16) == 0x0303030303030303
    # The peer's write lands in what the view shows.
    a.vwrite_to(np.full(8, 9, dtype=np.uint8), win.offset + 100)
    assert (view[100:108] == 9).all()
    # Legacy and versioned capsules; ones no consumer takes free themselves.
    for kw in ({}, {"max_version": (1, 0)}, {"max_version": (0, 8)}):
        for _ in range(1000):
            cap = win.__dlpack__(**kw)
        assert "dltensor" in repr(cap)
        del cap
    for kw, text in [({"dl_device": (2, 0)}, "is never copied"), ({"copy": True}, "never a copy"),
                     ({"stream": 1}, "stream must be None")]:
        with pytest.raises(BufferError, match=text):
            win.__dlpack__(**kw)
    # The view keeps the memory after the window, its endpoint and the peer are gone.
    del win
    for ep in (a, b):
        ep.close()
    del a, b, lst
    gc.collect()
    assert view[16:24].tolist() == [3] * 8 and (view[100:108] == 9).all()


def test_gpu_memory_where_host_memory_is_expected_is_an_error_that_says_so(shm_addr):
    class CudaArray:  # what CuPy and Numba arrays carry
        __cuda_array_interface__ = {"shape": (8,), "typestr": "|u1", "data": (1 << 40, False), "version": 3}

    class Tensor:  # a DLPack producer's device, as torch.Tensor on a GPU answers
        def __init__(self, device):
            self.device = device

        def __dlpack_device__(self):
            return self.device

    a, b, lst = connected_pair(shm_addr)
    win = b.register(4096, "rw")
    for obj, text in [(CudaArray(), "CudaArray is CUDA device memory (__cuda_array_interface__)"),
                      (Tensor((2, 1)), "Tensor is CUDA device memory (DLPack device (2, 1))"),
                      (Tensor((10, 0)), "Tensor is ROCm device memory (DLPack device (10, 0))")]:
        with pytest.raises(TypeError, match=re.escape(text) + ".*copy it to the host first"):
            a.send(obj)
    # vwrite_to and vread_from take CUDA memory, once the driver vouches for it; other
    # device memory is refused by name.
    for call in (a.vwrite_to, a.vread_from):
        for obj, text in [(CudaArray(), "not CUDA device memory|no CUDA|without the cuda feature"),
                          (Tensor((2, 1)), "gives neither __cuda_array_interface__ nor __dlpack__"),
                          (Tensor((10, 0)), r"ROCm device memory \(DLPack device \(10, 0\)\): "
                                            "accio reads host memory and CUDA devices")]:
            with pytest.raises(TypeError, match=text):
                call(obj, win.offset)
    # Host memory that has no buffer to give: the usual message.
    with pytest.raises(TypeError, match="expected a contiguous buffer"):
        a.send(Tensor((1, 0)))
    for ep in (a, b):
        ep.close()


class DLPackOnly:
    """A tensor that offers DLPack and no buffer protocol, as a PyTorch CPU tensor does."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kw):
        return self.array.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_host_tensors_that_offer_only_dlpack_are_sent_and_received_in_place(shm_addr):
    a, b, lst = connected_pair(shm_addr)
    src = np.arange(512, dtype=np.float64).reshape(16, 32)
    a.send(DLPackOnly(src))
    out = np.zeros((16, 32))
    b.recv_into(DLPackOnly(out), timeout=5)  # lands in `out` itself
    np.testing.assert_array_equal(out, src)
    win = b.register(8192, "rw")
    a.vwrite_to(DLPackOnly(src[3]), win.offset + 64)
    np.testing.assert_array_equal(np.frombuffer(win, dtype=np.float64, count=32, offset=64), src[3])
    # One element, no axes, and nothing at all.
    a.send(DLPackOnly(np.array(2.5, dtype=np.float32)))
    assert np.frombuffer(b.recv(timeout=5), dtype=np.float32)[0] == 2.5
    a.send(DLPackOnly(np.zeros((0, 4))))
    assert b.recv(timeout=5) == b""
    # A strided view is refused, saying why, and nothing is sent.
    with pytest.raises(TypeError, match=r"DLPackOnly: a DLPack tensor of shape \[16\] and strides \[2\].*not C-contiguous"):
        a.send(DLPackOnly(src[0, ::2]))
    # Many in a row: each tensor is handed back to its producer (NumPy frees it).
    import sys

    before = sys.getrefcount(src)
    for _ in range(2000):
        a.send(DLPackOnly(src))
        b.recv_into(out, timeout=5)
    assert sys.getrefcount(src) == before
    for ep in (a, b):
        ep.close()


def _dlpack_capsule(shape, strides=None, bits=8, lanes=1, device=(1, 0), ndim=None, null=False, freed=None):
    """A legacy DLPack capsule over a 64-byte host buffer, made by hand (ctypes), for
    producers that lie; `freed` counts deleter calls."""
    import ctypes

    class Tensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                    ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]

    Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

    class Managed(ctypes.Structure):
        _fields_ = [("t", Tensor), ("ctx", ctypes.c_void_p), ("deleter", Deleter)]

    keep = {"buf": ctypes.create_string_buffer(64), "shape": (ctypes.c_int64 * max(len(shape), 1))(*shape)}
    data = None if null else ctypes.cast(keep["buf"], ctypes.c_void_p)
    if strides is not None:
        keep["strides"] = (ctypes.c_int64 * max(len(strides), 1))(*strides)
    keep["deleter"] = Deleter(lambda _m: freed.append(1) if freed is not None else None)
    m = Managed(Tensor(data, device[0], device[1],
                       len(shape) if ndim is None else ndim, 1, bits, lanes, keep["shape"],
                       keep.get("strides"), 0), None, keep["deleter"])
    keep["m"] = m
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(m), b"dltensor", None), keep


def test_a_dlpack_producer_that_lies_gets_a_clear_error_and_its_tensor_back(shm_addr):
    class Lying:
        def __init__(self, **kw):
            self.freed = []
            self.cap, self.keep = _dlpack_capsule(freed=self.freed, **kw)

        def __dlpack__(self, **kw):
            return self.cap

        def __dlpack_device__(self):
            return (1, 0)

    a, b, lst = connected_pair(shm_addr)
    ok = Lying(shape=[8], bits=64)
    a.send(ok)
    assert len(b.recv(timeout=5)) == 64 and ok.freed == [1]
    for kw, text in [
        (dict(shape=[-1]), r"a DLPack tensor of shape \[-1\]: a negative extent"),
        (dict(shape=[1 << 40, 1 << 40]), r"a DLPack tensor of shape \[1099511627776, 1099511627776\] is too large"),
        (dict(shape=[1 << 62], bits=64), r"a DLPack tensor of shape \[4611686018427387904\] is too large"),
        (dict(shape=[2], ndim=100), r"a DLPack tensor of 100 axes"),
        (dict(shape=[2], ndim=-3), r"a DLPack tensor of -3 axes"),
        (dict(shape=[4], bits=12), r"elements of 12 bits are not whole bytes"),
        (dict(shape=[4, 2], strides=[1, 4]), r"a DLPack tensor of shape \[4, 2\] and strides \[1, 4\] \(elements\) is not C-contiguous"),
        (dict(shape=[4], device=(2, 0)), r"DLPack device \(2, 0\) is not host memory"),
        (dict(shape=[4], null=True), r"a DLPack tensor of 4 bytes at address 0"),
    ]:
        lying = Lying(**kw)
        if kw.get("device"):
            lying.__dlpack_device__ = lambda: (1, 0)  # says host, gives a GPU tensor
        with pytest.raises(TypeError, match="Lying: " + text):
            a.send(lying)
        assert lying.freed == [1], kw
    for ep in (a, b):
        ep.close()


def test_send_recv_buffers_and_threads(shm_addr):
    a, b, lst = connected_pair(shm_addr)
    a.send(b"hello")
    a.send(bytearray(b"world"))
    a.send(np.arange(4, dtype=np.int32))
    a.send(memoryview(b"xyz")[1:])
    a.send(b"")
    assert b.recv(timeout=5) == b"hello"
    assert b.recv(timeout=5) == b"world"
    assert np.frombuffer(b.recv(timeout=5), dtype=np.int32).tolist() == [0, 1, 2, 3]
    assert b.recv(timeout=5) == b"yz"
    assert b.recv(timeout=5) == b""
    buf = bytearray(16)
    a.send(b"into")
    assert b.recv_into(buf, timeout=5) == 4 and buf[:4] == b"into"
    # Too long for the buffer: refused with both lengths, consumed; the next one arrives.
    a.send(b"x" * 17)
    a.send(b"next")
    with pytest.raises(accio.MessageTooLarge, match="17 bytes.*16-byte buffer"):
        b.recv_into(buf, timeout=5)
    assert b.recv_into(buf, timeout=5) == 4 and buf[:4] == b"next"
    # Straight into a NumPy array, 2 MiB (over shm: one copy, from the ring).
    src = np.arange(1 << 18, dtype=np.float64)
    dst = np.zeros_like(src)
    a.send(src)
    assert b.recv_into(dst, timeout=5) == src.nbytes and np.array_equal(dst, src)

    # a thread blocked in recv does not hold the GIL: the main thread runs meanwhile
    got = []
    t = threading.Thread(target=lambda: got.append(b.recv(timeout=10)))
    t.start()
    spins = 0
    deadline = time.monotonic() + 0.2
    while time.monotonic() < deadline:
        spins += 1
    a.send(b"late")
    t.join(10)
    assert got == [b"late"] and spins > 1000


def test_two_threads_receiving_on_one_endpoint(shm_addr):
    a, b, lst = connected_pair(shm_addr)
    got = []
    ts = [threading.Thread(target=lambda: got.append(b.recv(timeout=10))) for _ in range(4)]
    for t in ts:
        t.start()
    time.sleep(0.1)  # all four blocked in recv at once
    for i in range(4):
        a.send(b"m%d" % i)
    for t in ts:
        t.join(10)
    assert sorted(got) == [b"m0", b"m1", b"m2", b"m3"]


def test_tcp_backend_works_too():
    a, b, lst = connected_pair("tcp://127.0.0.1:0")
    assert a.backend == "tcp" and b.peer_addr == a.local_addr
    win = b.register(4096)
    b.send(win.offset.to_bytes(8, "little"))
    off = int.from_bytes(a.recv(timeout=5), "little")
    a.vwrite_to(np.full(512, 9, dtype=np.uint64), off, sync=True)
    a.fence_wait(a.fence_mark())
    assert (np.frombuffer(win, dtype=np.uint64) == 9).all()


def test_errors_form_one_hierarchy_and_carry_the_rust_message(shm_addr):
    for cls in (accio.PeerGone, accio.Timeout, accio.OutOfWindow, accio.AccessDenied,
                accio.BadAddress, accio.InvalidArgument, accio.MergeFailed):
        assert issubclass(cls, accio.Error) and issubclass(cls, Exception)
    with pytest.raises(accio.BadAddress, match="scheme"):
        accio.listen("nope://x")
    a, b, lst = connected_pair(shm_addr)
    with pytest.raises(accio.AddrInUse):
        accio.listen(shm_addr)
    win = b.register(4096, "r")
    with pytest.raises(accio.OutOfWindow, match="does not cover|covers"):
        a.vwrite_to(b"x" * 8, win.offset + 4096 - 4)
    with pytest.raises(accio.AccessDenied, match="does not allow"):
        a.vwrite_to(b"x" * 8, win.offset)
    with pytest.raises(accio.InvalidArgument, match="access"):
        a.register(4096, "rwx")
    with pytest.raises(accio.InvalidArgument, match="aligned"):
        win.load_u64(win.offset + 3)
    t0 = time.monotonic()
    with pytest.raises(accio.Timeout, match="recv"):
        a.recv(timeout=0.05)
    assert time.monotonic() - t0 >= 0.05
    with pytest.raises(TypeError, match="contiguous"):
        a.send(np.arange(10)[::2])
    with pytest.raises(TypeError, match="writable"):
        a.vread_from(b"immutable", win.offset)
    b.close()
    with pytest.raises(accio.PeerGone, match="gone"):
        a.recv(timeout=5)
    with pytest.raises(accio.PeerGone):
        b.send(b"closed")


CHILD = textwrap.dedent(
    """
    import sys, time, accio
    ep = accio.connect(sys.argv[1], timeout=10)
    print("ready", flush=True)
    try:
        ep.recv()
        print("received?!", flush=True)
    except KeyboardInterrupt:
        print("interrupted", time.monotonic(), flush=True)
    """
)


@pytest.mark.parametrize("blocked_in", ["recv"])
def test_ctrl_c_interrupts_a_blocked_recv_within_100ms(shm_addr, blocked_in):
    lst = accio.listen(shm_addr)
    child = subprocess.Popen([sys.executable, "-c", CHILD, shm_addr],
                             stdout=subprocess.PIPE, text=True)
    ep = lst.accept(timeout=20)
    assert child.stdout.readline().strip() == "ready"
    time.sleep(0.3)  # well inside recv, past its spinning phase
    sent = time.monotonic()
    os.kill(child.pid, signal.SIGINT)
    line = child.stdout.readline().split()
    child.wait(10)
    assert line and line[0] == "interrupted", line
    delay = float(line[1]) - sent
    assert 0 <= delay < 0.1 + 0.05, f"KeyboardInterrupt after {delay * 1e3:.1f} ms"
    del ep


def test_ctrl_c_interrupts_accept(shm_addr):
    code = textwrap.dedent(
        """
        import sys, time, accio
        l = accio.listen(sys.argv[1])
        print("ready", flush=True)
        try:
            l.accept()
        except KeyboardInterrupt:
            print("interrupted", time.monotonic(), flush=True)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", code, shm_addr],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    sent = time.monotonic()
    os.kill(child.pid, signal.SIGINT)
    line = child.stdout.readline().split()
    child.wait(10)
    assert line and line[0] == "interrupted", line
    assert float(line[1]) - sent < 0.15
