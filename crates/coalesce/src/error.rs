//! Typed errors of the coalescing layer.
//!
//! Messages are lowercase and name the resource and the exact cause, as everywhere in accio:
//! `line from sender 3 for window offset 0x1040 names destination 2, but this receiver is 1`.

use std::ops::Range;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the cache, the applier and the aggregation buffers can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The endpoint under the cache or aggregator failed (peer gone, out-of-window RMA, ...).
    #[error(transparent)]
    Endpoint(#[from] accio_core::Error),
    /// A configuration value is out of its allowed range.
    #[error("invalid {what}: {reason}")]
    Config {
        /// The setting (`cache geometry`, `aggregator memory`, ...).
        what: &'static str,
        /// Why it cannot be used.
        reason: String,
    },
    /// A write the cache cannot take: not a whole number of lines, or outside the peer
    /// window. Nothing of it was cached.
    #[error("{op} of {len} bytes at window offset {offset:#x}: {reason}")]
    BadWrite {
        /// `insert` or `write`.
        op: &'static str,
        /// Window-relative offset asked for.
        offset: u64,
        /// Length asked for.
        len: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The peer sent bytes that are not a valid coalescing message. Nothing of the message
    /// was applied or delivered.
    #[error("protocol error from {peer}: {reason}")]
    Protocol {
        /// The peer's address.
        peer: String,
        /// What was wrong with its bytes.
        reason: String,
    },
    /// Checked mode found a datum whose metadata does not match where it arrived.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// An aggregated message arrived a second time.
    #[error(
        "message {seq} from sender {sender} was already delivered (next expected: {expected})"
    )]
    Duplicate {
        /// The sender's id.
        sender: u32,
        /// Sequence number of the repeated message.
        seq: u64,
        /// The sequence number the receiver expected.
        expected: u64,
    },
    /// Aggregated messages went missing: a batch starts past the next expected sequence.
    #[error("messages {expected}..{seq} from sender {sender} are missing (got {seq})")]
    Gap {
        /// The sender's id.
        sender: u32,
        /// First sequence number of the batch that arrived.
        seq: u64,
        /// The sequence number the receiver expected.
        expected: u64,
    },
}

/// A datum whose shipped metadata (checked mode) contradicts where it arrived. These turn
/// the seed's "valid data in the wrong place" bugs (seed 001, section 6.2) into errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The datum was meant for another receiver.
    #[error(
        "{datum} from sender {sender} names destination {actual}, but this receiver is {expected}"
    )]
    WrongDestination {
        /// What arrived (`line for window offset 0x40`, `message 17`).
        datum: String,
        /// The sender's id.
        sender: u32,
        /// This receiver's id.
        expected: u32,
        /// The destination the sender named.
        actual: u32,
    },
    /// The datum targets a place outside the region the receiver expects writes into.
    #[error(
        "{datum} from sender {sender} targets {offset:#x} + {len}, outside the expected region {:#x}..{:#x}",
        region.start,
        region.end
    )]
    WrongRegion {
        /// What arrived.
        datum: String,
        /// The sender's id.
        sender: u32,
        /// The target offset or coordinate it names.
        offset: u64,
        /// Its length in bytes (0 for an aggregated message's target coordinate).
        len: u64,
        /// The region the receiver accepts.
        region: Range<u64>,
    },
    /// The metadata names another target than the one the datum is applied to: the sender's
    /// bookkeeping and the data it shipped disagree.
    #[error("line from sender {sender} claims window offset {claimed:#x} but was shipped for {actual:#x}")]
    OffsetMismatch {
        /// The sender's id.
        sender: u32,
        /// Offset in the metadata.
        claimed: u64,
        /// Offset the transfer places it at.
        actual: u64,
    },
    /// The receiver is in checked mode but a transfer came without metadata.
    #[error("{what} from {peer} carries no metadata, but this receiver runs in checked mode")]
    MissingMetadata {
        /// The transfer (`cache transfer`, `aggregated batch`).
        what: &'static str,
        /// The peer's address.
        peer: String,
    },
}

impl Error {
    pub(crate) fn config(what: &'static str, reason: impl Into<String>) -> Error {
        Error::Config {
            what,
            reason: reason.into(),
        }
    }

    pub(crate) fn protocol(peer: impl std::fmt::Display, reason: impl Into<String>) -> Error {
        Error::Protocol {
            peer: peer.to_string(),
            reason: reason.into(),
        }
    }
}
