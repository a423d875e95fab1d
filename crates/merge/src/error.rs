//! The one error type of accio-merge.

use std::io;
use std::path::PathBuf;

/// Result alias of this crate.
pub type Result<T, E = MergeError> = std::result::Result<T, E>;

/// Everything that can go wrong in the merging file service and its container format.
///
/// Messages are lowercase and name the resource (file, address, producer) and the cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// A file operation failed.
    #[error("{op} {}: {source}", path.display())]
    File {
        /// What was attempted (`creating`, `writing block 7 (2097152 bytes) to`, ...).
        op: String,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A container file is being written by another writer, which holds its lock (see
    /// `container::LockHolder`): refused before a byte of it was changed.
    #[error("{} is being written by {holder}, which holds its lock: refusing to {action} it", path.display())]
    Locked {
        /// The file.
        path: PathBuf,
        /// The process holding the lock.
        holder: crate::container::LockHolder,
        /// What was refused (`overwrite`, `recover`).
        action: &'static str,
    },
    /// A container file is not (or no longer) in the accio container format.
    #[error("{}: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the offset.
        reason: String,
    },
    /// A transport call failed.
    #[error(transparent)]
    Transport(#[from] accio::Error),
    /// The other side broke the merge protocol.
    #[error("merge protocol error with {peer}: {reason}")]
    Protocol {
        /// The peer's address (or producer id).
        peer: String,
        /// What was wrong.
        reason: String,
    },
    /// The merger reported a failure to this producer (e.g. its output file system is full).
    #[error("merger {merger} failed: {reason}")]
    Merger {
        /// The merger's address.
        merger: String,
        /// The merger's message, naming the file and the cause.
        reason: String,
    },
    /// The sink refused a block (wrong schema, undecodable batch, ...).
    #[error("sink {}: {reason}", path.display())]
    Sink {
        /// The output file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A sink refused one producer's block (wrong schema, undecodable batch). Only that
    /// producer is cut off; the merge goes on.
    #[error("block {seq} of producer {producer} refused by {}: {reason}", path.display())]
    Rejected {
        /// The output file.
        path: PathBuf,
        /// The producer.
        producer: u32,
        /// The block's sequence number.
        seq: u64,
        /// Why.
        reason: String,
    },
    /// A payload, record or batch does not fit a buffer.
    #[error("{what} of {len} bytes does not fit the {limit}-byte buffer")]
    TooLarge {
        /// What did not fit (`record`, `block`, `arrow batch`).
        what: &'static str,
        /// Its size.
        len: usize,
        /// The buffer capacity.
        limit: usize,
    },
    /// A configuration value is unusable.
    #[error("invalid merge configuration: {0}")]
    Config(String),
    /// A block in GPU memory could not be read ([`crate::Producer::write_device`]): not
    /// device memory, no driver or GPU, a failed copy.
    #[error("block from device memory: {0}")]
    Device(#[from] accio_device::Error),
    /// A deadline passed.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        after: std::time::Duration,
    },
}

impl MergeError {
    pub(crate) fn file(op: impl Into<String>, path: impl Into<PathBuf>, source: io::Error) -> Self {
        MergeError::File {
            op: op.into(),
            path: path.into(),
            source,
        }
    }

    pub(crate) fn format(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        MergeError::Format {
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn protocol(peer: impl std::fmt::Display, reason: impl Into<String>) -> Self {
        MergeError::Protocol {
            peer: peer.to_string(),
            reason: reason.into(),
        }
    }

    /// True for a full file system or quota (`ENOSPC`, `EDQUOT`) anywhere in the chain.
    pub fn is_no_space(&self) -> bool {
        match self {
            MergeError::File { source, .. } => matches!(
                source.raw_os_error(),
                Some(libc::ENOSPC) | Some(libc::EDQUOT)
            ),
            MergeError::Merger { reason, .. } => reason.contains("No space left on device"),
            _ => false,
        }
    }
}
