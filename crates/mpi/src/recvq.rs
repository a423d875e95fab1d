//! The receiving side of an endpoint (feature `mpi`): one receive kept posted, and the
//! messages a waiting send took early.
//!
//! A receive is posted ahead (`MPI_Irecv` into a slot of [`SLOT`] bytes owned by the
//! endpoint), so MPI matches an arriving message as soon as its progress engine sees it, and
//! a waiting `recv` polls that request with `MPI_Test`. Probing instead (`MPI_Improbe`, then
//! `MPI_Mrecv`) makes every poll of an idle connection match against the unexpected queue
//! and allocate a request; with Open MPI's ob1 that was a large part of a small message's
//! cost (8 B one-way latency on one node, interleaved runs on a loaded machine: 0.37–0.62 µs
//! probing, 0.27 with the posted receive, Open MPI's own 0.14–0.37 in the same runs).
//!
//! A posted receive must be large enough for whatever matches it (MPI fails a longer
//! message with a truncation error), so a message longer than [`WHOLE`] bytes travels in
//! two parts: its first `WHOLE + 1` bytes on the message tag (a length no whole message
//! has, so the receiver knows a tail follows) and the rest on the connection's tail tag,
//! posted right after it under the send lock. MPI keeps each tag's messages in order, so
//! the n-th head and the n-th tail belong together. Small messages are copied out of the
//! slot (at most [`WHOLE`] bytes); a tail is received straight into the caller's buffer.

use std::collections::VecDeque;
use std::ffi::c_int;
use std::mem::MaybeUninit;

use accio_core::Result;
use mpi::ffi;

use crate::imp::{byte, check, try_take_at, world};

/// Longest message received whole through the posted slot. Small enough that a long
/// message's head goes eagerly on Open MPI's shared-memory path (its eager limit is 4 KiB
/// with the header), so a long message pays one rendezvous, its tail's.
pub(crate) const WHOLE: usize = 2 << 10;
/// Bytes of the slot: a whole message, or the head (`WHOLE + 1` bytes) of a longer one.
pub(crate) const SLOT: usize = WHOLE + 1;

/// Under the endpoint's receive lock.
pub(crate) struct RecvQueue {
    peer: c_int,
    msg_tag: c_int,
    tail_tag: c_int,
    /// Messages received early (by a send waiting for its peer; see `MpiEndpoint::drain`).
    early: VecDeque<Vec<u8>>,
    /// The slot, a heap buffer that does not move while `posted` refers to it.
    slot: Vec<u8>,
    posted: Option<ffi::MPI_Request>,
}

// SAFETY: the request handle is opaque; MPI allows any thread (MPI_THREAD_MULTIPLE), and
// the queue is used under a mutex.
unsafe impl Send for RecvQueue {}

impl RecvQueue {
    pub(crate) fn new(peer: c_int, msg_tag: c_int, tail_tag: c_int) -> RecvQueue {
        RecvQueue {
            peer,
            msg_tag,
            tail_tag,
            early: VecDeque::new(),
            slot: vec![0u8; SLOT],
            posted: None,
        }
    }

    fn post(&mut self) -> Result<()> {
        if self.posted.is_some() {
            return Ok(());
        }
        let mut req = MaybeUninit::<ffi::MPI_Request>::uninit();
        check(
            // SAFETY: the slot's heap buffer lives until the request completes or is
            // cancelled and waited for (`cancel`, called by the endpoint's drop).
            unsafe {
                ffi::MPI_Irecv(
                    self.slot.as_mut_ptr().cast(),
                    SLOT as c_int,
                    byte(),
                    self.peer,
                    self.msg_tag,
                    world(),
                    req.as_mut_ptr(),
                )
            },
            "MPI_Irecv",
        )?;
        // SAFETY: MPI_Irecv succeeded and wrote the request.
        self.posted = Some(unsafe { req.assume_init() });
        Ok(())
    }

    /// The next message into `buf`, if one is there: an early one first, else the posted
    /// receive's. Never waits, except for the tail of a message whose head arrived (its
    /// sender posted the tail right after the head).
    pub(crate) fn take(&mut self, buf: &mut Vec<u8>) -> Result<Option<usize>> {
        if let Some(m) = self.early.pop_front() {
            *buf = m;
            return Ok(Some(buf.len()));
        }
        self.take_posted(buf)
    }

    fn take_posted(&mut self, buf: &mut Vec<u8>) -> Result<Option<usize>> {
        crate::imp::count_poll();
        self.post()?;
        let req = self.posted.as_mut().expect("posted above");
        let mut flag: c_int = 0;
        let mut st = MaybeUninit::<ffi::MPI_Status>::uninit();
        check(
            // SAFETY: an active request; the status is written when it completes.
            unsafe { ffi::MPI_Test(req, &mut flag, st.as_mut_ptr()) },
            "MPI_Test",
        )?;
        if flag == 0 {
            return Ok(None);
        }
        self.posted = None;
        // SAFETY: the request completed and MPI wrote its status.
        self.deliver(unsafe { st.assume_init_ref() }, buf).map(Some)
        // Posted again by the next call, not now: in a request-reply exchange the reply
        // then leaves before the receive is posted (a message that comes first waits in
        // MPI's unexpected queue and is matched by the post).
    }

