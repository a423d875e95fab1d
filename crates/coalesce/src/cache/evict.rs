//! Sending one way as one transfer: an RMA for contiguous lines, else a pull hand-over
//! or a packed push message.

use accio_core::RmaFlags;

use super::{CommCache, WayMeta, EMPTY, NONE, PULL_MIN};
use crate::buf::copy_line;
use crate::error::Result;
use crate::wire::{self, WayLayout, EVICT_HEADER, META_BYTES, WAY_HEADER};

impl CommCache<'_> {
    /// The validity bitmap of way `way`'s buffer (empty for a way without one).
    fn bitmap(&self, way: usize) -> &[u64] {
        match self.bufs[way] {
            NONE => &[],
            b => &self.valid[b as usize * self.words..(b as usize + 1) * self.words],
        }
    }

    /// Valid lines of way `way`.
    pub(super) fn count(&self, way: usize) -> usize {
        self.bitmap(way)
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum()
    }

    /// Count and extent of way `way`'s valid lines (`n == 0`: none).
    fn extent(&self, way: usize) -> WayMeta {
        let words = self.bitmap(way);
        let Some(first) = words.iter().position(|&w| w != 0) else {
            return WayMeta { n: 0, lo: 0, hi: 0 };
        };
        let last = words
            .iter()
            .rposition(|&w| w != 0)
            .expect("one word is set");
        WayMeta {
            n: words[first..=last]
                .iter()
                .map(|w| w.count_ones() as usize)
                .sum(),
            lo: first * 64 + words[first].trailing_zeros() as usize,
            hi: last * 64 + 63 - words[last].leading_zeros() as usize,
        }
    }

    fn tainted(&self, block: u64) -> bool {
        self.taint
            .get((block / 64) as usize)
            .is_some_and(|w| w & (1 << (block % 64)) != 0)
    }

    /// Sends way `way` as one transfer and frees it (tag, directory entry and buffer). On
    /// error the way is left as it was.
    pub(super) fn evict(&mut self, way: usize) -> Result<()> {
        let m = self.extent(way);
        let block = self.tags[way];
        let buf = self.bufs[way] as usize;
        // Pulled buffers come back with the receiver's `FREE`; the others are free now.
        let mut handed_over = false;
        if m.n > 0 {
            let block_off = block * self.way_bytes as u64;
            let (lo, hi, n) = (m.lo, m.hi, m.n);
            let payload = (n * self.line) as u64;
            let base = buf * self.way_bytes;
            let contiguous = hi - lo + 1 == n;
            if contiguous && self.checked.is_none() && !self.tainted(block) {
                // SAFETY: lines lo..=hi of buffer `buf` lie inside the storage (see
                // `insert`); only `&self` is held while the slice lives.
                let src = unsafe {
                    std::slice::from_raw_parts(self.base.add(base + lo * self.line), n * self.line)
                };
                let to = self.remote.offset + block_off + (lo * self.line) as u64;
                self.ep.vwrite_to(src, to, RmaFlags::ASYNC)?;
                self.stats.rma_transfers += 1;
                self.stats.wire_bytes += payload;
            } else if self.pull && payload >= PULL_MIN.min(self.way_bytes as u64 / 2) {
                let words = if contiguous { 0 } else { hi / 64 - lo / 64 + 1 };
                let len = EVICT_HEADER + 8 * words;
                let w0 = buf * self.words + lo / 64;
                let bitmap = &self.valid[w0..w0 + words];
                let pack = self.pack.as_mut_slice();
                wire::evict_header(
                    pack,
                    self.storage_off + base as u64,
                    block_off,
                    lo,
                    hi,
                    n,
                    words,
                );
                for (i, w) in bitmap.iter().enumerate() {
                    let a = EVICT_HEADER + 8 * i;
                    pack[a..a + 8].copy_from_slice(&w.to_le_bytes());
                }
                self.ep.send(&self.pack.as_slice()[..len])?;
                self.msg_epoch = self.epoch + 1;
                self.taint[(block / 64) as usize] |= 1 << (block % 64);
                self.out += 1;
                handed_over = true;
                self.stats.pull_transfers += 1;
                self.stats.wire_bytes += payload + len as u64;
            } else {
                let total = self.pack_way(m, buf, block_off);
                self.ep.send(&self.pack.as_slice()[..total])?;
                self.msg_epoch = self.epoch + 1;
                self.taint[(block / 64) as usize] |= 1 << (block % 64);
                self.stats.message_transfers += 1;
                self.stats.wire_bytes += total as u64;
            }
            self.stats.transfers += 1;
            self.stats.lines_sent += n as u64;
            self.stats.payload_bytes += payload;
            let words = &mut self.valid[buf * self.words..(buf + 1) * self.words];
            words[lo / 64..=hi / 64].fill(0);
        }
        if !handed_over {
            self.free.push(buf as u32);
        }
        self.dir[block as usize] = NONE;
        self.tags[way] = EMPTY;
        self.bufs[way] = NONE;
        Ok(())
    }

    /// Packs the valid lines of buffer `buf` into the message buffer; returns the message
    /// length.
    fn pack_way(&mut self, m: WayMeta, buf: usize, block_off: u64) -> usize {
        let (n, line) = (m.n, self.line);
        let layout = WayLayout::new(n, line, self.checked.is_some()).expect("fits max message");
        let storage = self.base as *const u8;
        let pack = self.pack.as_mut_slice();
        wire::way_header(pack, self.checked.is_some(), line, n, block_off);
        // Zero the index padding so messages are deterministic.
        pack[layout.meta_at - 8..layout.meta_at].fill(0);
        let base = buf * self.way_bytes;
        let words = &self.valid[buf * self.words..(buf + 1) * self.words];
        let mut i = 0usize;
        for (wi, &word) in words.iter().enumerate().take(m.hi / 64 + 1).skip(m.lo / 64) {
            let mut bits = word;
            while bits != 0 {
                let idx = wi * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let ia = WAY_HEADER + 2 * i;
                pack[ia..ia + 2].copy_from_slice(&(idx as u16).to_le_bytes());
                if let Some((sender, dest)) = self.checked {
                    let ma = layout.meta_at + META_BYTES * i;
                    pack[ma..ma + 4].copy_from_slice(&sender.to_le_bytes());
                    pack[ma + 4..ma + 8].copy_from_slice(&dest.to_le_bytes());
                    let off = block_off + (idx * line) as u64;
                    pack[ma + 8..ma + 16].copy_from_slice(&off.to_le_bytes());
                }
                let da = layout.data_at + i * line;
                // SAFETY: line `idx` of buffer `buf` lies inside the storage (see
                // `insert`); the message buffer is separate memory of `max_msg` bytes,
                // which `layout.total` does not exceed.
                unsafe {
                    copy_line(
                        pack[da..da + line].as_mut_ptr(),
                        storage.add(base + idx * line),
                        line,
                    )
                };
                i += 1;
            }
        }
        debug_assert_eq!(i, n, "valid bits and count agree");
        layout.total
    }
}
