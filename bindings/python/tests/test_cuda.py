"""CUDA arrays as blocks of Producer.write and as the local side of Endpoint.vwrite_to and
vread_from: CuPy and PyTorch arrays on a GPU (run on the GPU machine by ci/device.sh), and
objects that claim device memory everywhere: their address is checked with the driver
before any copy, so a lie is a TypeError, never a wild copy."""

import numpy as np
import pytest

import accio
from conftest import connected_pair


class FakeCudaArray:
    """Claims CUDA memory at a host address (what a buggy or hostile producer could do)."""

    def __init__(self, host, shape=None, strides=None, typestr="|u1"):
        self._host = host
        self.__cuda_array_interface__ = {
            "data": (host.ctypes.data, False),
            "shape": shape if shape is not None else host.shape,
            "typestr": typestr,
            "strides": strides,
            "version": 3,
        }


def test_an_object_that_claims_device_memory_at_a_host_address_is_refused(shm_addr, tmp_path):
    host = np.arange(4096, dtype=np.uint8)
    with accio.Merger(shm_addr, tmp_path / "f.accio") as m, accio.Producer(m.addr) as p:
        with pytest.raises(TypeError) as e:
            p.write(FakeCudaArray(host))
        # Without a GPU the driver is missing; with one, the driver does not know the
        # address as device memory. Either way the message says which.
        assert "Producer.write" in str(e.value)
        assert "not CUDA device memory" in str(e.value) or "no CUDA" in str(e.value) \
            or "without the cuda feature" in str(e.value), str(e.value)
        for bad, cause in [
            (FakeCudaArray(host, shape=(64, 64), strides=(1, 64)), "C-contiguous"),
            (FakeCudaArray(host, shape=(-1,)), "negative"),
            (FakeCudaArray(host, shape=(1 << 40, 1 << 40)), "too large"),
            (FakeCudaArray(host, typestr="<x"), "typestr"),
        ]:
            with pytest.raises(TypeError, match=cause):
                p.write(bad)
        # An empty array is an empty block, whatever it claims.
        assert p.write(FakeCudaArray(host[:0])) == 0


def test_rma_with_an_object_that_claims_device_memory_is_refused_and_moves_nothing(shm_addr):
    a, b, _lst = connected_pair(shm_addr)
    win = b.register(8192, "rw")
    np.frombuffer(win, dtype=np.uint8)[:] = 5
    host = np.arange(4096, dtype=np.uint8)
    for call, name in [(a.vwrite_to, "Endpoint.vwrite_to"), (a.vread_from, "Endpoint.vread_from")]:
        with pytest.raises(TypeError) as e:
            call(FakeCudaArray(host), win.offset)
        text = str(e.value)
        assert name in text, text
        assert "not CUDA device memory" in text or "no CUDA" in text \
            or "without the cuda feature" in text, text
        with pytest.raises(TypeError, match="C-contiguous"):
            call(FakeCudaArray(host, shape=(64, 64), strides=(1, 64)), win.offset)
    assert (np.frombuffer(win, dtype=np.uint8) == 5).all()
    assert (host == np.arange(4096, dtype=np.uint8)).all()


def test_register_device_without_gpu_memory_says_why(shm_addr):
    a, b, _lst = connected_pair(shm_addr)
    host = np.arange(4096, dtype=np.uint8)
    with pytest.raises(TypeError, match="must be a CUDA array or a length"):
        b.register_device(host)
    with pytest.raises(TypeError) as e:
        b.register_device(FakeCudaArray(host))
    assert "not CUDA device memory" in str(e.value) or "no CUDA" in str(e.value) \
        or "without the cuda feature" in str(e.value), str(e.value)
    if not GPU_HERE:
        with pytest.raises(accio.Unsupported, match="no CUDA|without the cuda feature"):
            b.register_device(4096)


def _gpu_modules():
    mods = []
    for name in ("cupy", "torch"):
        try:
            mod = __import__(name)
        except ImportError:
            continue
        try:
            ok = mod.cuda.runtime.getDeviceCount() > 0 if name == "cupy" else mod.cuda.is_available()
        except Exception:  # noqa: BLE001 (no driver: nothing to test)
            ok = False
        if ok:
            mods.append(name)
    return mods


GPU = _gpu_modules()
GPU_HERE = bool(GPU)


