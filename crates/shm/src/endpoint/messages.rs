//! The message paths: sending (split into ring records) and receiving (reassembled).

use std::sync::atomic::Ordering;
use std::time::Instant;

use accio_core::{Error, Progress, Result};

use super::liveness::Awaited;
use super::{ShmEndpoint, MAX_MESSAGE};
use crate::ring::{Consumer, Producer};

impl ShmEndpoint {
    pub(super) fn send_locked(&self, tx: &mut Producer, msg: &[u8]) -> Result<()> {
        if msg.len() > MAX_MESSAGE {
            return Err(Error::MessageTooLarge {
                op: "send",
                endpoint: self.addr.to_string(),
                len: msg.len(),
                limit: MAX_MESSAGE,
            });
        }
        if !self.sent_last.load(Ordering::Relaxed) {
            self.sent_last.store(true, Ordering::Relaxed);
        }
        let chunk = tx.max_chunk();
        let total = msg.len() as u64;
        let mut sent = 0usize;
        loop {
            let n = (msg.len() - sent).min(chunk);
            let piece = &msg[sent..sent + n];
            let (first, more) = (sent == 0, sent + n < msg.len());
            if !tx.try_push(piece, first, more, total) {
                let ring = *tx.ring();
                self.wait(
                    ring.producer_wait(),
                    || tx.fits(n),
                    None,
                    "send",
                    Awaited::Room,
                )?;
                let pushed = tx.try_push(piece, first, more, total);
                debug_assert!(pushed);
            }
            sent += n;
            if sent >= msg.len() {
                return Ok(());
            }
        }
    }

    pub(super) fn recv_locked(
        &self,
        rx: &mut Consumer,
        buf: &mut impl Landing,
        deadline: Option<Instant>,
        block: bool,
    ) -> Result<Progress<usize>> {
        buf.clear();
        let mut started = false;
        loop {
            let rec = match rx.peek() {
                Ok(Some(rec)) => rec,
                Ok(None) => {
                    if !block && !started {
                        if !self.gone.get() {
                            return Ok(Progress::WouldBlock);
                        }
                        // `gone` may have been set by another thread (a `send` that found
                        // the peer closed) after our look at the ring: what the peer sent
                        // before it closed still comes first.
                        if self.last_look(|| rx.ready()) {
                            continue;
                        }
                        return Err(self.peer_gone_error());
                    }
                    let ring = *rx.ring();
                    // Once a message has begun, its rest is already on the way: wait for it
                    // without the deadline so a timeout never consumes half a message.
                    let dl = if started { None } else { deadline };
                    let awaited = if self.sent_last.load(Ordering::Relaxed) {
                        Awaited::Answer
                    } else {
                        Awaited::Message
                    };
                    self.wait(ring.consumer_wait(), || rx.ready(), dl, "recv", awaited)?;
                    continue;
                }
                Err(corrupt) => {
                    self.gone.set();
                    return Err(Error::protocol(&self.addr, corrupt.0));
                }
            };
            if rec.first == started {
                self.gone.set();
                return Err(Error::protocol(
                    &self.addr,
                    "message records out of sequence",
                ));
            }
            if rec.first {
                started = true;
                if rec.total > MAX_MESSAGE as u64 {
                    self.gone.set();
                    return Err(Error::protocol(
                        &self.addr,
                        format!(
                            "a message of {} bytes announced, more than the {MAX_MESSAGE}-byte limit",
                            rec.total
                        ),
                    ));
                }
                // Reserve up front, but never trust a huge announced length blindly.
                buf.expect((rec.total as usize).min(64 << 20));
            }
            if (buf.len() + rec.len) as u64 > rec.total {
                self.gone.set();
                return Err(Error::protocol(
                    &self.addr,
                    format!("a message runs past the {} bytes it announced", rec.total),
                ));
            }
            if let Some(at) = buf.room(rec.len) {
                // SAFETY: `room` gave `rec.len` writable bytes at `at`; they are fully
                // written by `copy_out` before `advance` counts them.
                unsafe { rx.copy_out(&rec, at) };
            }
            buf.advance(rec.len);
            rx.pop(&rec);
            if !rec.more {
                if self.sent_last.load(Ordering::Relaxed) {
                    self.sent_last.store(false, Ordering::Relaxed);
                }
                return Ok(Progress::Ready(buf.len()));
            }
        }
    }
}

/// Where a received message lands: a `Vec` it grows into, or a caller's slice
/// ([`SliceLanding`]: one copy from the ring, none after).
pub(super) trait Landing {
    /// Forgets what a previous message left.
    fn clear(&mut self);
    /// Bytes of the message received so far (written or dropped).
    fn len(&self) -> usize;
    /// The message's announced length, to prepare for.
    fn expect(&mut self, total: usize);
    /// Where the next `n` bytes go, or `None` to drop them (they do not fit).
    fn room(&mut self, n: usize) -> Option<*mut u8>;
    /// Counts `n` more bytes received (written where `room` said, or dropped).
    fn advance(&mut self, n: usize);
}

impl Landing for Vec<u8> {
    fn clear(&mut self) {
        Vec::clear(self);
    }

    fn len(&self) -> usize {
        Vec::len(self)
    }

    fn expect(&mut self, total: usize) {
        self.reserve(total);
    }

    fn room(&mut self, n: usize) -> Option<*mut u8> {
        self.reserve(n);
        // SAFETY: `reserve` left at least `n` bytes of spare capacity past the length.
        Some(unsafe { self.as_mut_ptr().add(Vec::len(self)) })
    }

    fn advance(&mut self, n: usize) {
        // SAFETY: the `n` bytes past the length were written through `room`'s pointer.
        unsafe { self.set_len(Vec::len(self) + n) };
    }
}

/// A caller's buffer as a landing: bytes past its end are dropped and counted, so that a
/// message too long for it is consumed whole (and then refused by the caller).
pub(super) struct SliceLanding<'a> {
    pub(super) dst: &'a mut [u8],
    pub(super) got: usize,
}

impl Landing for SliceLanding<'_> {
    fn clear(&mut self) {
        self.got = 0;
    }

    fn len(&self) -> usize {
        self.got
    }

    fn expect(&mut self, _total: usize) {}

    fn room(&mut self, n: usize) -> Option<*mut u8> {
        (self.got + n <= self.dst.len())
            // SAFETY: `got + n` is within `dst`.
            .then(|| unsafe { self.dst.as_mut_ptr().add(self.got) })
    }

    fn advance(&mut self, n: usize) {
        self.got += n;
    }
}
