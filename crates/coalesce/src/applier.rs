//! The receiving side of a [`crate::CommCache`]: copies ways into the window (pushed
//! messages, or pulled from the sender's buffers), acknowledges flushes, and in checked
//! mode verifies every line's metadata.
//!
//! Pushed contiguous ways arrive as RMAs straight into the window and need nothing from
//! the applier; it only has to run when the cache flushes (to acknowledge) and whenever
//! other transfers are in flight. With a pulling cache it does the copying, so it should
//! run all along (a sender that runs out of spare buffers waits for it). The usual loop:
//!
//! ```no_run
//! # fn demo(applier: &mut accio_coalesce::Applier<'_>) -> accio_coalesce::Result<()> {
//! while let Some(epoch) = applier.next_flush(None)? {
//!     // Everything the sender inserted before its flush number `epoch` is in the window.
//!     let _ = epoch;
//! }
//! # Ok(())
//! # }
//! ```

use std::ops::Range;
use std::time::{Duration, Instant};

use accio_core::{copy_bytes, Access, Endpoint, ErrorKind, RemoteMap, RmaFlags, Window};

use crate::buf::copy_line;

use crate::error::{CheckError, Error, Result};
use crate::wire::{self, EvictMsg, Msg, WayMsg};

/// What an applier has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplierStats {
    /// Way messages applied (push).
    pub messages: u64,
    /// Way buffers pulled from the sender.
    pub pulls: u64,
    /// Lines copied into the window.
    pub lines: u64,
    /// Bytes copied into the window.
    pub bytes: u64,
    /// Flushes acknowledged.
    pub flushes: u64,
}

impl Drop for Applier<'_> {
    fn drop(&mut self) {
        if let Some(st) = self.source.as_ref().and_then(|s| s.staging.as_ref()) {
            let _ = self.ep.unregister(st.offset());
        }
    }
}

/// What [`Applier::poll`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polled {
    /// Nothing had arrived.
    Idle,
    /// Applied what had arrived; no flush marker among it.
    Progress,
    /// Applied everything up to this flush marker and acknowledged it.
    Flushed(u64),
    /// The cache was closed.
    Closed,
}

/// Applies a peer cache's scattered ways into `window` (see the [module docs](self)).
#[derive(Debug)]
pub struct Applier<'e> {
    ep: &'e dyn Endpoint,
    window: Window,
    checked: Option<u32>,
    region: Range<u64>,
    buf: Vec<u8>,
    source: Option<Source>,
    stats: ApplierStats,
}

/// The sender's way storage, for pulling (from its `SETUP` message).
#[derive(Debug)]
struct Source {
    line: usize,
    way_bytes: usize,
    off: u64,
    len: u64,
    /// The storage mapped into this process, where the backend can.
    map: Option<RemoteMap>,
    /// Where `read_from` lands scattered ways without a mapping (registered on first use).
    staging: Option<Window>,
    /// The cache's session number, echoed in every reply.
    session: u32,
}

impl<'e> Applier<'e> {
    /// An applier writing into `window`, a window registered on `ep` with write access for
    /// the peer.
    pub fn new(ep: &'e dyn Endpoint, window: Window) -> Applier<'e> {
        let len = window.len() as u64;
        Applier {
            ep,
            window,
            checked: None,
            region: 0..len,
            buf: Vec::new(),
            source: None,
            stats: ApplierStats::default(),
        }
    }

    /// Checked mode (default off): every transfer must carry per-line metadata, each line
    /// must name `self_id` as its destination, the window offset it is applied at, and lie
    /// in the expected [`region`](Applier::region). A violation is a [`CheckError`] and
    /// nothing of that transfer is applied.
    pub fn checked(mut self, self_id: u32) -> Applier<'e> {
        self.checked = Some(self_id);
        self
    }