@pytest.mark.skipif(not GPU, reason="no CUDA device with CuPy or PyTorch")
@pytest.mark.parametrize("lib", GPU)
def test_cuda_arrays_reach_the_file_unchanged(lib, shm_addr, tmp_path):
    path = tmp_path / f"{lib}.accio"
    sizes = [1, 4096, (4 << 20) - 1, (4 << 20) + 1, 3 << 20]
    want = []
    with accio.Merger(shm_addr, path, slot_bytes=8 << 20) as m, accio.Producer(m.addr) as p:
        for k, n in enumerate(sizes):
            if lib == "cupy":
                import cupy

                a = (cupy.arange(n, dtype=cupy.uint32) * 2654435761 + k).astype(cupy.uint8)
                host = cupy.asnumpy(a)
                # 2-D float view of the same kind of data: shape and typestr are honoured.
                b = (cupy.arange(n // 4 * 4) % 256).astype(cupy.uint8).view(cupy.float32).reshape(-1, 1)
            else:
                import torch

                a = ((torch.arange(n, dtype=torch.int64, device="cuda") * 2654435761 + k) % 256).to(torch.uint8)
                host = a.cpu().numpy()
                b = (torch.arange(n // 4 * 4, device="cuda") % 256).to(torch.uint8).view(torch.float32).reshape(-1, 1)
            assert p.write(a) == 2 * k
            want.append(host.tobytes())
            assert p.write(b) == 2 * k + 1
            want.append((np.arange(n // 4 * 4, dtype=np.uint64) % 256).astype(np.uint8).tobytes())
        # A strided device array is refused, not copied wrongly.
        if lib == "cupy":
            import cupy

            strided = cupy.zeros((64, 64), dtype=cupy.uint8)[:, ::2]
        else:
            import torch

            strided = torch.zeros((64, 64), dtype=torch.uint8, device="cuda")[:, ::2]
        with pytest.raises(TypeError, match="C-contiguous"):
            p.write(strided)
    with accio.open(path) as f:
        assert f.verify()
        got = [bytes(b.data) for b in f]
    assert got == want


def announce(owner, peer, w):
    """Tells `peer` of `owner`'s window `w` by a message, as programs do: a peer is sure to
    see a window (over tcp, its mirror of the owner's windows) once it got a message sent
    after the registration."""
    owner.send(w.offset.to_bytes(8, "little"))
    assert int.from_bytes(peer.recv(timeout=10), "little") == w.offset


class ReadOnlyView:
    """A real CUDA array, offered through __cuda_array_interface__ as read-only."""

    def __init__(self, arr):
        cai = dict(arr.__cuda_array_interface__)
        cai["data"] = (cai["data"][0], True)
        self.__cuda_array_interface__ = cai
        self._arr = arr


@pytest.mark.skipif(not GPU, reason="no CUDA device with CuPy or PyTorch")
@pytest.mark.parametrize("lib", GPU)
@pytest.mark.parametrize("scheme", ["shm", "tcp"])
def test_cuda_arrays_go_to_and_come_from_a_peer_window(lib, scheme, shm_addr):
    a, b, _lst = connected_pair(shm_addr if scheme == "shm" else "tcp://127.0.0.1:0")
    n = (9 << 20) + 4099  # three staging chunks and a piece
    win = b.register(n + 8192, "rw")
    announce(b, a, win)
    view = np.frombuffer(win, dtype=np.uint8)
    view[:] = 5
    want = (np.arange(n, dtype=np.uint64) * 2654435761 % 251).astype(np.uint8)
    if lib == "cupy":
        import cupy

        src = cupy.asarray(want)
        dst = cupy.zeros(n, dtype=cupy.uint8)
        back = lambda: cupy.asnumpy(dst)  # noqa: E731
    else:
        import torch

        src = torch.from_numpy(want).to("cuda")
        dst = torch.zeros(n, dtype=torch.uint8, device="cuda")
        back = lambda: dst.cpu().numpy()  # noqa: E731
    for sync in (True, False):
        view[:] = 5
        a.vwrite_to(src, win.offset + 4096, sync=sync)
        if not sync:
            a.fence_wait(a.fence_mark())
        assert (view[4096:4096 + n] == want).all()
        assert (view[:4096] == 5).all() and (view[4096 + n:] == 5).all()
    view[4096:4096 + n] = want[::-1]
    a.vread_from(dst, win.offset + 4096)
    assert (back() == want[::-1]).all()
    # Past the window's end: refused before any byte moves, either way.
    view[:] = 5
    with pytest.raises(accio.OutOfWindow):
        a.vwrite_to(src, win.offset + 8192)
    assert (view == 5).all()
    with pytest.raises(accio.OutOfWindow):
        a.vread_from(dst, win.offset + 8192)
    assert (back() == want[::-1]).all()
    # A read-only array is not written into.
    with pytest.raises(TypeError, match="read-only"):
        a.vread_from(ReadOnlyView(dst), win.offset)


@pytest.mark.skipif(not GPU, reason="no CUDA device with CuPy or PyTorch")
@pytest.mark.parametrize("lib", GPU)
@pytest.mark.parametrize("scheme", ["shm", "tcp"])
def test_device_windows_take_rma_and_export_dlpack(lib, scheme, shm_addr):
    a, b, _lst = connected_pair(shm_addr if scheme == "shm" else "tcp://127.0.0.1:0")
    n = (5 << 20) + 3
    want = (np.arange(n, dtype=np.uint64) * 2654435761 % 251).astype(np.uint8)
    if lib == "cupy":
        import cupy as xp

        arr = xp.zeros(n, dtype=xp.uint8)
        host = xp.asnumpy
        view = xp.from_dlpack
    else:
        import torch

        arr = torch.zeros(n, dtype=torch.uint8, device="cuda")
        host = lambda t: t.cpu().numpy()  # noqa: E731
        view = torch.from_dlpack
    # An array of the caller's, registered in place.
    w = b.register_device(arr, "rw")
    announce(b, a, w)
    assert len(w) == n and w.access == "rw" and w.__dlpack_device__() == (2, w.gpu)
    a.vwrite_to(want, w.offset, sync=True)
    assert (host(arr) == want).all()
    back = np.zeros(n, dtype=np.uint8)
    a.vread_from(back, w.offset + 0)
    assert (back == want).all()
    # Fresh device memory, seen through DLPack without a copy.
    f = b.register_device(n, "rw", gpu=w.gpu)
    announce(b, a, f)
    a.vwrite_to(want[::-1].copy(), f.offset, sync=True)
    assert (host(view(f)) == want[::-1]).all()
    # A read-only window refuses the peer's writes; the bytes stay.
    r = b.register_device(n, "r", gpu=w.gpu)
    announce(b, a, r)
    with pytest.raises(accio.AccessDenied):
        a.vwrite_to(want, r.offset)
    assert (host(view(r)) == 0).all()
    b.unregister(w)
    # A peer learns of a withdrawal no later than a message sent after it.
    b.send(b"withdrawn")
    assert a.recv(timeout=10) == b"withdrawn"
    with pytest.raises(accio.OutOfWindow):
        a.vwrite_to(want[:8], w.offset)
