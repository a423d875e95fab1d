"""accio: SCIF-style endpoints, zero-copy NumPy windows and a merging file service.

``World()`` makes this process a rank of the world ``accio run -n N`` (or mpirun) started:
``rank``, ``size``, ``endpoint(r)`` to any other rank over the backend the rule picks
(shared memory on one node), ``barrier()``.

Endpoints (``listen``/``connect``) move messages and do one-sided RMA into registered
windows; a ``Window`` exposes the buffer protocol, so ``numpy.frombuffer(window, dtype)``
is a view of the registered memory. A ``Merger`` writes the blocks of many ``Producer``s
(threads or processes) into one file; ``accio.open`` reads such a file back.
Every error is an ``accio.Error``; the GIL is released around every blocking call.
Offsets are offsets in an endpoint's registered address space everywhere: ``window.offset
+ i`` names byte ``i`` of a window, for the Endpoint's RMA and ``fence_signal`` and for the
Window's ``load_u64``, ``store_u64`` and ``wait_u64`` alike.
"""

# The public namespace is accio's API only (``__all__``, checked by the tests): everything
# else this module needs is imported under a leading underscore.
from __future__ import annotations

import mmap as _mmap
import os as _os
import typing as _typing

from . import results
from ._accio import (
    AccessDenied,
    AddrInUse,
    BadAddress,
    DeviceWindow,
    Endpoint,
    Error,
    InvalidArgument,
    IoError,
    Listener,
    MergeFailed,
    Merger,
    MessageTooLarge,
    OutOfMemory,
    OutOfWindow,
    PeerGone,
    Producer,
    ProducerBuffer,
    ProtocolError,
    Timeout,
    Unsupported,
    Untrusted,
    Window,
    World,
    connect,
    listen,
)
from ._accio import container_index as _container_index
from ._accio import container_verify as _container_verify

__all__ = [
    "AccessDenied",
    "AddrInUse",
    "BadAddress",
    "Block",
    "Container",
    "DeviceWindow",
    "Endpoint",
    "Error",
    "InvalidArgument",
    "IoError",
    "Listener",
    "MergeFailed",
    "Merger",
    "MessageTooLarge",
    "OutOfMemory",
    "OutOfWindow",
    "PeerGone",
    "Producer",
    "ProducerBuffer",
    "ProtocolError",
    "Timeout",
    "Unsupported",
    "Untrusted",
    "Window",
    "World",
    "connect",
    "listen",
    "open",
    "results",
]


class Block(_typing.NamedTuple):
    """One block of a container file: who wrote it, its sequence number, its kind
    ("raw", "records", "arrow-ipc", ...) and its payload (a memoryview of the mapped file)."""

    producer: int
    seq: int
    kind: str
    data: memoryview


class Container:
    """An accio container file opened for reading (see ``accio.open``).

    The file is mapped read-only; every ``Block.data`` is a slice of the mapping, not a
    copy. Iterating yields blocks in file order; ``len()`` is the number of blocks.
    """

    def __init__(self, path: _typing.Union[str, "_os.PathLike[str]"]) -> None:
        self.path = _os.fspath(path)
        self._index = _container_index(self.path)
        with _builtin_open(self.path, "rb") as f:
            size = _os.fstat(f.fileno()).st_size
            self._map = _mmap.mmap(f.fileno(), size, prot=_mmap.PROT_READ) if size else None
        self._view = memoryview(self._map) if self._map is not None else memoryview(b"")

    def __len__(self) -> int:
        return len(self._index)

    def __iter__(self) -> _typing.Iterator[Block]:
        for producer, seq, kind, off, length, _crc in self._index:
            yield Block(producer, seq, kind, self._view[off : off + length])

    def producers(self) -> dict:
        """Blocks and payload bytes per producer id: ``{id: (blocks, bytes)}``."""
        out: dict = {}
        for producer, _seq, _kind, _off, length, _crc in self._index:
            b, n = out.get(producer, (0, 0))
            out[producer] = (b + 1, n + length)
        return out

    def verify(self) -> bool:
        """Checks every block's CRC32C and the index; True when the file is whole.
        Raises ``MergeFailed`` naming the damage otherwise."""
        whole, text = _container_verify(self.path)
        if not whole:
            raise MergeFailed(f"{self.path}: not whole: {text}")
        return True

    def close(self) -> None:
        """Releases the mapping (fails with BufferError while block views are alive)."""
        self._view.release()
        if self._map is not None:
            self._map.close()

    def __enter__(self) -> "Container":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<accio.Container {self.path!r} blocks={len(self)}>"


_builtin_open = open


def open(path: _typing.Union[str, "_os.PathLike[str]"]) -> Container:  # noqa: A001 (accio.open)
    """Opens the accio container file at ``path``; iterate it for its blocks
    ``(producer, seq, kind, data)``."""
    return Container(path)


# ``from __future__ import annotations`` binds the name ``annotations`` here; its effect is
# on how this file was compiled, so the name can go.
del annotations
