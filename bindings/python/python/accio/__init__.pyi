"""Typed stubs of the accio package (the native part lives in accio._accio).

Every offset is one in an endpoint's registered address space: ``window.offset + i`` for
byte ``i`` of a window, in Endpoint and Window methods alike. A negative or too-large size,
offset, count or timeout raises ``InvalidArgument`` (a ``ValueError`` too) naming the call
and the argument."""

import os
from types import TracebackType
from typing import Any, Dict, Iterator, NamedTuple, Optional, Tuple, Type, Union

from typing_extensions import Buffer as _Buffer  # PEP 688 (collections.abc.Buffer in 3.12)

from . import results as results

_Path = Union[str, "os.PathLike[str]"]

class Error(Exception):
    """Base class of every error accio raises; the message is the Rust error's."""

class PeerGone(Error):
    """The peer closed the connection or died."""

class Timeout(Error):
    """A deadline passed before the call completed."""

class BadAddress(Error):
    """An address that cannot be parsed or reached."""

class AddrInUse(Error):
    """Another listener holds the address."""

class Unsupported(Error):
    """The backend does not offer the operation."""

class OutOfWindow(Error):
    """An RMA range is not inside one registered window."""

class AccessDenied(Error):
    """The window lacks the access right the call needs."""

class MessageTooLarge(Error):
    """A message (or block) exceeds the operation's limit."""

class ProtocolError(Error):
    """The peer broke the wire protocol."""

class InvalidArgument(Error, ValueError):
    """An argument is invalid: out of range (negative, too large), misaligned, or an option
    none of the listed ones. Also a ValueError."""

class IoError(Error):
    """An operating-system call failed."""

class Untrusted(Error):
    """The peer is not who may connect: another user (shm), or no proof of the shared secret (tcp)."""

class OutOfMemory(Error):
    """A request for more memory than the limit allows, refused before any was touched."""

class MergeFailed(Error):
    """The merging file service failed (file, format, merger, sink)."""

class World:
    """This process as one rank of a world, as ``mpi4py.MPI.COMM_WORLD`` is.

    ``accio run -n 4 python3 prog.py`` starts 4 ranks; ``mpirun -n 4 python3 prog.py``
    does too when accio was built with MPI (``MATURIN_PEP517_ARGS="--features mpi" pip
    install ./bindings/python``). Each pair of ranks talks over the backend the rule picks:
    ``shm`` on one node, else ``mpi`` under mpirun, else ``tcp`` (``ACCIO_TRANSPORT`` and
    ``ACCIO_WORLD_CONFIG`` override it; ``choice(r)`` says what was picked and why).

    ::

        with accio.World() as world:
            peer = (world.rank + 1) % world.size
            ep = world.endpoint(peer)
    """

    def __init__(self) -> None:
        """Joins the world this process was started in, waiting for every rank to join
        (``ACCIO_WORLD_TIMEOUT_MS``, 10 s by default; ``accio run --timeout``). Raises
        ``Error`` naming what is missing when the process was not started as a rank."""
    @property
    def rank(self) -> int:
        """This process's rank, 0 .. size - 1."""
    @property
    def size(self) -> int:
        """The number of ranks."""
    @property
    def node(self) -> str:
        """This rank's node, as text."""
    @property
    def node_ranks(self) -> list[int]:
        """The ranks on this rank's node, itself included, ascending."""
    def choice(self, rank: int) -> Tuple[str, str]:
        """The backend picked for the pair (this rank, ``rank``) and why:
        ``("shm", "same node (...)")``."""
    def endpoint(self, rank: int) -> Endpoint:
        """The endpoint to ``rank``. The first call for a rank connects and is collective
        for the pair (``rank`` calls ``endpoint`` for this rank too); later calls return
        the same endpoint; after its ``close()`` the next call connects anew. Threads asking
        for the same rank at once share one connection."""
    def barrier(self, timeout: Optional[float] = None) -> None:
        """Waits until every rank has called ``barrier`` (``timeout`` seconds, None:
        as long as it takes; a dead rank raises ``PeerGone``). Ctrl-C interrupts it; after
        ``Timeout`` a new call resumes the same barrier."""
    def close(self) -> None:
        """Closes this world's endpoints and leaves it (idempotent)."""
    def __enter__(self) -> World: ...
    def __exit__(self, *args: object) -> bool: ...

def listen(addr: str) -> Listener:
    """Binds ``addr`` (``shm://NAME`` or ``tcp://HOST:PORT``) and returns a Listener."""

def connect(addr: str, timeout: float = 10.0) -> Endpoint:
    """Connects to the listener at ``addr``, giving up after ``timeout`` seconds.

    A listener not bound yet is waited for, so the two sides may start in any order;
    after ``timeout`` with nobody listening it raises ``Timeout``, saying so."""

