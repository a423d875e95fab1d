//! The message paths: sending (split into ring records) and receiving (reassembled).

use std::time::Instant;

use accio_core::{Error, Progress, Result};

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
        let chunk = tx.max_chunk();
        let total = msg.len() as u64;
        let mut sent = 0usize;
        loop {
            let n = (msg.len() - sent).min(chunk);
            let piece = &msg[sent..sent + n];
            let (first, more) = (sent == 0, sent + n < msg.len());
            if !tx.try_push(piece, first, more, total) {
                let ring = *tx.ring();
                self.wait(ring.producer_wait(), || tx.fits(n), None, "send")?;
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
        buf: &mut Vec<u8>,
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
                    self.wait(ring.consumer_wait(), || rx.ready(), dl, "recv")?;
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
                buf.reserve((rec.total as usize).min(64 << 20));
            }
            if (buf.len() + rec.len) as u64 > rec.total {
                self.gone.set();
                return Err(Error::protocol(
                    &self.addr,
                    format!("a message runs past the {} bytes it announced", rec.total),
                ));
            }
            buf.reserve(rec.len);
            let at = buf.len();
            // SAFETY: `reserve` guaranteed `rec.len` bytes of spare capacity at `at`; they
            // are fully written by `copy_out` before `set_len` exposes them.
            unsafe {
                rx.copy_out(&rec, buf.as_mut_ptr().add(at));
                buf.set_len(at + rec.len);
            }
            rx.pop(&rec);
            if !rec.more {
                return Ok(Progress::Ready(buf.len()));
            }
        }
    }
}
