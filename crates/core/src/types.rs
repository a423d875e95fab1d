//! Small value types of the endpoint contract.

use std::fmt;

/// Access rights of a registered window, as seen by the *peer*.
///
/// Mirrors SCIF's `SCIF_PROT_READ` / `SCIF_PROT_WRITE`: a peer may `read_from` a window only
/// if it has [`Access::READ`] and `write_to` it only if it has [`Access::WRITE`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// No access (useful only as a starting point).
    pub const NONE: Access = Access(0);
    /// The peer may read the window.
    pub const READ: Access = Access(1);
    /// The peer may write the window.
    pub const WRITE: Access = Access(2);
    /// The peer may read and write the window.
    pub const READ_WRITE: Access = Access(3);

    /// True if every right in `other` is in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits (1 = read, 2 = write), for wire formats.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Rebuilds rights from [`Access::bits`]; unknown bits are rejected.
    pub const fn from_bits(bits: u8) -> Option<Access> {
        if bits & !3 == 0 {
            Some(Access(bits))
        } else {
            None
        }
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = if self.contains(Access::READ) {
            "r"
        } else {
            "-"
        };
        let w = if self.contains(Access::WRITE) {
            "w"
        } else {
            "-"
        };
        write!(f, "{r}{w}")
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Access({self})")
    }
}

/// Flags of one RMA call.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct RmaFlags {
    /// Return only once the data is in the target window (remote completion), as SCIF's
    /// `SCIF_RMA_SYNC`. Without it, `write_to` may return once the source bytes have been
    /// consumed (the source may be reused) and completion is observed with a fence.
    pub sync: bool,
    /// The target will not read these bytes before other work has moved them out of the
    /// caches: the copy may bypass them (non-temporal stores on `shm`, which skip reading
    /// each destination line from the core that holds it; see `accio_core::copy_streaming`).
    /// A hint: backends whose copies are not the CPU's ignore it.
    pub streaming: bool,
}

impl RmaFlags {
    /// Asynchronous completion (the default).
    pub const ASYNC: RmaFlags = RmaFlags {
        sync: false,
        streaming: false,
    };
    /// Synchronous completion.
    pub const SYNC: RmaFlags = RmaFlags {
        sync: true,
        streaming: false,
    };
}

/// Outcome of a non-blocking call: done, or it would have had to wait.
///
/// "Would block" is a status, not an error: nothing was sent or received and the call may be
/// retried.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[must_use]
pub enum Progress<T> {
    /// The operation completed with this value.
    Ready(T),
    /// The operation could not proceed without waiting; nothing happened.
    WouldBlock,
}

impl<T> Progress<T> {
    /// True for [`Progress::Ready`].
    pub fn is_ready(&self) -> bool {
        matches!(self, Progress::Ready(_))
    }

    /// The value, if ready.
    pub fn ready(self) -> Option<T> {
        match self {
            Progress::Ready(v) => Some(v),
            Progress::WouldBlock => None,
        }
    }
}

/// A fence mark: names every RMA issued on an endpoint before [`crate::Endpoint::fence_mark`]
/// returned it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub struct Mark(pub u64);

impl Mark {
    /// `Ok` when this mark is one an endpoint whose latest mark is `latest` can have
    /// issued; else the error `fence_wait` gives for a mark never issued, naming both.
    pub fn check_issued(self, latest: u64) -> crate::Result<()> {
        if self.0 <= latest {
            return Ok(());
        }
        Err(crate::Error::invalid(
            "fence_wait",
            format!(
                "mark {} was not issued by this endpoint (its latest is {latest})",
                self.0
            ),
        ))
    }
}

/// What a backend can do beyond the common contract. The conformance suite checks that each
/// advertised capability really works and each missing one reports `Unsupported`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Capabilities {
    /// `map_remote` gives direct load/store access to peer windows.
    pub map_remote: bool,
    /// RMA completes without any work by the peer's CPU (copy into the peer's mapped memory).
    pub cpu_free_rma: bool,
    /// Largest message `try_send` accepts (larger messages need the blocking `send`).
    pub max_try_send: usize,
}
