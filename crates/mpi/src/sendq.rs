//! The sends an endpoint keeps in flight (feature `mpi`).
//!
//! `send` copies a message into a buffer of its own and posts `MPI_Isend` on the copy, so it
//! returns without waiting for the receiver, as a tcp socket or an shm ring lets a sender
//! run ahead. (Large messages to a peer on the same node skip this queue and are sent from
//! the caller's buffer; see `MpiEndpoint::direct`. A message longer than `recvq::WHOLE` is
//! two requests here, head and tail, and its buffer goes with the second.) Up to [`MAX_PENDING`] messages and [`MAX_PENDING_BYTES`] bytes stay in flight
//! per endpoint; past that, `send` waits for the oldest to complete (and `try_send` says
//! would-block). Keeping several large messages in flight is what lets MPI overlap one
//! message's rendezvous handshake with another's copy, as the window of osu_bw does; a
//! blocking send of one message at a time pays the handshake on every message.
//!
//! Buffers of large messages are reused: on this machine kind a fresh page costs more to
//! touch than a copy into a warm one (`../shared/MACHINE_NOTES.md`, item 2).
//!
//! MPI matches messages of one sender, communicator and tag in posting order, and every
//! post happens under the endpoint's send lock, so buffered sends keep the contract's order.

use std::ffi::c_int;
use std::mem::MaybeUninit;

use accio_core::Result;
use mpi::ffi;

/// Most messages in flight per endpoint.
pub(crate) const MAX_PENDING: usize = 64;
/// Most bytes in flight per endpoint; a larger message is still sent, alone, once the queue
/// drained below this.
pub(crate) const MAX_PENDING_BYTES: usize = 32 << 20;
/// Messages at least this large get pooled buffers (smaller ones a fresh allocation, which
/// glibc serves from its caches).
const POOLED: usize = 64 << 10;

/// Sends in flight and spare buffers. Lives under the endpoint's send lock.
#[derive(Default)]
pub(crate) struct SendQueue {
    pending: Vec<(ffi::MPI_Request, Vec<u8>)>,
    bytes: usize,
    pool: Vec<Vec<u8>>,
    pooled_bytes: usize,
}

impl SendQueue {
    /// Whether a message of `len` bytes may be posted now.
    pub(crate) fn has_room(&self, len: usize) -> bool {
        self.pending.is_empty()
            || (self.pending.len() < MAX_PENDING && self.bytes + len <= MAX_PENDING_BYTES)
    }

    /// Whether nothing is in flight.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Forgets the requests still in flight and leaks their buffers (MPI may still read
    /// them); used when an endpoint closes and its peer never received.
    pub(crate) fn abandon(&mut self) {
        for (_, buf) in self.pending.drain(..) {
            std::mem::forget(buf);
        }
        self.bytes = 0;
    }

    /// Completes what MPI finished, keeping large buffers for reuse. In posting order: the
    /// first unfinished request stops the scan (later ones rarely finish first).
    pub(crate) fn reap(&mut self) -> Result<()> {
        crate::imp::count_poll();
        self.reap_quiet()
    }

