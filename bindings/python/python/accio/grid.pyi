"""Typed stubs of accio.grid (the class lives in accio._accio)."""

from typing import Optional, Sequence, Tuple

import numpy

from . import World

class HaloExchange:
    """One rank's part of a grid decomposed over a world, and the exchange of its halos."""

    def __init__(
        self,
        world: Optional[World],
        shape: Sequence[int],
        *,
        dims: Optional[Sequence[int]] = None,
        periodic: Optional[Sequence[bool]] = None,
        halo: int = 1,
        path: str = "rma",
        dtype: str = "float64",
        array: str = "auto",
        spin: Optional[float] = None,
        timeout: float = 60.0,
    ) -> None:
        """Decomposes a grid of ``shape`` (2 or 3 extents, the last contiguous) over the
        ranks of ``world`` (None: this process alone) and sets up this rank's part with
        ghost layers ``halo`` thick. Collective: every rank calls it with the same
        arguments. ``dims``: ranks per axis (None: chosen to keep faces small);
        ``periodic``: which axes wrap; ``path``: "rma" (faces written straight into the
        neighbours' ghosts) or "messages"; ``dtype``: "float64" or "float32"; ``array``:
        where the array lives, "shared" (memory the neighbours write into), "private" (on
        huge pages, faces copied in from a staging area) or "auto" (private for arrays of
        8 MiB and more where the host gives huge pages to private memory only); ``spin``:
        seconds a wait for a neighbour polls before it hands its core over at every look
        (None: none where the node runs more ranks than their CPUs, as MPI libraries do,
        else 100 us)."""
    def exchange(self) -> Tuple[float, float]:
        """Fills every ghost layer from the neighbours' faces (collective with the
        neighbours); returns ``(sync, communicate)`` in seconds."""
    @property
    def array(self) -> numpy.ndarray:
        """This rank's subgrid, owned cells and ghosts, as a writable NumPy view of the
        memory the exchange moves (shape ``local_shape``)."""
    @property
    def interior(self) -> numpy.ndarray:
        """The owned cells of ``array``, a view."""
    @property
    def array_memory(self) -> str:
        """Where the array lives: "shared" or "private"."""
    @property
    def dtype(self) -> str:
        """"float64" or "float32"."""
    @property
    def local_shape(self) -> Tuple[int, ...]:
        """The local array's shape: owned cells + 2 × halo per axis."""
    @property
    def halo(self) -> Tuple[int, ...]:
        """Ghost layers per axis (0 along an axis neither split nor periodic)."""
    @property
    def start(self) -> Tuple[int, ...]:
        """Global index of this rank's first owned cell, per axis."""
    @property
    def owned(self) -> Tuple[int, ...]:
        """Owned cells per axis."""
    @property
    def shape(self) -> Tuple[int, ...]:
        """The whole grid's shape."""
    @property
    def dims(self) -> Tuple[int, ...]:
        """Ranks per axis."""
    @property
    def coords(self) -> Tuple[int, ...]:
        """This rank's position in the rank grid."""
    @property
    def rank(self) -> int:
        """This rank."""
