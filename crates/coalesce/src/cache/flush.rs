//! Flushing and closing, and the applier's replies they wait for (returned buffers,
//! acknowledgements).

use super::{CacheStats, CommCache, EMPTY};
use crate::error::{Error, Result};
use crate::wire;

impl CommCache<'_> {
    /// Receives one message from the applier: a returned buffer or the acknowledgement of
    /// the next flush.
    pub(super) fn wait_reply(&mut self) -> Result<()> {
        self.ep.recv_timeout(&mut self.reply, self.flush_timeout)?;
        self.on_reply()
    }

    /// Handles the replies that already arrived, without waiting.
    fn drain_replies(&mut self) -> Result<()> {
        while self.ep.try_recv(&mut self.reply)?.is_ready() {
            self.on_reply()?;
        }
        Ok(())
    }

    fn on_reply(&mut self) -> Result<()> {
        let peer = self.ep.peer_addr();
        match wire::parse(&self.reply).map_err(|r| Error::protocol(peer, r))? {
            // Replies to an earlier cache on this endpoint (dropped before its flushes were
            // acknowledged) are not ours.
            wire::Msg::Free(_, s) | wire::Msg::Ack(_, s) if s != self.session => Ok(()),
            wire::Msg::Free(off, _) => {
                let rel = off.wrapping_sub(self.storage_off);
                let b = rel / self.way_bytes as u64;
                if !self.pull
                    || off < self.storage_off
                    || rel % self.way_bytes as u64 != 0
                    || b >= self.nbuf as u64
                    || self.out == 0
                {
                    return Err(Error::protocol(
                        peer,
                        format!("returned buffer {off:#x} is not one of ours in flight"),
                    ));
                }
                self.free.push(b as u32);
                self.out -= 1;
                Ok(())
            }
            wire::Msg::Ack(e, _) if e == self.acked + 1 && e <= self.epoch => {
                self.acked = e;
                self.done = self.done.max(e);
                self.stats.flushes = self.done;
                if e >= self.msg_epoch {
                    // Every message sent so far is applied: RMAs may go to tainted blocks
                    // again, and every pulled buffer is back.
                    self.taint.fill(0);
                    if self.out != 0 {
                        return Err(Error::protocol(
                            peer,
                            format!(
                                "flush {e} was acknowledged with {} way buffers not returned",
                                self.out
                            ),
                        ));
                    }
                }
                Ok(())
            }
            other => Err(Error::protocol(
                peer,
                format!(
                    "expected a returned buffer or the acknowledgement of flush {}, got {other:?}",
                    self.acked + 1
                ),
            )),
        }
    }
    /// Sends every cached line and waits until the receiver's [`crate::Applier`] has
    /// applied all of them (see the [module docs](super)). Ways are emptied and freed.
    pub fn flush(&mut self) -> Result<()> {
        let epoch = self.flush_async()?;
        self.wait(epoch)
    }

    /// Sends every cached line and the flush marker without waiting for the receiver;
    /// returns the flush's number for [`wait`](CommCache::wait). Inserts can go on at once
    /// (with a pulling cache they wait for buffers as the receiver returns them), so the
    /// receiver's copying overlaps the next batch of inserts.
    pub fn flush_async(&mut self) -> Result<u64> {
        for way in 0..self.tags.len() {
            if self.tags[way] != EMPTY {
                self.evict(way)?;
            }
        }
        self.rr.fill(0);
        let mark = self.ep.fence_mark()?;
        self.ep.fence_wait(mark)?;
        let e = self.epoch + 1;
        self.ep
            .send(&wire::epoch_msg(wire::FLUSH, e, self.session))?;
        self.epoch = e;
        if self.msg_epoch < e && self.done == e - 1 {
            // Only RMAs since the last complete flush, and the fence saw them land: done
            // without waiting for the acknowledgement (it is consumed later).
            self.done = e;
            self.stats.flushes = e;
        }
        // Acknowledgements nobody waits for must not pile up in the applier's way.
        self.drain_replies()?;
        Ok(e)
    }

    /// Waits until flush `epoch` (from [`flush_async`](CommCache::flush_async)) was
    /// acknowledged: every line inserted before it is in the peer window.
    pub fn wait(&mut self, epoch: u64) -> Result<()> {
        if epoch > self.epoch {
            return Err(Error::config(
                "flush number",
                format!("flush {epoch} was not started (last: {})", self.epoch),
            ));
        }
        while self.done < epoch {
            self.wait_reply()?;
        }
        Ok(())
    }

    /// Flushes, then tells the applier that no more data will come (its
    /// [`crate::Applier::next_flush`] returns `None`). Returns the final counters.
    pub fn close(mut self) -> Result<CacheStats> {
        self.flush()?;
        // Consume every acknowledgement, also those a flush did not need to wait for, so
        // that nothing of this cache is left for the next one on the endpoint.
        while self.acked < self.epoch {
            self.wait_reply()?;
        }
        self.ep.send(&wire::bye())?;
        Ok(self.stats)
    }
}
