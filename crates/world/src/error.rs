//! The world's typed error.

use std::time::Duration;

/// What went wrong in the world; each names the rank (or file) and the cause.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    /// A rank is outside the world, disagrees with it, or died.
    #[error("rank {rank}: {cause}")]
    Rank {
        /// The rank concerned.
        rank: usize,
        /// What is wrong with it.
        cause: String,
    },
    /// Bootstrap could not complete (rendezvous unreachable, launcher gone, timeout).
    #[error("world bootstrap of rank {rank}: {cause}")]
    Bootstrap {
        /// The rank bootstrapping.
        rank: usize,
        /// Why it failed.
        cause: String,
    },
    /// A variable of the environment or a config file is malformed.
    #[error("{what}: {cause}")]
    Config {
        /// The variable or `file:line`.
        what: String,
        /// What is wrong.
        cause: String,
    },
    /// What this rank waited for from `peer` did not come in time: the pair's endpoint,
    /// or the peer's message in a barrier (which the next call resumes).
    #[error("rank {rank}: no {waited} from rank {peer} over {scheme} within {after:?}")]
    Timeout {
        /// This rank.
        rank: usize,
        /// The peer.
        peer: usize,
        /// The backend.
        scheme: String,
        /// What it waited for: `"endpoint"`, `"barrier message"`.
        waited: &'static str,
        /// How long it waited.
        after: Duration,
    },
    /// The transport failed.
    #[error("rank {rank} to rank {peer} over {scheme}: {source}")]
    Transport {
        /// This rank.
        rank: usize,
        /// The peer.
        peer: usize,
        /// The backend.
        scheme: String,
        /// The backend's error (boxed: it is large, and every world call returns it).
        #[source]
        source: Box<accio::Error>,
    },
}

/// The world's result type.
pub type Result<T, E = WorldError> = std::result::Result<T, E>;
