//! The insert path: a hit copies the line into its way; a miss takes a free way or
//! sends the fullest of its set.

use super::{CommCache, Placement, EMPTY, NONE};
use crate::buf::copy_line;
use crate::error::{Error, Result};

impl CommCache<'_> {
    /// Caches one line for window offset `offset` (relative to the window start, a multiple
    /// of the line size; `line` is exactly one line). May send one way (a conflict miss);
    /// if that fails the error is returned and nothing was cached.
    #[inline(always)]
    pub fn insert(&mut self, offset: u64, line: &[u8]) -> Result<()> {
        self.insert_all(std::iter::once((offset, line)))
    }

    /// Caches every `(offset, line)` of `items` in order, as [`insert`](Self::insert) of
    /// each would; on an error the lines before the failing one stay cached, the failing
    /// one and those after it are not.
    ///
    /// The way to insert many lines at once: the loop keeps the cache's geometry and tables
    /// in registers. Called line by line, each insert reloads them from the cache, and on
    /// the machines accio is measured on every such load waits behind the line stores still
    /// draining to memory: on a 2-core EPYC VM a random 64-byte insert costs about 11 ns line
    /// by line, 7 ns here, and a plain store loop 4 ns (`examples/insert_rate.rs`).
    // Inlined into the caller: the hit path is a few dozen instructions, and a call with
    // its register saves would cost as much again.
    #[inline(always)]
    pub fn insert_all<'a, I>(&mut self, items: I) -> Result<()>
    where
        I: IntoIterator<Item = (u64, &'a [u8])>,
    {
        let (line_len, window_len) = (self.line, self.remote.len);
        let (line_shift, lpw_shift, lpw_mask) = (self.line_shift, self.lpw_shift, self.lpw_mask);
        let (way_bytes, words, base) = (self.way_bytes, self.words, self.base);
        // Raw pointers, so that the loop reads the tables without reloading the vectors
        // from `self`; the tables are sized at construction and never reallocated.
        let mut dir = self.dir.as_ptr();
        let mut valid = self.valid.as_mut_ptr();
        let mut cached = 0u64;
        let mut outcome = Ok(());
        for (offset, line) in items {
            let end = offset.wrapping_add(line_len as u64);
            if line.len() != line_len
                || offset & (line_len as u64 - 1) != 0
                || end > window_len
                || end < offset
            {
                outcome = Err(self.bad_write("insert", offset, line.len()));
                break;
            }
            let li = offset >> line_shift;
            let block = (li >> lpw_shift) as usize;
            let idx = (li & lpw_mask) as usize;
            // The buffer straight from the directory: the store's address hangs off one
            // load, not two.
            // SAFETY: `offset + line_len <= window_len`, so `block` is below the number of
            // blocks of the window, which is `dir`'s length.
            let mut buf = unsafe { *dir.add(block) };
            if buf == NONE {
                match self.miss(block) {
                    Ok(b) => {
                        buf = b;
                        // `miss` wrote the tables through `&mut self`: take the pointers
                        // again rather than use ones from before those writes.
                        dir = self.dir.as_ptr();
                        valid = self.valid.as_mut_ptr();
                    }
                    Err(e) => {
                        outcome = Err(e);
                        break;
                    }
                }
            }
            let buf = buf as usize;
            // SAFETY: `buf` is the buffer of a way holding `block` (from `dir` or `miss`),
            // one of the `nbuf`; `idx < lines_per_way`, so `at + line_len` lies inside the
            // `nbuf * way_bytes` bytes at `base`, and the bitmap word inside `valid`. The
            // buffer is not in flight, so the peer does not read it now (pull protocol),
            // and `line` is caller memory, not the storage.
            unsafe {
                let at = buf * way_bytes + (idx << line_shift);
                debug_assert!(at + line_len <= self.nbuf * way_bytes);
                copy_line(base.add(at), line.as_ptr(), line_len);
                // No branch on "was it valid already": random writers make it unpredictable.
                *valid.add(buf * words + idx / 64) |= 1u64 << (idx % 64);
            }
            cached += 1;
        }
        self.stats.lines_in += cached;
        outcome
    }

    /// Caches `bytes` for window offset `offset`: a whole number of lines at a line
    /// boundary, inserted line by line. Checked whole before any line is cached.
    pub fn write(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        let line = self.line as u64;
        let end = offset.checked_add(bytes.len() as u64);
        if !offset.is_multiple_of(line)
            || !(bytes.len() as u64).is_multiple_of(line)
            || end.is_none_or(|e| e > self.remote.len)
        {
            return Err(self.bad_write("write", offset, bytes.len()));
        }
        for (i, l) in bytes.chunks_exact(self.line).enumerate() {
            self.insert(offset + i as u64 * line, l)?;
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn bad_write(&self, op: &'static str, offset: u64, len: usize) -> Error {
        let line = self.line;
        let reason = if op == "insert" && len != line {
            format!("a line is exactly {line} bytes")
        } else if !offset.is_multiple_of(line as u64) || !len.is_multiple_of(line) {
            format!(
                "writes must start on a {line}-byte line boundary and be whole lines \
                 (a partial line would overwrite the peer's bytes around it)"
            )
        } else {
            format!(
                "the peer window {:#x} of {} bytes ends before it",
                self.remote.offset, self.remote.len
            )
        };
        Error::BadWrite {
            op,
            offset,
            len,
            reason,
        }
    }

    /// `block` is not cached: take a free way of its set, or send the fullest; give the
    /// way a buffer, which is returned (and entered in the directory).
    #[cold]
    #[inline(never)]
    fn miss(&mut self, block: usize) -> Result<u32> {
        let set = block & self.set_mask;
        let first = set * self.ways;
        let start = match self.placement {
            Placement::FirstFree => 0,
            Placement::RoundRobin => self.rr[set] as usize,
        };
        let order = (0..self.ways).map(|k| first + (start + k) % self.ways);
        let chosen = match order.clone().find(|&w| self.tags[w] == EMPTY) {
            Some(w) => w,
            None => {
                // Fullest way; the first in placement order among equals.
                let mut best = (first + start, 0);
                for w in order {
                    let n = self.count(w);
                    if n > best.1 {
                        best = (w, n);
                    }
                }
                let best = best.0;
                self.evict(best)?;
                self.stats.evictions += 1;
                best
            }
        };
        let buf = self.take_buffer()?;
        self.tags[chosen] = block as u64;
        self.bufs[chosen] = buf;
        self.dir[block] = buf;
        self.rr[set] = ((chosen - first + 1) % self.ways) as u32;
        Ok(buf)
    }

    /// A free buffer, waiting for the receiver to return one if all are out.
    fn take_buffer(&mut self) -> Result<u32> {
        if self.free.is_empty() {
            self.stats.buffer_waits += 1;
        }
        loop {
            if let Some(b) = self.free.pop() {
                return Ok(b);
            }
            if self.out == 0 {
                return Err(Error::protocol(
                    self.ep.peer_addr(),
                    "no way buffer is free and none is with the receiver",
                ));
            }
            self.wait_reply()?;
        }
    }
}
