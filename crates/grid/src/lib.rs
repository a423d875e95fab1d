//! # accio-grid
//!
//! The grid communicator of seed 001's `MPI_COMMUNICATOR` / `SCIF_COMMUNICATOR`, over any
//! accio endpoint: a Cartesian decomposition of a 2D or 3D grid over ranks
//! ([`Decomposition`]), each rank's subgrid with ghost layers ([`Layout`]), and halo
//! exchange of any plain-data element type ([`HaloExchange`]), blocking or started and
//! waited for, by two-sided messages or by one-sided RMA straight into the neighbour's
//! ghosts. A checked mode carries each cell's owner and global coordinates with it and
//! verifies where every ghost came from. [`laplace`] is the seed's streaming Jacobi workload
//! on top, timed by phase.
//!
//! ```
//! use accio_grid::{Decomposition, ExchangeOptions, HaloExchange, Path};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // One rank holding a periodic 8x8 grid whole: its halos wrap onto itself.
//! let d = Decomposition::new(&[8, 8], 1, None, &[true, true], 1)?;
//! let opts = ExchangeOptions { path: Path::Rma, checked: true, ..Default::default() };
//! let mut ex = HaloExchange::<f64>::new(&d, 0, opts, &mut |_| unreachable!())?;
//! let l = ex.layout().clone();
//! ex.field_mut()[l.index([0, 1, 1])] = 42.0; // global cell (0, 0)
//! ex.exchange()?;
//! assert_eq!(ex.field()[l.index([0, 9, 1])], 42.0); // its copy below the last row
//! # Ok(())
//! # }
//! ```
//!
//! With several ranks, `connect(peer)` returns an endpoint to that rank's exchange (a rank
//! world's `endpoint(rank)`); the crate's tests build such meshes over `shm` and `tcp`.

mod decomp;
mod error;
mod exchange;
pub mod laplace;
mod layout;

pub use decomp::{auto_dims, parse_shape, shape_name, Block, Decomposition, Dir};
pub use error::{GridError, Result};
pub use exchange::{
    ArrayMemory, BoxError, ConnectFn, ExchangeOptions, ExchangeTimes, HaloExchange, InRunProbe,
    Path, Pending, SideInfo, Tag, STREAM_ARRAY_BYTES,
};
pub use layout::{Layout, Runs};