    /// Moves the message the posted receive completed with (status `st`) into `buf`,
    /// receiving its tail when it is a head.
    fn deliver(&mut self, st: &ffi::MPI_Status, buf: &mut Vec<u8>) -> Result<usize> {
        let mut count: c_int = 0;
        check(
            // SAFETY: `st` is a completed receive's status.
            unsafe { ffi::MPI_Get_count(st, byte(), &mut count) },
            "MPI_Get_count",
        )?;
        let n = count.max(0) as usize;
        buf.clear();
        buf.extend_from_slice(&self.slot[..n.min(SLOT)]);
        if n == SLOT {
            self.tail(buf)?;
        }
        Ok(buf.len())
    }

    /// Appends the tail of the message whose head is in `buf`: its sender posted it right
    /// after the head, so it is at most a network latency away.
    fn tail(&mut self, buf: &mut Vec<u8>) -> Result<()> {
        let mut spins = 0u32;
        while try_take_at(self.peer, self.tail_tag, buf, SLOT)?.is_none() {
            spins += 1;
            if spins > 1000 {
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// The next message after the peer's close arrived: every message it sent before has
    /// reached MPI by then, but the posted receive may have matched one that has not
    /// completed yet. The receive is cancelled: a matched one cannot be and completes
    /// instead (MPI_Wait), and one that was not leaves any message in MPI's unexpected
    /// queue, where a probe finds it.
    pub(crate) fn take_closed(&mut self, buf: &mut Vec<u8>) -> Result<Option<usize>> {
        if let Some(m) = self.early.pop_front() {
            *buf = m;
            return Ok(Some(buf.len()));
        }
        if let Some(mut req) = self.posted.take() {
            let mut st = MaybeUninit::<ffi::MPI_Status>::uninit();
            let mut cancelled: c_int = 0;
            // SAFETY: an active receive request into the slot; after MPI_Wait it is
            // complete (cancelled or not) and MPI no longer refers to the slot.
            unsafe {
                ffi::MPI_Cancel(&mut req);
                check(ffi::MPI_Wait(&mut req, st.as_mut_ptr()), "MPI_Wait")?;
                ffi::MPI_Test_cancelled(st.as_ptr(), &mut cancelled);
            }
            if cancelled == 0 {
                // SAFETY: MPI_Wait wrote the status.
                return self.deliver(unsafe { st.assume_init_ref() }, buf).map(Some);
            }
        }
        match crate::imp::try_take_at(self.peer, self.msg_tag, buf, 0)? {
            Some(n) if n == SLOT => {
                self.tail(buf)?;
                Ok(Some(buf.len()))
            }
            Some(n) => {
                buf.truncate(n);
                Ok(Some(n))
            }
            None => Ok(None),
        }
    }

    /// Receives every message that has arrived into the early queue.
    pub(crate) fn drain(&mut self) -> Result<()> {
        loop {
            let mut m = Vec::new();
            if self.take_posted(&mut m)?.is_none() {
                return Ok(());
            }
            self.early.push_back(m);
        }
    }

    /// Withdraws the posted receive (the endpoint closes); a message it already matched is
    /// dropped with the endpoint.
    pub(crate) fn cancel(&mut self) {
        if let Some(mut req) = self.posted.take() {
            // SAFETY: an active receive request; cancel then wait completes it, after which
            // MPI no longer refers to the slot.
            unsafe {
                ffi::MPI_Cancel(&mut req);
                ffi::MPI_Wait(&mut req, ffi::RSMPI_STATUS_IGNORE);
            }
        }
    }
}

/// The parts a message of `len` bytes travels in: the range sent on the message tag and,
/// for a message longer than [`WHOLE`], the range sent on the tail tag.
pub(crate) fn parts(len: usize) -> (std::ops::Range<usize>, Option<std::ops::Range<usize>>) {
    if len <= WHOLE {
        (0..len, None)
    } else {
        (0..SLOT, Some(SLOT..len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_has_a_length_no_whole_message_has() {
        assert_eq!(parts(0), (0..0, None));
        assert_eq!(parts(WHOLE), (0..WHOLE, None));
        assert_eq!(parts(WHOLE + 1), (0..SLOT, Some(SLOT..WHOLE + 1)));
        assert_eq!(parts(1 << 20), (0..SLOT, Some(SLOT..1 << 20)));
    }
}
