//! The endpoint contract: one seam for every backend.
//!
//! The model is Intel SCIF's (`scif_connect`/`scif_accept`, `scif_send`/`scif_recv`,
//! `scif_register`, `scif_writeto`/`scif_readfrom`, `scif_vwriteto`/`scif_vreadfrom`,
//! `scif_fence_mark`/`scif_fence_wait`/`scif_fence_signal`, `scif_mmap`), made safe: every
//! remote access is checked against the peer's registered windows, and errors are typed.
//!
//! # Semantics every backend follows
//!
//! **Connection.** A [`Listener`] accepts any number of endpoints; each [`Endpoint`] is one
//! end of a bidirectional connection to exactly one peer.
//!
//! **Messages.** [`Endpoint::send`] / [`Endpoint::recv`] move byte messages (0 bytes to
//! the backend's limit, at least 1 GiB) reliably, in order, with boundaries kept. Sends from several threads on one
//! endpoint are serialized whole (messages never interleave); the same holds for receives.
//! Non-blocking variants return [`Progress::WouldBlock`] instead of waiting; a would-block
//! send enqueued nothing. `try_send` accepts messages up to [`Capabilities::max_try_send`].
//!
//! **Registered address space.** [`Endpoint::register`] maps fresh, zeroed, page-aligned
//! memory and exposes it to the peer as a window at an offset chosen by the endpoint
//! (page aligned, never reused, with an unmapped guard page after each window). The window's
//! [`Access`] says what the *peer* may do. Offset 0 is never valid.
//! [`Endpoint::register_view`] exposes memory the caller already has instead: the same
//! memory may back windows on several endpoints, at once or in turn (a pool lent to many
//! peers, faulted in once), and nothing is zeroed. [`Endpoint::register_device`] exposes
//! device memory (a GPU's, [`crate::DeviceMemory`]) in the same address space: a device
//! window is an RMA target and source like any other, which the backend reaches through
//! the device's driver.
//!
//! **RMA.** `write_to(local_off, len, remote_off)` copies `len` bytes from the local
//! registered space to the peer's; `read_from` copies the other way; the `v` variants use
//! an unregistered local slice instead of local windows. A range must lie inside one window
//! on each side; it is checked on the initiating side before any byte moves:
//! [`crate::Error::OutOfWindow`] or [`crate::Error::AccessDenied`] names the window and the
//! offset. (The peer re-checks what arrives from the network: a lying initiator cannot reach
//! past a window either.) Local rights: `write_to` reads the local window, `read_from`
//! writes it; local windows need no peer rights for that.
//!
//! **Completion.** `read_from`/`vread_from` return when the data is in local memory. With
//! [`RmaFlags::SYNC`] a write returns only when the data is in the peer's window; without it
//! a write may return once the source was consumed, and its completion is awaited with a
//! fence.
//!
//! **Fences.** [`Endpoint::fence_mark`] returns a [`Mark`] naming every RMA whose call
//! returned before it (on any thread); [`Endpoint::fence_wait`] blocks until those have
//! completed at the peer, and refuses a mark the endpoint never issued.
//! [`Endpoint::fence_signal`] writes 8-byte values into a local and/or a remote window word
//! only after every earlier RMA completed, so a peer that sees the value (with
//! [`crate::MemView::load_u64`] / `wait_u64`) also sees the data.
//!
//! **Direct mapping.** [`Endpoint::map_remote`] gives load/store access to a peer window on
//! backends that can (`shm`); others return [`crate::Error::Unsupported`].
//!
//! **Visibility of windows.** A peer is guaranteed to see a newly registered window (or to
//! be refused an unregistered one) only once it has received a message sent after
//! `register` (`unregister`) returned: announce offsets with a message.
//!
//! **Failed calls change nothing.** A call that returns an error other than `PeerGone` has
//! stored nothing: a `fence_signal` with one bad target stores neither value; a rejected
//! RMA moves no byte.
//!
//! **Addresses.** The accepted end's peer address is the connecting end's local address and
//! vice versa; the connecting end's peer address is the listener's address.
//!
//! **Timeouts** never fire before the requested time has passed.
//!
//! **Failure.** If the peer dies or closes, blocked calls fail with
//! [`crate::Error::PeerGone`] within one second and every later message or RMA call fails
//! the same way. Windows stay mapped for as long as a handle holds them (including a
//! [`RemoteMap`] of the dead peer's window), so no memory error follows a peer's death.