    /// As [`reap`](Self::reap), without counting as the application's poll of MPI: for
    /// serving device windows, which the progress thread does too (see `imp::app_polled`).
    pub(crate) fn reap_quiet(&mut self) -> Result<()> {
        let mut done = 0;
        let mut err = Ok(());
        for (req, _) in self.pending.iter_mut() {
            let mut flag: c_int = 0;
            // SAFETY: `req` is an active request whose buffer lives in the same entry.
            let rc = unsafe { ffi::MPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
            if rc != 0 {
                err = crate::imp::check(rc, "MPI_Test");
                break;
            }
            if flag == 0 {
                break;
            }
            done += 1;
        }
        for (_, buf) in self.pending.drain(..done) {
            self.bytes -= buf.len();
            if buf.capacity() >= POOLED && self.pooled_bytes + buf.capacity() <= MAX_PENDING_BYTES {
                self.pooled_bytes += buf.capacity();
                self.pool.push(buf);
            }
        }
        err
    }

    /// Posts a send of a copy of `msg` to `dest`: on `tag`, or a long message's head on
    /// `tag` and its tail on `tail_tag` (see `recvq`).
    pub(crate) fn post_copy(
        &mut self,
        msg: &[u8],
        dest: c_int,
        tag: c_int,
        tail_tag: c_int,
    ) -> Result<()> {
        let copy = self.buffer_with(msg);
        let (head, tail) = crate::recvq::parts(msg.len());
        let head_req = isend(&copy[head], dest, tag)?;
        let Some(tail) = tail else {
            self.bytes += copy.len();
            self.pending.push((head_req, copy));
            return Ok(());
        };
        // The buffer goes with the tail's entry: `reap` frees entries in order, so only
        // once both parts are sent.
        self.pending.push((head_req, Vec::new()));
        let tail_req = isend(&copy[tail], dest, tail_tag)?;
        self.bytes += copy.len();
        self.pending.push((tail_req, copy));
        Ok(())
    }

    /// Posts one message of `head` followed by `len` bytes from `body` (copied: `body`
    /// need live only for the call), whole on `tag`, whatever its length: for the device
    /// protocol's messages, whose receiver takes them whole (see `crate::device_wire`).
    ///
    /// # Safety
    /// `body` must be readable for `len` bytes.
    pub(crate) unsafe fn post_joined(
        &mut self,
        head: &[u8],
        body: *const u8,
        len: usize,
        dest: c_int,
        tag: c_int,
    ) -> Result<()> {
        let mut copy = self.buffer(head.len() + len);
        copy.extend_from_slice(head);
        // SAFETY: the caller's promise; the buffer has room for `len` more bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(body, copy.as_mut_ptr().add(head.len()), len);
            copy.set_len(head.len() + len);
        }
        self.post_owned(copy, dest, tag)
    }

    /// Posts `msg`, whole, on `tag`.
    pub(crate) fn post_owned(&mut self, msg: Vec<u8>, dest: c_int, tag: c_int) -> Result<()> {
        let req = isend(&msg, dest, tag)?;
        self.bytes += msg.len();
        self.pending.push((req, msg));
        Ok(())
    }

    /// How many sends are in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// A buffer holding a copy of `msg`: a pooled one when one is large enough.
    fn buffer_with(&mut self, msg: &[u8]) -> Vec<u8> {
        let mut b = self.buffer(msg.len());
        b.extend_from_slice(msg);
        b
    }

    /// An empty buffer with room for `len` bytes: a pooled one when one is large enough.
    pub(crate) fn buffer(&mut self, len: usize) -> Vec<u8> {
        if len >= POOLED {
            if let Some(i) = self.pool.iter().position(|b| b.capacity() >= len) {
                let mut b = self.pool.swap_remove(i);
                self.pooled_bytes -= b.capacity();
                b.clear();
                return b;
            }
        }
        Vec::with_capacity(len)
    }
}

/// `MPI_Isend` of `buf` to `dest` with `tag`.
///
/// The caller keeps `buf` alive and unmoved until MPI reports the request complete.
pub(crate) fn isend(buf: &[u8], dest: c_int, tag: c_int) -> Result<ffi::MPI_Request> {
    let mut req = MaybeUninit::<ffi::MPI_Request>::uninit();
    crate::imp::check(
        // SAFETY: `buf` outlives the request (the caller's duty, stated above).
        unsafe {
            ffi::MPI_Isend(
                buf.as_ptr().cast(),
                buf.len() as c_int,
                crate::imp::byte(),
                dest,
                tag,
                crate::imp::world(),
                req.as_mut_ptr(),
            )
        },
        "MPI_Isend",
    )?;
    // SAFETY: MPI_Isend succeeded and wrote the request.
    Ok(unsafe { req.assume_init() })
}