class Listener:
    """A bound address accepting connections."""

    @property
    def addr(self) -> str:
        """The bound address (with the real port when port 0 was asked for)."""
    def accept(self, timeout: Optional[float] = None) -> Endpoint:
        """Waits for the next connection, at most ``timeout`` seconds (None: forever).
        Ctrl-C interrupts the wait."""

class Endpoint:
    """One end of a connection: messages, registered windows, RMA, fences."""

    @property
    def backend(self) -> str:
        """The backend's name ("shm", "tcp")."""
    @property
    def local_addr(self) -> str:
        """This endpoint's own address."""
    @property
    def peer_addr(self) -> str:
        """The peer's address."""
    def send(self, data: _Buffer) -> None:
        """Sends one message: any contiguous buffer."""
    def recv(self, timeout: Optional[float] = None) -> bytes:
        """Receives the next message, waiting at most ``timeout`` seconds (None: forever).
        Ctrl-C interrupts the wait."""
    def recv_into(self, buffer: _Buffer, timeout: Optional[float] = None) -> int:
        """Receives the next message into a writable buffer; returns its length."""
    def register(self, length: int, access: str = "rw") -> Window:
        """Registers ``length`` bytes of fresh zeroed memory as a window the peer may
        access with ``access`` ("r", "w", "rw", "none")."""
    def unregister(self, window: Union[Window, int]) -> None:
        """Withdraws a window (given as the Window or its ``offset``)."""
    def write_to(self, local_offset: int, length: int, remote_offset: int, sync: bool = False) -> None:
        """Copies ``length`` bytes at ``local_offset`` (a local ``window.offset + i``) to the
        peer's ``remote_offset`` (a peer window's offset + i)."""
    def read_from(self, local_offset: int, length: int, remote_offset: int, sync: bool = False) -> None:
        """Copies ``length`` bytes at the peer's ``remote_offset`` to ``local_offset``
        (registered-space offsets, as in ``write_to``)."""
    def register_device(self, memory: Any, access: str = "rw", gpu: int = 0) -> "DeviceWindow":
        """Registers GPU memory as a window (the ``cuda`` build): a C-contiguous CUDA
        array, used in place and kept alive, or a length of fresh zeroed memory on GPU
        ``gpu``."""
    def vwrite_to(self, buffer: Any, remote_offset: int, sync: bool = False) -> None:
        """Copies any contiguous buffer (NumPy array, bytes) to the peer's
        ``remote_offset`` straight from its memory; with the ``cuda`` build also a
        C-contiguous CuPy or PyTorch CUDA array, through pinned staging."""
    def vread_from(self, buffer: Any, remote_offset: int, sync: bool = False) -> None:
        """Fills a writable contiguous buffer (or, with the ``cuda`` build, a C-contiguous
        CUDA array) from the peer's ``remote_offset``."""
    def fence_mark(self) -> int:
        """Marks every RMA issued so far."""
    def fence_wait(self, mark: int) -> None:
        """Waits until every RMA named by ``mark`` (from this endpoint's ``fence_mark``)
        completed at the peer. A mark never issued raises InvalidArgument."""
    def fence_signal(
        self, local: Optional[Tuple[int, int]] = None, remote: Optional[Tuple[int, int]] = None
    ) -> None:
        """After every earlier RMA completed, stores ``(offset, value)`` into a local and/or
        a remote window word (registered-space offsets, 8-byte aligned): the waiting side
        calls ``Window.wait_u64`` with the same offset."""
    def close(self) -> None:
        """Closes the connection; the peer's calls raise PeerGone."""
    def __enter__(self) -> Endpoint: ...
    def __exit__(self, *args: object) -> bool: ...

class DeviceWindow:
    """A registered window of GPU memory (``Endpoint.register_device``): the peer reaches
    it by RMA at ``offset``; ``torch.from_dlpack(w)`` / ``cupy.from_dlpack(w)`` view it."""

    @property
    def offset(self) -> int:
        """Offset of the window in its endpoint's registered address space."""
    @property
    def access(self) -> str:
        """The peer's rights ("r", "w", "rw", "none")."""
    @property
    def gpu(self) -> int:
        """The GPU the memory is on."""
    def __len__(self) -> int: ...
    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...

