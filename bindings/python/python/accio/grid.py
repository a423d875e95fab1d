"""The grid communicator over NumPy: a 2D or 3D grid decomposed over the ranks of an
``accio.World``, each rank's part with ghost layers, and their exchange.

::

    import accio, accio.grid

    with accio.World() as world:
        ex = accio.grid.HaloExchange(world, (4096, 4096))
        u = ex.array                 # owned cells and ghosts, a NumPy view
        ...                          # compute on u in place
        sync, communicate = ex.exchange()   # ghosts now hold the neighbours' faces

The exchange is the Rust crate ``accio-grid`` underneath: over shared memory each face is
written straight into the neighbour's ghost cells (``path="rma"``), strided faces packed
once; ``python3 -m accio.demo.laplace`` is a Jacobi solver built on it.
"""

from ._accio import HaloExchange

__all__ = ["HaloExchange"]
