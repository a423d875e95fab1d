//! # accio-mpi
//!
//! The endpoint contract over MPI, for ranks that MPI launched (`mpirun`, `srun`):
//! addresses `mpi://RANK[:PORT]` name a rank of `MPI_COMM_WORLD` and a port at it.
//!
//! - **Messages** are MPI two-sided messages (`MPI_Isend`, a receive kept posted with
//!   `MPI_Irecv`), on tags of their own per connection and direction, so MPI's ordering is
//!   the contract's ordering (a message longer than 2 KiB goes in two parts; see `recvq`).
//! - **Windows** are memory attached to one MPI-3 dynamic window on `MPI_COMM_WORLD`
//!   (`MPI_Win_create_dynamic`, `MPI_Win_attach`), opened once with `MPI_Win_lock_all`;
//!   RMA is `MPI_Put`/`MPI_Get`, completion `MPI_Win_flush`. Each endpoint publishes its
//!   window table in attached memory; the initiator checks every range against its copy and
//!   re-reads the peer's table (`MPI_Get`) only when a check fails, so a correct RMA costs
//!   no extra round trip and a bad one fails before any byte moves.
//! - **Device windows** (`register_device`) are served by their owner's CPU, as messages
//!   on tags of their own: MPI libraries without CUDA support cannot put into GPU memory
//!   (see [`device_wire`]). A call with a peer device window returns once the owner
//!   answered.
//! - **`fence_signal`** flushes every earlier RMA to the peer (`MPI_Win_flush`), then
//!   stores the values: the peer that sees the value sees the data.
//! - **`map_remote`** is unsupported (windows are private memory).
//!
//! What MPI cannot give, declared in [`Capabilities`](accio_core::Capabilities) and in the
//! docs of [`BACKEND`]: a peer *process* that dies takes the job with it (mpirun aborts
//! every rank), so only a peer's *close* is reported as `PeerGone`; a peer's RMA is not
//! re-checked at the target (the target CPU takes no part), so a lying initiator is stopped
//! only by MPI's own checks of attached memory.
//!
//! MPI is initialized (`MPI_THREAD_MULTIPLE`) by the first `mpi://` call or by [`init`];
//! both are collective: every rank must make one. Without the `mpi` feature every call
//! fails with a clear error.

pub mod device_wire;
#[cfg(feature = "mpi")]
mod imp;
#[cfg(feature = "mpi")]
mod recvq;
#[cfg(feature = "mpi")]
mod sendq;

use accio_core::{Addr, Backend, Endpoint, Error, Listener, Options, Result};
use std::time::Duration;

/// The backend's registry entry.
pub const BACKEND: Backend = Backend {
    scheme: "mpi",
    summary: "MPI two-sided messages and MPI-3 RMA windows (ranks launched by mpirun/srun)",
    listen,
    connect,
};

/// True when this build has the MPI backend (the `mpi` feature).
pub const BUILT: bool = cfg!(feature = "mpi");

/// Whether an MPI launcher started this process (Open MPI, MPICH/Hydra, Slurm PMI).
pub fn launched_by_mpi() -> bool {
    [
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_RANK",
        "MPI_LOCALNRANKS",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some())
}

/// Initializes MPI (collective: every rank calls it, or makes its first `mpi://` call)
/// and returns this rank and the world size.
pub fn init() -> Result<(usize, usize)> {
    #[cfg(feature = "mpi")]
    {
        let m = imp::mpi()?;
        Ok((m.rank as usize, m.size as usize))
    }
    #[cfg(not(feature = "mpi"))]
    Err(not_built("mpi init"))
}

/// Every rank's `record`, in rank order (`MPI_Allgather` of lengths, then of the bytes).
/// Collective.
pub fn allgather(record: &[u8]) -> Result<Vec<Vec<u8>>> {
    #[cfg(feature = "mpi")]
    {
        imp::allgather(record)
    }
    #[cfg(not(feature = "mpi"))]
    {
        let _ = record;
        Err(not_built("mpi allgather"))
    }
}

#[cfg(not(feature = "mpi"))]
fn not_built(what: &str) -> Error {
    Error::BadAddress {
        addr: what.to_string(),
        reason: "this build has no MPI backend (build accio with `--features mpi`)".into(),
    }
}

fn listen(addr: &Addr, _opts: &Options) -> Result<Box<dyn Listener>> {
    #[cfg(feature = "mpi")]
    {
        imp::listen(addr)
    }
    #[cfg(not(feature = "mpi"))]
    Err(not_built(&addr.to_string()))
}

fn connect(addr: &Addr, timeout: Duration, _opts: &Options) -> Result<Box<dyn Endpoint>> {
    #[cfg(feature = "mpi")]
    {
        imp::connect(addr, timeout)
    }
    #[cfg(not(feature = "mpi"))]
    {
        let _ = timeout;
        Err(not_built(&addr.to_string()))
    }
}

#[allow(dead_code)]
fn unused(_: Error) {}
