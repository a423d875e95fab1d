//! Typed errors shared by every backend.
//!
//! Messages are lowercase and name the resource and the exact cause, e.g.
//! `window 0x100000..0x101000 of peer shm://m does not cover 0x100ff0 + 64`.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::types::Access;

/// Result alias used throughout accio.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, without the details. Stable for matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The peer closed the connection or its process died.
    PeerGone,
    /// A deadline passed before the operation could complete.
    Timeout,
    /// The address could not be parsed or does not name a reachable endpoint.
    BadAddress,
    /// The address is already bound by another listener.
    AddrInUse,
    /// The backend does not offer this operation.
    Unsupported,
    /// An RMA range is not inside one registered window.
    OutOfWindow,
    /// The window exists but lacks the access right the operation needs.
    AccessDenied,
    /// A message is larger than the operation allows.
    MessageTooLarge,
    /// The peer sent bytes that break the wire protocol.
    Protocol,
    /// An argument is invalid (zero length, misaligned signal offset, ...).
    InvalidArgument,
    /// An operating-system call failed.
    Io,
    /// The peer is not who may connect: another user, or no proof of the shared secret.
    Untrusted,
    /// A request for more memory than the limit allows, refused before any was touched.
    OutOfMemory,
}

/// Which side of a connection a window belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The endpoint the call was made on.
    Local,
    /// The connected peer.
    Remote,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Local => "local",
            Side::Remote => "remote",
        })
    }
}

/// A registered window as named in error messages: `0x100000..0x200000 (rw)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowDesc {
    /// First offset of the window.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Access rights the window was registered with.
    pub access: Access,
}

impl fmt::Display for WindowDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:#x}..{:#x} ({})",
            self.offset,
            self.offset + self.len,
            self.access
        )
    }
}