    /// The window-relative range checked mode accepts lines in (default: the whole window).
    /// Clipped to the window.
    pub fn region(mut self, region: Range<u64>) -> Applier<'e> {
        let len = self.window.len() as u64;
        self.region = region.start.min(len)..region.end.min(len);
        self
    }

    /// The window lines are applied to.
    pub fn window(&self) -> &Window {
        &self.window
    }

    /// Counters so far.
    pub fn stats(&self) -> ApplierStats {
        self.stats
    }

    /// Tells the peer which window to write (its [`crate::RemoteWindow::receive`] gets it).
    pub fn announce(&self) -> Result<()> {
        self.ep.send(&wire::hello(
            self.window.offset(),
            self.window.len() as u64,
            self.checked,
        ))?;
        Ok(())
    }

    /// Applies incoming ways until the next flush marker, acknowledges it and returns its
    /// epoch (1 for the first flush); `None` when the cache was closed. Waits at most
    /// `timeout` in all (`None`: as long as the peer lives). On an error the offending
    /// transfer was not applied.
    pub fn next_flush(&mut self, timeout: Option<Duration>) -> Result<Option<u64>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            self.ep.recv_timeout(&mut self.buf, left)?;
            let buf = std::mem::take(&mut self.buf);
            let r = self.handle(&buf);
            self.buf = buf;
            match r? {
                Some(done) => return Ok(done),
                None => continue,
            }
        }
    }

    /// Handles what has arrived, without waiting: every way message and handed-over buffer
    /// already queued, up to and including the next flush marker. For a receiver that
    /// computes between calls (a pulling sender waits for its buffers meanwhile).
    pub fn poll(&mut self) -> Result<Polled> {
        let mut did = false;
        loop {
            if !self.ep.try_recv(&mut self.buf)?.is_ready() {
                return Ok(if did { Polled::Progress } else { Polled::Idle });
            }
            let buf = std::mem::take(&mut self.buf);
            let r = self.handle(&buf);
            self.buf = buf;
            match r? {
                Some(Some(epoch)) => return Ok(Polled::Flushed(epoch)),
                Some(None) => return Ok(Polled::Closed),
                None => did = true,
            }
        }
    }

    /// One message: `Some(Some(epoch))` for a flush, `Some(None)` for bye, `None` for a way.
    fn handle(&mut self, b: &[u8]) -> Result<Option<Option<u64>>> {
        match wire::parse(b).map_err(|r| Error::protocol(self.ep.peer_addr(), r))? {
            Msg::Way(w) => {
                self.apply(&w)?;
                Ok(None)
            }
            Msg::Flush(epoch, session) => {
                self.ep.send(&wire::epoch_msg(wire::ACK, epoch, session))?;
                self.stats.flushes += 1;
                Ok(Some(Some(epoch)))
            }
            Msg::Bye => Ok(Some(None)),
            Msg::Setup {
                pull,
                line,
                lpw,
                off,
                len,
                session,
            } => {
                self.setup(pull, line, lpw, off, len, session)?;
                Ok(None)
            }
            Msg::Evict(e) => {
                self.pull(&e)?;
                let session = self.source.as_ref().map_or(0, |s| s.session);
                self.ep.send(&wire::free(e.buf_off, session))?;
                Ok(None)
            }
            other => Err(Error::protocol(
                self.ep.peer_addr(),
                format!("unexpected {other:?} on a cache's data stream"),
            )),
        }
    }

    /// Checks every line of `w`, then copies them all.
    fn apply(&mut self, w: &WayMsg<'_>) -> Result<()> {
        let len = self.window.len() as u64;
        if self.checked.is_some() && !w.checked {
            return Err(CheckError::MissingMetadata {
                what: "cache transfer",
                peer: self.ep.peer_addr().to_string(),
            }
            .into());
        }
        let line = w.line as u64;
        let target = |i: usize| -> Option<u64> {
            w.block_off
                .checked_add(w.index(i).checked_mul(line)?)
                .filter(|off| off.checked_add(line).is_some_and(|end| end <= len))
        };
        for i in 0..w.n {
            let Some(off) = target(i) else {
                return Err(Error::protocol(
                    self.ep.peer_addr(),
                    format!(
                        "line {} of block {:#x} ({line} bytes) lies outside the {len}-byte window",
                        w.index(i),
                        w.block_off
                    ),
                ));
            };
            if w.checked {
                self.verify(w.meta(i), off, line)?;
            }
        }
        let dst = self.window.as_ptr();
        for i in 0..w.n {
            let off = target(i).expect("checked above") as usize;
            let data = w.data(i);
            // SAFETY: `off + line <= window length` (checked above for every line);
            // `data` lies in the received message, not in the window.
            unsafe { copy_line(dst.add(off), data.as_ptr(), data.len()) };
        }
        self.stats.messages += 1;
        self.stats.lines += w.n as u64;
        self.stats.bytes += (w.n * w.line) as u64;
        Ok(())
    }

    fn setup(
        &mut self,
        pull: bool,
        line: usize,
        lpw: usize,
        off: u64,
        len: u64,
        session: u32,
    ) -> Result<()> {
        let map = if pull && self.ep.capabilities().map_remote {
            let n = usize::try_from(len).map_err(|_| {
                Error::protocol(self.ep.peer_addr(), format!("way storage of {len} bytes"))
            })?;
            match self.ep.map_remote(off, n) {
                Ok(m) => Some(m),
                Err(e) if e.kind() == ErrorKind::Unsupported => None,
                Err(e) => return Err(e.into()),
            }
        } else {
            None
        };
        // A staging window of the right size (from an earlier cache) is kept, else dropped.
        let staging = match self.source.take().and_then(|s| s.staging) {
            Some(st) if st.len() == line * lpw => Some(st),
            Some(st) => {
                self.ep.unregister(st.offset())?;
                None
            }
            None => None,
        };
        self.source = Some(Source {
            line,
            way_bytes: line * lpw,
            off,
            len,
            map,
            staging,
            session,
        });
        Ok(())
    }

    /// Copies the valid lines of one of the sender's way buffers into the window.
    fn pull(&mut self, e: &EvictMsg<'_>) -> Result<()> {
        let peer = self.ep.peer_addr();
        if self.checked.is_some() {
            return Err(CheckError::MissingMetadata {
                what: "pulled cache transfer",
                peer: peer.to_string(),
            }
            .into());
        }
        let Some(src) = self.source.as_mut() else {
            return Err(Error::protocol(
                peer,
                "way buffer handed over before the setup",
            ));
        };
        let (line, wlen) = (src.line as u64, self.window.len() as u64);
        let lines = (src.way_bytes / src.line) as u64;
        let span_ok = (e.hi as u64) < lines
            && e.buf_off >= src.off
            && (e.buf_off - src.off).is_multiple_of(src.way_bytes as u64)
            && e.buf_off - src.off + src.way_bytes as u64 <= src.len
            && e.block_off.is_multiple_of(src.way_bytes as u64)
            && e.block_off
                .checked_add((e.hi as u64 + 1) * line)
                .is_some_and(|end| end <= wlen);
        if !span_ok {
            return Err(Error::protocol(
                peer,
                format!(
                    "way buffer {:#x} lines {}..={} for block {:#x} lies outside the sender's storage {:#x}+{} or this {wlen}-byte window",
                    e.buf_off, e.lo, e.hi, e.block_off, src.off, src.len
                ),
            ));
        }
        let (lo, hi) = (e.lo as u64, e.hi as u64);
        let first = e.block_off + lo * line;
        let span = ((hi - lo + 1) * line) as usize;
        // Where the lines lo..=hi can be read from in this process.
        let from: *const u8 = match (&src.map, e.contiguous()) {
            (Some(map), _) => {
                // SAFETY: the buffer lies inside the mapped storage (checked above).
                unsafe { map.as_ptr().add((e.buf_off - src.off + lo * line) as usize) }
            }
            (None, true) => {
                // One RMA straight into the window.
                self.ep.read_from(
                    self.window.offset() + first,
                    span,
                    e.buf_off + lo * line,
                    RmaFlags::SYNC,
                )?;
                std::ptr::null()
            }
            (None, false) => {
                if src.staging.is_none() {
                    src.staging = Some(self.ep.register(src.way_bytes, Access::NONE)?);
                }
                let st = src.staging.as_ref().expect("registered");
                self.ep
                    .read_from(st.offset(), span, e.buf_off + lo * line, RmaFlags::SYNC)?;
                st.as_ptr()
            }
        };
        let dst = self.window.as_ptr();
        if !from.is_null() {
            if e.contiguous() {
                // SAFETY: `span` bytes from `from` lie in the sender's storage mapping (or
                // our staging window) and `first + span <= window length` (checked above);
                // they are different mappings. The sender does not write a buffer it
                // handed over until we return it (and may not write our window at all).
                unsafe { copy_bytes(dst.add(first as usize), from, span) };
            } else {
                let l = line as usize;
                let base_line = 64 * (e.lo / 64);
                for i in 0..e.words() {
                    let mut bits = e.word(i);
                    while bits != 0 {
                        let k = (base_line + 64 * i + bits.trailing_zeros() as usize) as u64;
                        bits &= bits - 1;
                        let at = ((k - lo) * line) as usize;
                        let to = (e.block_off + k * line) as usize;
                        // SAFETY: lo <= k <= hi (the decoder checked the bitmap), so both
                        // ranges are inside the checked spans above.
                        unsafe { copy_line(dst.add(to), from.add(at), l) };
                    }
                }
            }
        }
        self.stats.pulls += 1;
        self.stats.lines += e.n as u64;
        self.stats.bytes += e.n as u64 * line;
        Ok(())
    }

    fn verify(&self, (sender, dest, claimed): (u32, u32, u64), off: u64, line: u64) -> Result<()> {
        if claimed != off {
            return Err(CheckError::OffsetMismatch {
                sender,
                claimed,
                actual: off,
            }
            .into());
        }
        let Some(me) = self.checked else {
            return Ok(());
        };
        if dest != me {
            return Err(CheckError::WrongDestination {
                datum: format!("line for window offset {off:#x}"),
                sender,
                expected: me,
                actual: dest,
            }
            .into());
        }
        if off < self.region.start || off + line > self.region.end {
            return Err(CheckError::WrongRegion {
                datum: format!("line for window offset {off:#x}"),
                sender,
                offset: off,
                len: line,
                region: self.region.clone(),
            }
            .into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{pair, WAIT};
    use crate::wire::{way_header, WayLayout, WAY_HEADER};

    /// A receiver with a 4 KiB window on the accepted end; returns the error its first
    /// `next_flush` fails with and the window's bytes.
    fn receive_one(rx: Box<dyn Endpoint>) -> std::thread::JoinHandle<(String, Vec<u8>)> {
        std::thread::spawn(move || {
            let w = rx.register(4096, Access::WRITE).unwrap();
            let mut a = Applier::new(&*rx, w);
            a.announce().unwrap();
            let e = a.next_flush(Some(WAIT)).unwrap_err().to_string();
            let mut all = vec![0u8; 4096];
            a.window().read_at(0, &mut all).unwrap();
            (e, all)
        })
    }

    #[test]
    fn a_way_message_with_one_line_past_the_window_applies_none_of_its_lines() {
        let (tx, rx) = pair("shm");
        let r = receive_one(rx);
        crate::RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
        let l = WayLayout::new(2, 8, false).unwrap();
        let mut m = vec![0u8; l.total];
        // Block at 4064: line 0 (4064..4072) fits, line 4 (4096..4104) does not.
        way_header(&mut m, false, 8, 2, 4064);
        m[WAY_HEADER..WAY_HEADER + 2].copy_from_slice(&0u16.to_le_bytes());
        m[WAY_HEADER + 2..WAY_HEADER + 4].copy_from_slice(&4u16.to_le_bytes());
        m[l.data_at..].fill(7);
        tx.send(&m).unwrap();
        let (e, window) = r.join().unwrap();
        assert!(
            e.contains("line 4 of block 0xfe0 (8 bytes) lies outside the 4096-byte window"),
            "{e}"
        );
        assert_eq!(window, vec![0u8; 4096], "line 0 (at 4064) was applied");
    }

    #[test]
    fn a_handed_over_buffer_outside_the_senders_storage_is_refused() {
        let (tx, rx) = pair("shm");
        let r = receive_one(rx);
        crate::RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
        let storage = tx.register(4096, Access::READ).unwrap();
        storage.write_at(0, &[5; 64]).unwrap();
        tx.send(&wire::setup(true, 8, 4, storage.offset(), 64, 1))
            .unwrap();
        let mut m = vec![0u8; wire::EVICT_HEADER];
        // Buffer 2 (bytes 64..96) lies past the 64 bytes of storage the setup announced.
        wire::evict_header(&mut m, storage.offset() + 64, 0, 0, 3, 4, 0);
        tx.send(&m).unwrap();
        let (e, window) = r.join().unwrap();
        assert!(e.contains("lies outside the sender's storage"), "{e}");
        assert_eq!(window, vec![0u8; 4096]);
    }

    #[test]
    fn poll_applies_what_arrived_and_reports_flushes_without_blocking() {
        use crate::{CacheConfig, CommCache, Geometry, RemoteWindow, Transfer};
        let (tx, rx) = pair("shm");
        let w = rx.register(4096, Access::WRITE).unwrap();
        let mut a = Applier::new(&*rx, w);
        a.announce().unwrap();
        assert_eq!(a.poll().unwrap(), Polled::Idle);
        let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
        let g = Geometry {
            line_bytes: 8,
            lines_per_way: 4,
            ways: 1,
            sets: 1,
        };
        let cfg = CacheConfig::new().geometry(g).transfer(Transfer::Pull);
        let mut cache = CommCache::new(&*tx, remote, cfg).unwrap();
        assert_eq!(a.poll().unwrap(), Polled::Progress, "the setup");
        cache.insert(0, &[1; 8]).unwrap();
        cache.insert(16, &[1; 8]).unwrap();
        cache.insert(64, &[2; 8]).unwrap(); // evicts block 0: handed over
        assert_eq!(a.poll().unwrap(), Polled::Progress);
        assert_eq!(a.stats().pulls, 1);
        let mut got = [0u8; 24];
        a.window().read_at(0, &mut got).unwrap();
        assert_eq!(got, [[1u8; 8], [0; 8], [1; 8]].concat()[..]);
        let epoch = cache.flush_async().unwrap();
        let polled = loop {
            match a.poll().unwrap() {
                Polled::Flushed(e) => break e,
                Polled::Idle | Polled::Progress => std::thread::yield_now(),
                Polled::Closed => panic!("closed"),
            }
        };
        assert_eq!(polled, epoch);
        cache.wait(epoch).unwrap();
        // `close` flushes once more (waiting for our acknowledgement) and says bye.
        let mut seen = Vec::new();
        std::thread::scope(|s| {
            let closer = s.spawn(move || cache.close().unwrap());
            while seen.last() != Some(&Polled::Closed) {
                match a.poll().unwrap() {
                    Polled::Idle | Polled::Progress => std::thread::yield_now(),
                    other => seen.push(other),
                }
            }
            assert_eq!(closer.join().unwrap().flushes, 2);
        });
        assert_eq!(seen, [Polled::Flushed(2), Polled::Closed]);
    }

    #[test]
    fn a_handed_over_buffer_before_the_setup_is_a_protocol_error() {
        let (tx, rx) = pair("tcp");
        let r = receive_one(rx);
        crate::RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
        let mut m = vec![0u8; wire::EVICT_HEADER];
        wire::evict_header(&mut m, 1 << 20, 0, 0, 0, 1, 0);
        tx.send(&m).unwrap();
        let (e, _) = r.join().unwrap();
        assert!(e.contains("handed over before the setup"), "{e}");
    }
}