class Window:
    """Registered memory, exposing the buffer protocol (writable bytes):
    ``numpy.frombuffer(window, dtype)`` is a zero-copy view."""

    @property
    def offset(self) -> int:
        """Offset of the window in its endpoint's registered address space."""
    @property
    def access(self) -> str:
        """The peer's rights ("r", "w", "rw", "none")."""
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int) -> memoryview: ...
    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any:
        """A DLPack capsule of the window's memory, 1-D unsigned bytes:
        ``numpy.from_dlpack(window)`` (or PyTorch's) is a view, no copy, which keeps the
        memory alive. Raises BufferError for a copy, another device or a stream."""
    def __dlpack_device__(self) -> Tuple[int, int]:
        """``(1, 0)``: host memory."""
    def load_u64(self, offset: int) -> int:
        """Loads the 8-byte word at ``offset`` (``window.offset + i``; acquire)."""
    def store_u64(self, offset: int, value: int) -> None:
        """Stores the 8-byte word at ``offset`` (``window.offset + i``; release)."""
    def wait_u64(self, offset: int, value: int, timeout: Optional[float] = None) -> None:
        """Waits until the word at ``offset`` (``window.offset + i``: the offset a peer's
        fence_signal names) equals ``value``. A position ``i`` alone (below
        ``window.offset``) raises OutOfWindow saying so."""

class Merger:
    """A merging file service: many Producers, one output file."""

    def __init__(
        self,
        addr: str,
        path: _Path,
        *,
        format: str = "container",
        schema: Any = None,
        budget: Optional[int] = None,
        slot_bytes: Optional[int] = None,
        credit: Optional[int] = None,
        sync: str = "close",
    ) -> None:
        """Starts a merger on ``addr`` writing ``path`` (format "container", "arrow" or
        "parquet"; the tabular ones need a pyarrow ``schema``)."""
    @property
    def addr(self) -> str:
        """The address producers connect to."""
    @property
    def path(self) -> str:
        """The output file."""
    def stats(self) -> Dict[str, int]:
        """Counters: active, finished, lost, dropped, blocks, bytes, slots, peak_slots."""
    def wait_done(self, producers: int, timeout: Optional[float] = None) -> Dict[str, int]:
        """Waits until ``producers`` producers have finished or were lost."""
    def close(self, patience: Optional[float] = None) -> Dict[str, Any]:
        """Waits for the producers, closes the file, returns the summary."""
    def __enter__(self) -> Merger: ...
    def __exit__(self, *args: object) -> bool: ...

class ProducerBuffer:
    """A buffer a Producer lends (``Producer.buffer()``), writable, with the buffer
    protocol. Views of it (NumPy arrays, memoryviews) must be gone before ``commit`` or
    ``release``, which raise ``BufferError`` otherwise: a view kept after would write into
    memory that is then another block's."""

    @property
    def capacity(self) -> int:
        """Bytes the buffer holds."""
    def commit(self, length: int) -> int:
        """Writes the first ``length`` bytes as one block; returns its sequence number."""
    def release(self) -> None:
        """Gives the buffer back unused (no-op once committed or released)."""
    def __enter__(self) -> ProducerBuffer: ...
    def __exit__(self, *args: object) -> bool:
        """Releases the buffer if it was not committed (with views still alive, it goes
        back once they and this object are gone)."""

class Producer:
    """One producer's connection to a Merger (one per thread or process)."""

    def __init__(self, addr: str, timeout: float = 10.0) -> None:
        """Connects to the merger at ``addr``."""
    @property
    def id(self) -> int:
        """This producer's id in the output file."""
    @property
    def max_block(self) -> int:
        """The largest block ``write`` takes."""
    def buffer(self) -> ProducerBuffer:
        """Lends a buffer of ``max_block`` bytes to fill in place (on shm the merger's own
        memory: the producer never copies the block). Fill it through views
        (``numpy.frombuffer(buf, dtype)``), delete them, then ``buf.commit(length)``; the
        producer's other calls are refused until the buffer is committed or released."""
    def write(self, data: Any) -> int:
        """Writes one block (a contiguous buffer, a C-contiguous CuPy or PyTorch CUDA array
        with the ``cuda`` build, or a pyarrow RecordBatch for Arrow and Parquet mergers);
        returns its sequence number."""
    def write_record(self, data: _Buffer) -> None:
        """Appends one record; records are packed into blocks."""
    def flush_records(self) -> None:
        """Commits the block of packed records now."""
    def wait_acked(self) -> int:
        """Waits until every block is in the file; returns how many."""
    def finish(self) -> Dict[str, int]:
        """Flushes, waits for every block and says goodbye: {"id", "blocks", "bytes"}."""
    def __enter__(self) -> Producer: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> bool: ...

class Block(NamedTuple):
    """One block of a container file."""

    producer: int
    seq: int
    kind: str
    data: memoryview

class Container:
    """A container file mapped for reading; iterate it for Blocks."""

    path: str
    def __init__(self, path: _Path) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Block]: ...
    def producers(self) -> Dict[int, Tuple[int, int]]:
        """``{producer: (blocks, bytes)}``."""
    def verify(self) -> bool:
        """Checks every CRC and the index; raises MergeFailed unless whole."""
    def close(self) -> None:
        """Releases the mapping."""
    def __enter__(self) -> Container: ...
    def __exit__(self, *exc: object) -> None: ...

def open(path: _Path) -> Container:
    """Opens an accio container file for reading its blocks."""