/// Every error an accio library returns.
///
/// Match on [`Error::kind`] for control flow; the `Display` text is for people.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The peer went away (closed, crashed or killed).
    #[error("peer {peer} is gone: {cause}")]
    PeerGone {
        /// The peer's address.
        peer: String,
        /// What revealed it (EOF, reset, hang-up, ...).
        cause: String,
    },
    /// An operation did not finish before its deadline.
    #[error("{op} on {resource} timed out after {after:?}")]
    Timeout {
        /// The operation (`connect`, `accept`, `recv`, ...).
        op: &'static str,
        /// The address or endpoint it waited on.
        resource: String,
        /// How long it waited.
        after: Duration,
    },
    /// An address that cannot be used.
    #[error("bad address {addr:?}: {reason}")]
    BadAddress {
        /// The address as given.
        addr: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// Another listener holds the address.
    #[error("address {addr} is already in use")]
    AddrInUse {
        /// The address.
        addr: String,
    },
    /// The backend does not implement the operation.
    #[error("{op} is not supported by the {backend} backend")]
    Unsupported {
        /// The operation.
        op: &'static str,
        /// The backend name (`shm`, `tcp`).
        backend: &'static str,
    },
    /// An RMA range is not covered by one registered window.
    #[error("{}", out_of_window_text(*.side, .endpoint, *.offset, *.len, .nearest))]
    OutOfWindow {
        /// Whose address space was addressed.
        side: Side,
        /// The endpoint (or peer) address owning that space.
        endpoint: String,
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// The window that contains `offset`, or the closest one below it.
        nearest: Option<WindowDesc>,
    },
    /// The window exists but lacks a needed right.
    #[error(
        "{side} window {window} of {endpoint} does not allow {need} (offset {offset:#x} + {len})"
    )]
    AccessDenied {
        /// Whose window.
        side: Side,
        /// The endpoint (or peer) address owning it.
        endpoint: String,
        /// The window.
        window: WindowDesc,
        /// The right the operation needs.
        need: Access,
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
    },
    /// A message exceeds a size limit.
    #[error("message of {len} bytes on {endpoint} exceeds the {limit}-byte limit of {op}")]
    MessageTooLarge {
        /// The operation with the limit.
        op: &'static str,
        /// The endpoint.
        endpoint: String,
        /// Message length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The peer broke the wire protocol.
    #[error("protocol error from {peer}: {reason}")]
    Protocol {
        /// The peer's address.
        peer: String,
        /// What was wrong with its bytes.
        reason: String,
    },
    /// An argument the caller passed is invalid.
    #[error("invalid argument to {op}: {reason}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The peer failed the identity check: it runs as a user this side does not admit
    /// (`shm`), or did not prove it holds the shared secret (`tcp`). Nothing was sent to it.
    #[error("peer {peer} refused: {reason}")]
    Untrusted {
        /// The address.
        peer: String,
        /// Who the peer is and why that is not admitted.
        reason: String,
    },
    /// A request for more memory than allowed, refused before any memory was touched.
    #[error(
        "{op} of {len} bytes on {resource} refused: more than the limit of {limit} bytes ({why})"
    )]
    OutOfMemory {
        /// The operation (`register`).
        op: &'static str,
        /// The endpoint or pool asked.
        resource: String,
        /// Bytes asked for.
        len: u64,
        /// The limit.
        limit: u64,
        /// Where the limit comes from and how to raise it.
        why: &'static str,
    },
    /// An operating-system call failed.
    #[error("{op} on {resource}: {source}")]
    Io {
        /// What was attempted (`mmap`, `memfd_create`, `bind`, ...).
        op: &'static str,
        /// The file, socket or address involved.
        resource: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

fn out_of_window_text(
    side: Side,
    endpoint: &str,
    offset: u64,
    len: u64,
    nearest: &Option<WindowDesc>,
) -> String {
    match nearest {
        Some(w) => format!("{side} window {w} of {endpoint} does not cover {offset:#x} + {len}"),
        None => format!("no {side} window of {endpoint} covers {offset:#x} + {len}"),
    }
}

impl Error {
    /// The error's kind, for matching.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::PeerGone { .. } => ErrorKind::PeerGone,
            Error::Timeout { .. } => ErrorKind::Timeout,
            Error::BadAddress { .. } => ErrorKind::BadAddress,
            Error::AddrInUse { .. } => ErrorKind::AddrInUse,
            Error::Unsupported { .. } => ErrorKind::Unsupported,
            Error::OutOfWindow { .. } => ErrorKind::OutOfWindow,
            Error::AccessDenied { .. } => ErrorKind::AccessDenied,
            Error::MessageTooLarge { .. } => ErrorKind::MessageTooLarge,
            Error::Protocol { .. } => ErrorKind::Protocol,
            Error::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            Error::Io { .. } => ErrorKind::Io,
            Error::Untrusted { .. } => ErrorKind::Untrusted,
            Error::OutOfMemory { .. } => ErrorKind::OutOfMemory,
        }
    }

    /// Shorthand for an [`Error::Io`].
    pub fn io(op: &'static str, resource: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            op,
            resource: resource.into(),
            source,
        }
    }

    /// Shorthand for an [`Error::Io`] from the last OS error (`errno`).
    pub fn last_os(op: &'static str, resource: impl Into<String>) -> Self {
        Error::io(op, resource, io::Error::last_os_error())
    }

    /// Shorthand for an [`Error::PeerGone`].
    pub fn peer_gone(peer: impl fmt::Display, cause: impl Into<String>) -> Self {
        Error::PeerGone {
            peer: peer.to_string(),
            cause: cause.into(),
        }
    }

    /// Shorthand for an [`Error::InvalidArgument`].
    pub fn invalid(op: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            reason: reason.into(),
        }
    }

    /// Shorthand for an [`Error::Protocol`].
    pub fn protocol(peer: impl fmt::Display, reason: impl Into<String>) -> Self {
        Error::Protocol {
            peer: peer.to_string(),
            reason: reason.into(),
        }
    }
}
