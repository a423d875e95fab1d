//! Errors of the grid communicator: typed, naming the ranks, the direction and the cells.

use crate::decomp::Dir;

/// What went wrong in a decomposition, an exchange or a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GridError {
    /// The arguments describe no valid decomposition (dims that do not multiply to the
    /// number of ranks, a grid smaller than ranks × halo, a bad rank).
    #[error("grid {grid}: {reason}")]
    Decomposition {
        /// The grid in the `NZxNYxNX` notation.
        grid: String,
        /// The exact cause.
        reason: String,
    },
    /// Two ranks disagree about the grid (different shapes, dims or element types).
    #[error("rank {rank} and rank {peer} disagree about the grid: {reason}")]
    Mismatch {
        /// This rank.
        rank: usize,
        /// The peer.
        peer: usize,
        /// What differs.
        reason: String,
    },
    /// Checked mode found a halo cell that did not land where it belongs.
    #[error(
        "checked mode: rank {rank}'s ghost cell on side {dir} at {expected_at} should hold rank \
         {expected_rank}'s cell {expected_at}, but holds rank {found_rank}'s cell {found_at}"
    )]
    Misplaced {
        /// The receiving rank.
        rank: usize,
        /// The side of the receiver the ghost cell lies on.
        dir: Dir,
        /// The rank whose cell belongs there.
        expected_rank: usize,
        /// The global coordinates of the ghost cell (`(z, y, x)`, or `(y, x)` in 2D).
        expected_at: String,
        /// The rank that sent what is there.
        found_rank: u32,
        /// The global coordinates of the cell that is there.
        found_at: String,
    },
    /// A peer rank failed or vanished during an exchange.
    #[error("rank {rank}: exchange with rank {peer} ({dir}) failed: {source}")]
    Peer {
        /// This rank.
        rank: usize,
        /// The peer rank.
        peer: usize,
        /// The side of this rank the peer lies on, or what was being done.
        dir: String,
        /// The endpoint's error (`PeerGone` when the peer died).
        #[source]
        source: accio_core::Error,
    },
    /// A rank could not get an endpoint to a neighbour.
    #[error("rank {rank}: connecting to rank {peer}: {source}")]
    Connect {
        /// This rank.
        rank: usize,
        /// The neighbour.
        peer: usize,
        /// Why (the rank world's or the backend's error).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A wait for a neighbour ran past the timeout.
    #[error("rank {rank}: rank {peer} ({dir}) did not {what} within {after:?}")]
    Timeout {
        /// This rank.
        rank: usize,
        /// The peer rank.
        peer: usize,
        /// The side of this rank the peer lies on.
        dir: Dir,
        /// What was awaited.
        what: &'static str,
        /// The timeout.
        after: std::time::Duration,
    },
    /// An endpoint call outside an exchange (setup, memory) failed.
    #[error("{what}: {source}")]
    Endpoint {
        /// What was being done.
        what: String,
        /// The endpoint's error.
        #[source]
        source: accio_core::Error,
    },
}

/// The result type of this crate.
pub type Result<T> = std::result::Result<T, GridError>;