use std::fmt;
use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use crate::addr::Addr;
use crate::device::{DeviceMemory, DeviceWindow};
use crate::error::Result;
use crate::memory::{MemView, RemoteMap, Window};
use crate::types::{Access, Capabilities, Mark, Progress, RmaFlags};

/// One end of a connection. See the [module docs](self) for the semantics.
pub trait Endpoint: Send + Sync + fmt::Debug {
    /// The backend's name (`"shm"`, `"tcp"`).
    fn backend(&self) -> &'static str;

    /// This endpoint's own address.
    fn local_addr(&self) -> &Addr;

    /// The peer's address.
    fn peer_addr(&self) -> &Addr;

    /// What this backend offers beyond the common contract.
    fn capabilities(&self) -> Capabilities;

    // ---- messages -------------------------------------------------------------------

    /// Sends one message, waiting for room as long as needed.
    fn send(&self, msg: &[u8]) -> Result<()>;

    /// Sends one message if it can be enqueued whole without waiting.
    fn try_send(&self, msg: &[u8]) -> Result<Progress<()>>;

    /// Receives the next message into `buf` (cleared first; its capacity is reused) and
    /// returns its length. Waits at most `timeout` (`None`: forever) and then fails with
    /// [`crate::Error::Timeout`], having consumed nothing.
    fn recv_timeout(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<usize>;

    /// Receives the next message if one is already there.
    fn try_recv(&self, buf: &mut Vec<u8>) -> Result<Progress<usize>>;

    /// Receives the next message into `dst` and returns its length, waiting at most
    /// `timeout` as [`Endpoint::recv_timeout`] does. A message longer than `dst` is
    /// consumed all the same and fails with [`crate::Error::MessageTooLarge`] (what of it
    /// fits may have been written). Backends that can copy straight from their transport
    /// into `dst` do (shm: one copy from the ring); the default receives into a buffer of
    /// its own and copies.
    fn recv_into(&self, dst: &mut [u8], timeout: Option<Duration>) -> Result<usize> {
        let mut buf = Vec::new();
        let n = self.recv_timeout(&mut buf, timeout)?;
        if n > dst.len() {
            return Err(crate::Error::MessageTooLarge {
                op: "recv_into",
                endpoint: self.local_addr().to_string(),
                len: n,
                limit: dst.len(),
            });
        }
        dst[..n].copy_from_slice(&buf[..n]);
        Ok(n)
    }

    /// Receives the next message, waiting as long as needed.
    fn recv(&self, buf: &mut Vec<u8>) -> Result<usize> {
        self.recv_timeout(buf, None)
    }

    // ---- registration -------------------------------------------------------------------

    /// Registers `len` bytes of fresh zeroed memory as a window the peer may access with
    /// `access`.
    fn register(&self, len: usize, access: Access) -> Result<Window>;

    /// Registers `view`, memory the caller already has, as a window the peer may access
    /// with `access`. The view must start on a page boundary ([`crate::PAGE`]) and not be
    /// empty. Backends whose peer maps the memory (`shm`) need a view of a
    /// [`crate::Region::shareable`] region and refuse others with
    /// [`crate::Error::InvalidArgument`]. Such a peer receives the region's memory object,
    /// so one that broke the contract could reach the whole region, not only the view:
    /// give memory meant for different peers its own regions.
    /// The endpoint keeps the memory mapped while the window is registered; several
    /// windows (on this or other endpoints) may share it, and who writes when is the
    /// caller's business.
    fn register_view(&self, view: &MemView, access: Access) -> Result<Window>;

    /// Registers device memory (a GPU's, see [`DeviceMemory`]) as a window the peer may
    /// access with `access`: every RMA call works with it on either side, with the bounds
    /// and rights of host windows; the copies are the device driver's. It cannot be mapped
    /// ([`Endpoint::map_remote`] refuses it). The endpoint holds the memory while the
    /// window is registered. Backends that cannot reach device memory return
    /// [`crate::Error::Unsupported`].
    fn register_device(
        &self,
        memory: Arc<dyn DeviceMemory>,
        access: Access,
    ) -> Result<DeviceWindow> {
        let _ = (memory, access);
        Err(crate::Error::Unsupported {
            op: "register_device",
            backend: self.backend(),
        })
    }

    /// Withdraws the window starting at `offset`. Later peer RMA to it fails; memory stays
    /// valid for handles that still hold it.
    fn unregister(&self, offset: u64) -> Result<()>;

    // ---- one-sided RMA --------------------------------------------------------------------

    /// Copies `len` bytes at local offset `local_off` to remote offset `remote_off`.
    fn write_to(&self, local_off: u64, len: usize, remote_off: u64, flags: RmaFlags) -> Result<()>;

    /// Copies `len` bytes at remote offset `remote_off` to local offset `local_off`.
    fn read_from(&self, local_off: u64, len: usize, remote_off: u64, flags: RmaFlags)
        -> Result<()>;

    /// Copies `src` (any local memory) to remote offset `remote_off`.
    fn vwrite_to(&self, src: &[u8], remote_off: u64, flags: RmaFlags) -> Result<()>;

    /// Copies `dst.len()` bytes at remote offset `remote_off` into `dst`.
    fn vread_from(&self, dst: &mut [u8], remote_off: u64, flags: RmaFlags) -> Result<()>;

    /// Checks, as an RMA would before it moves a byte, that `len` bytes at the peer's
    /// `remote_off` lie inside one peer window that allows `need`, and moves nothing:
    /// [`crate::Error::OutOfWindow`] or [`crate::Error::AccessDenied`] as the RMA would
    /// fail with. For transfers made of several RMAs (staged from device memory), so that
    /// a range that would fail part-way is refused before the first one.
    fn check_remote(&self, remote_off: u64, len: usize, need: Access) -> Result<()>;

    // ---- ordering -------------------------------------------------------------------------

    /// Marks all RMAs issued so far.
    fn fence_mark(&self) -> Result<Mark>;

    /// Waits until every RMA named by `mark` (a [`Endpoint::fence_mark`] result of this
    /// endpoint) has completed. Marks are ordered: an older one than the latest is valid
    /// and names fewer RMAs. A mark this endpoint never issued (above what `fence_mark`
    /// would return now, e.g. any mark but 0 before the first RMA) fails with
    /// [`crate::Error::InvalidArgument`] naming the mark and the latest one, having waited
    /// for nothing.
    fn fence_wait(&self, mark: Mark) -> Result<()>;

    /// After every earlier RMA completed, stores `local = (offset, value)` into a local window
    /// and `remote = (offset, value)` into a peer window (each optional). Offsets must be
    /// 8-byte aligned; the remote window needs [`Access::WRITE`]. Returns once the stores
    /// are queued; `fence_mark`/`fence_wait` after it waits for them too.
    fn fence_signal(&self, local: Option<(u64, u64)>, remote: Option<(u64, u64)>) -> Result<()>;

    // ---- direct mapping ---------------------------------------------------------------------

    /// Maps `len` bytes of the peer window at `remote_off` for direct load/store. A window
    /// without [`Access::WRITE`](crate::Access::WRITE) is mapped read-only: the
    /// [`RemoteMap`]'s writing accessors refuse, and a store through its raw pointer
    /// faults.
    fn map_remote(&self, remote_off: u64, len: usize) -> Result<RemoteMap>;

    // ---- open files -------------------------------------------------------------------------

    /// Hands the peer process an open file: the kernel gives it a descriptor of the same
    /// open file (backends between processes of one node that can pass descriptors:
    /// `shm`, over its Unix control socket). The peer takes files with
    /// [`Endpoint::recv_file`] in the order sent; one announced by a message sent after
    /// this call returned is already there when the message arrives. This is how a process
    /// lends a file without naming a path that the peer would open: no path received from
    /// a peer is ever opened. Others return [`crate::Error::Unsupported`].
    fn send_file(&self, file: &File) -> Result<()> {
        let _ = file;
        Err(crate::Error::Unsupported {
            op: "send_file",
            backend: self.backend(),
        })
    }

    /// Takes the next file the peer sent with [`Endpoint::send_file`], without waiting:
    /// call it once a message announced the file. Fails with
    /// [`crate::Error::Protocol`] if none is there.
    fn recv_file(&self) -> Result<File> {
        Err(crate::Error::Unsupported {
            op: "recv_file",
            backend: self.backend(),
        })
    }
}

/// A bound address that accepts connections.
pub trait Listener: Send + Sync + fmt::Debug {
    /// The bound address (with the real port when port 0 was asked for).
    fn local_addr(&self) -> &Addr;

    /// Waits for the next connection, at most `timeout` (`None`: forever).
    fn accept(&self, timeout: Option<Duration>) -> Result<Box<dyn Endpoint>>;
}
