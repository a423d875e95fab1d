//! Reading, verifying and recovering container files.
//!
//! [`ContainerReader::open`] trusts the index only when the trailer, the index checksum and
//! every entry's bounds check out; otherwise it scans the blocks from the start, keeping
//! each one whose header and payload checksums are good, and skipping damaged regions
//! (after a damaged header it looks for the next block header at every alignment step).
//!
//! **Bounded, linear reading.** Whatever the bytes say, reading costs about one
//! sequential pass over the file and a bounded amount of memory beyond what a valid index
//! needs (a [`IndexEntry`] per block): a scan reads the file through one [`CHUNK`]-sized
//! window, so a header, a payload and the slots searched for the next block magic are
//! each read once (a file with a block magic in every 64-byte slot re-read 1 MiB per slot
//! before: 58 s for 64 MiB); a candidate header's checksum is checked before its payload
//! is read, payloads are checksummed in chunks, and the index is checked against the file
//! size, its checksum computed in chunks, and its entries decoded in chunks before any
//! memory is set aside for it (a trailer claiming a 3 GiB index cost 3.15 GB resident
//! before).
//!
//! **Exact, atomic recovery.** [`recover`] holds the file's lock, builds the new index
//! aside, claims its room (`fallocate`), writes it at the aligned end of the last good
//! block, syncs, and only then cuts the file to end with the trailer; a failure on the
//! way puts back every byte it overwrote and the old size (see [`recover`]).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::format::{
    block_extent, decode_index_entry, decode_index_header, encode_index, round_up, BlockHeader,
    BlockKind, FileHeader, IndexEntry, Trailer, BLOCK_MAGIC, HEADER_BYTES, INDEX_ENTRY_BYTES,
    INDEX_HEADER_BYTES, TRAILER_CLEAN,
};
use super::lock::{self, LockHolder};
use super::writer::pwritev_all;
use crate::error::{MergeError, Result};

/// Bytes read at once while scanning, checksumming payloads or the index: the bound on a
/// reader's buffers.
const CHUNK: usize = 1 << 20;

/// Where the bytes come from: a file, or memory (tests, the fuzz target).
pub(super) trait Source: Send + Sync {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` from `at`, or fails.
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()>;
    /// The first offset at or after `at` that may hold data other than zeros: `at`
    /// unless `at` is in a hole of a sparse file (where no block can start); `None` when
    /// only holes follow.
    fn data_from(&self, at: u64) -> Option<u64> {
        Some(at)
    }
}

impl Source for File {
    fn size(&self) -> u64 {
        self.metadata().map_or(0, |m| m.len())
    }
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        self.read_exact_at(buf, at)
    }
    fn data_from(&self, at: u64) -> Option<u64> {
        let Ok(off) = libc::off_t::try_from(at) else {
            return Some(at);
        };
        // SAFETY: a plain system call on our own descriptor; `pread` does not use the
        // file offset it moves.
        let r = unsafe { libc::lseek(self.as_raw_fd(), off, libc::SEEK_DATA) };
        if r >= 0 {
            return Some(r as u64);
        }
        // ENXIO: no data past `at`; anything else (no SEEK_DATA here): read it all.
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::ENXIO) => None,
            _ => Some(at),
        }
    }
}

pub(super) struct Bytes(pub(super) Vec<u8>);

impl Source for Bytes {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        let start = usize::try_from(at).unwrap_or(usize::MAX);
        match start
            .checked_add(buf.len())
            .and_then(|end| self.0.get(start..end))
        {
            Some(src) => {
                buf.copy_from_slice(src);
                Ok(())
            }
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end",
            )),
        }
    }
}

/// A damaged byte range found by a scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// First byte of the range.
    pub offset: u64,
    /// Length of the range.
    pub len: u64,
    /// What is wrong there.
    pub reason: String,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:#x}..{:#x} ({} bytes): {}",
            self.offset,
            self.offset + self.len,
            self.len,
            self.reason
        )
    }
}

/// How the reader found the blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// From the index (the file was closed, or recovered).
    Indexed {
        /// Set by a normal close, clear after `recover`.
        clean: bool,
        /// End of the data area (the index offset).
        data_end: u64,
    },
    /// By scanning: the index is missing or unusable.
    Scanned {
        /// Why the index was not used.
        why: String,
        /// End of the last good block.
        data_end: u64,
        /// Damaged ranges, including an incomplete last block.
        damage: Vec<Damage>,
    },
}

/// Blocks and bytes of one producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ProducerStats {
    /// Number of blocks.
    pub blocks: u64,
    /// Payload bytes.
    pub bytes: u64,
    /// Lowest sequence number.
    pub first_seq: u64,
    /// Highest sequence number.
    pub last_seq: u64,
}

/// An open container file (or in-memory image).
pub struct ContainerReader {
    src: Box<dyn Source>,
    path: PathBuf,
    header: FileHeader,
    size: u64,
    blocks: Vec<IndexEntry>,
    /// Holes met by the opening scan (none when the index was used).
    holes: Vec<Hole>,
    layout: Layout,
    /// The writer holding the file's lock when it was opened.
    writer: Option<LockHolder>,
}

/// Space the merger reserved for a producer that did not fill it (a block of kind
/// [`BlockKind::Hole`]): not data, not damage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hole {
    /// File offset of the hole's header.
    pub offset: u64,
    /// Bytes it spans, header included.
    pub len: u64,
}

impl std::fmt::Debug for ContainerReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerReader")
            .field("path", &self.path)
            .field("blocks", &self.blocks.len())
            .field("layout", &self.layout)
            .finish()
    }
}

/// The outcome of [`ContainerReader::verify`].
#[derive(Clone, Debug, Default)]
pub struct Verification {
    /// Good blocks found.
    pub blocks: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Per producer.
    pub producers: BTreeMap<u32, ProducerStats>,
    /// Whether a valid index and trailer were found.
    pub indexed: bool,
    /// Holes: space reserved for producers that did not fill it (a producer that died
    /// mid-block leaves one). Not damage: the file can be whole with holes.
    pub holes: Vec<Hole>,
    /// Everything that keeps the file from being whole, one line each.
    pub problems: Vec<String>,
    /// The process writing the file when it was opened (it holds the file's lock): an
    /// unclosed file is then a file in progress, not a crashed one.
    pub writer: Option<LockHolder>,
}

impl Verification {
    /// True when the file is closed, every checksum matches, the index agrees with the
    /// blocks, and every producer's sequence numbers run 0, 1, 2, ... without gaps.
    pub fn is_whole(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The outcome of [`recover`].
#[derive(Clone, Debug, Default)]
pub struct Recovery {
    /// True if the file was already whole and left untouched.
    pub already_whole: bool,
    /// Blocks in the rewritten index.
    pub blocks: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Bytes cut off the end (an incomplete last block, an old index).
    pub truncated_bytes: u64,
    /// Damaged ranges found (left in place when followed by good blocks).
    pub damage: Vec<Damage>,
}

impl ContainerReader {
    /// Opens a container file; uses its index or scans it (see module docs).
    pub fn open(path: impl AsRef<Path>) -> Result<ContainerReader> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| MergeError::file("opening", &path, e))?;
        let writer = lock::writer_of(&file);
        let mut r = ContainerReader::from_source(Box::new(file), path)?;
        r.writer = writer;
        Ok(r)
    }

    /// Reads a container image held in memory (tests, the fuzz target).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<ContainerReader> {
        ContainerReader::from_source(Box::new(Bytes(bytes)), PathBuf::from("<memory>"))
    }

    pub(super) fn from_source(src: Box<dyn Source>, path: PathBuf) -> Result<ContainerReader> {
        let size = src.size();
        let mut hb = [0u8; HEADER_BYTES];
        if size < HEADER_BYTES as u64 {
            return Err(MergeError::format(
                &path,
                format!("file of {size} bytes is shorter than the {HEADER_BYTES}-byte header"),
            ));
        }
        src.read_at(&mut hb, 0)
            .map_err(|e| MergeError::file("reading the header of", &path, e))?;
        let header = FileHeader::decode(&hb).map_err(|r| MergeError::format(&path, r))?;
        let mut r = ContainerReader {
            src,
            path,
            header,
            size,
            blocks: Vec::new(),
            holes: Vec::new(),
            layout: Layout::Indexed {
                clean: false,
                data_end: 0,
            },
            writer: None,
        };
        match r.read_index() {
            Ok((blocks, trailer)) => {
                r.blocks = blocks;
                r.layout = Layout::Indexed {
                    clean: trailer.flags & TRAILER_CLEAN != 0,
                    data_end: trailer.index_offset,
                };
            }
            Err(why) => {
                let scan = r.scan(r.size)?;
                r.blocks = scan.blocks;
                r.holes = scan.holes;
                r.layout = Layout::Scanned {
                    why,
                    data_end: scan.data_end,
                    damage: scan.damage,
                };
            }
        }
        Ok(r)
    }

    /// The trailer and index, if both are present and consistent. Allocates nothing the
    /// trailer claims before the claim is checked against the file's size and the index's
    /// checksum; then only the entries that decode.
    fn read_index(&self) -> std::result::Result<(Vec<IndexEntry>, Trailer), String> {
        let first = self.header.first_block();
        let align = u64::from(self.header.align);
        let t = HEADER_BYTES as u64;
        if self.size < first + t {
            return Err("the file ends before a trailer could follow the header".into());
        }
        let mut tb = [0u8; HEADER_BYTES];
        self.src
            .read_at(&mut tb, self.size - t)
            .map_err(|e| format!("reading the trailer: {e}"))?;
        let trailer = Trailer::decode(&tb)?;
        let (at, len) = (trailer.index_offset, trailer.index_len);
        let consistent = at >= first
            && at % align == 0
            && at.checked_add(len).and_then(|x| x.checked_add(t)) == Some(self.size);
        if !consistent {
            return Err(format!(
                "trailer places a {len}-byte index at {at:#x}, which does not end where the file does"
            ));
        }
        let entries = len.checked_sub(INDEX_HEADER_BYTES as u64);
        let count = entries.map(|n| n / INDEX_ENTRY_BYTES as u64);
        // Each block takes at least `align` bytes of the data area.
        let room = (at - first) / align;
        if entries.is_none_or(|n| n % INDEX_ENTRY_BYTES as u64 != 0)
            || count != Some(trailer.blocks)
            || trailer.blocks > room
        {
            return Err(format!(
                "trailer places a {len}-byte index of {} entries at {at:#x}, which its \
                 {}-byte data area cannot hold",
                trailer.blocks,
                at - first
            ));
        }
        let mut buf = vec![0u8; (len as usize).min(CHUNK)];
        let mut crc = crate::checksum::Crc32c::new();
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(CHUNK as u64) as usize;
            self.src
                .read_at(&mut buf[..n], at + done)
                .map_err(|e| format!("reading the index: {e}"))?;
            crc.update(&buf[..n]);
            done += n as u64;
        }
        if crc.finish() != trailer.index_crc {
            return Err("index checksum mismatch".into());
        }
        self.src
            .read_at(&mut buf[..INDEX_HEADER_BYTES], at)
            .map_err(|e| format!("reading the index: {e}"))?;
        let listed = decode_index_header(&buf[..INDEX_HEADER_BYTES])?;
        if listed != trailer.blocks {
            return Err(format!(
                "index holds {listed} entries, the trailer says {}",
                trailer.blocks
            ));
        }
        let mut out = Vec::new();
        let per_read = (CHUNK / INDEX_ENTRY_BYTES) as u64;
        let mut i = 0u64;
        let mut at_least = first;
        while i < listed {
            let n = (listed - i).min(per_read);
            let bytes = &mut buf[..n as usize * INDEX_ENTRY_BYTES];
            self.src
                .read_at(
                    bytes,
                    at + INDEX_HEADER_BYTES as u64 + i * INDEX_ENTRY_BYTES as u64,
                )
                .map_err(|e| format!("reading the index: {e}"))?;
            for r in bytes.chunks_exact(INDEX_ENTRY_BYTES) {
                let e = decode_index_entry(r, i, self.header.align, at_least, at)?;
                at_least = e.end(self.header.align);
                out.push(e);
                i += 1;
            }
        }
        Ok((out, trailer))
    }

    /// Scans blocks in `first_block..limit`, checking header and payload checksums.
    fn scan(&self, limit: u64) -> Result<Scan> {
        let align = u64::from(self.header.align);
        let h = HEADER_BYTES as u64;
        let mut out = Scan {
            blocks: Vec::new(),
            holes: Vec::new(),
            damage: Vec::new(),
            data_end: self.header.first_block(),
        };
        let mut off = self.header.first_block();
        // Start and first reason of a damaged range being crossed.
        let mut bad: Option<(u64, String)> = None;
        // Blocks found, by producer and sequence number: one found again, the same in
        // length, kind and checksum, is the copy a writer compacting the file had not
        // yet turned into a hole when it stopped (`docs/FORMAT.md`, "Size").
        let mut found: std::collections::HashMap<(u32, u64), (u64, u32, BlockKind)> =
            Default::default();
        let mut w = Window {
            src: &*self.src,
            path: &self.path,
            buf: Vec::new(),
            start: 0,
            limit,
        };
        while off + h <= limit {
            let hb = w.get(off, HEADER_BYTES)?;
            // Checked cheaply first: inside a damaged range most candidates fail here,
            // and their reason is not needed.
            if bad.is_some() && !BlockHeader::checksum_ok(hb) {
                off = w.next_sealed(off + align, align)?;
                continue;
            }
            let reason = match BlockHeader::decode(hb) {
                Ok(bh) => {
                    let (payload, end) = block_extent(off, bh.len, self.header.align);
                    if payload + bh.len > limit {
                        format!(
                            "incomplete block: producer {} seq {} declares {} payload bytes, \
                             the file has {}",
                            bh.producer,
                            bh.seq,
                            bh.len,
                            limit.saturating_sub(payload)
                        )
                    } else if bh.kind.is_space() {
                        // Reserved space a producer did not fill: skipped, its bytes unread.
                        close_bad(&mut out.damage, &mut bad, off);
                        out.holes.push(Hole {
                            offset: off,
                            len: end - off,
                        });
                        off = end;
                        out.data_end = end.min(limit);
                        continue;
                    } else if w.payload_crc(payload, bh.len)? != bh.payload_crc {
                        // The header is intact, so its length is right: skip the block.
                        close_bad(&mut out.damage, &mut bad, off);
                        out.damage.push(Damage {
                            offset: off,
                            len: end.min(limit) - off,
                            reason: format!(
                                "payload checksum mismatch in block {} of producer {}",
                                bh.seq, bh.producer
                            ),
                        });
                        off = end.min(limit);
                        continue;
                    } else {
                        close_bad(&mut out.damage, &mut bad, off);
                        let (key, id) = ((bh.producer, bh.seq), (bh.len, bh.payload_crc, bh.kind));
                        if found.get(&key) == Some(&id) {
                            // The same block again: a copy, not a block.
                            out.holes.push(Hole {
                                offset: off,
                                len: end - off,
                            });
                        } else {
                            found.entry(key).or_insert(id);
                            out.blocks.push(IndexEntry {
                                header: bh,
                                offset: off,
                            });
                        }
                        off = end;
                        out.data_end = end.min(limit);
                        continue;
                    }
                }
                Err(r) => r,
            };
            if bad.is_none() {
                bad = Some((off, reason));
            }
            off = w.next_candidate(off + align, align)?;
        }
        if off < limit && bad.is_none() {
            bad = Some((off, "too short for a block header".into()));
        }
        close_bad(&mut out.damage, &mut bad, limit);
        Ok(out)
    }

    /// The file (or `<memory>`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file header.
    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// Size of the file in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The good blocks, in file order.
    pub fn blocks(&self) -> &[IndexEntry] {
        &self.blocks
    }

    /// Holes found by the opening scan (empty when the index was used: see
    /// [`Verification::holes`]).
    pub fn holes(&self) -> &[Hole] {
        &self.holes
    }

    /// How the blocks were found.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Blocks and bytes per producer.
    pub fn producers(&self) -> BTreeMap<u32, ProducerStats> {
        producer_stats(&self.blocks)
    }

    /// Reads a block's payload into `buf` (replacing its contents) and checks its checksum.
    pub fn read_payload_into(&self, block: &IndexEntry, buf: &mut Vec<u8>) -> Result<()> {
        let len = usize::try_from(block.header.len).map_err(|_| {
            MergeError::format(&self.path, "block too large for this machine's memory")
        })?;
        buf.clear();
        buf.resize(len, 0);
        let at = block.payload_offset(self.header.align);
        self.src
            .read_at(buf, at)
            .map_err(|e| MergeError::file(format!("reading block at {at:#x} of"), &self.path, e))?;
        if crate::checksum::crc32c(buf) != block.header.payload_crc {
            return Err(MergeError::format(
                &self.path,
                format!(
                    "payload checksum mismatch in block {} of producer {} at {:#x}",
                    block.header.seq, block.header.producer, block.offset
                ),
            ));
        }
        Ok(())
    }

    /// Reads a block's payload, checking its checksum.
    pub fn read_payload(&self, block: &IndexEntry) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        self.read_payload_into(block, &mut v)?;
        Ok(v)
    }

    /// Checks every checksum, the index against the blocks actually present, and every
    /// producer's sequence numbers. Reads the whole file.
    pub fn verify(&self) -> Result<Verification> {
        let mut v = Verification {
            writer: self.writer,
            ..Default::default()
        };
        let (limit, indexed) = match &self.layout {
            Layout::Indexed { data_end, .. } => (*data_end, true),
            Layout::Scanned { why, .. } => {
                v.problems.push(match self.writer {
                    Some(w) => format!(
                        "no index yet ({why}): the file is being written by {w}, which holds \
                         its lock; it gets its index when that writer closes it"
                    ),
                    None => format!(
                        "no usable index ({why}): the file was not closed; `accio recover` \
                         rewrites it with one"
                    ),
                });
                (self.size, false)
            }
        };
        v.indexed = indexed;
        let scan = match self.opening_scan() {
            Some(scan) => scan,
            None => self.scan(limit)?,
        };
        for d in &scan.damage {
            v.problems.push(format!("damaged bytes at {d}"));
        }
        if indexed && scan.blocks != self.blocks {
            let listed: std::collections::BTreeSet<_> =
                self.blocks.iter().map(|e| (e.offset, e.header)).collect();
            let found: std::collections::BTreeSet<_> =
                scan.blocks.iter().map(|e| (e.offset, e.header)).collect();
            let missing = listed.difference(&found).count();
            let extra = found.difference(&listed).count();
            v.problems.push(format!(
                "the index lists {} blocks, the file holds {} good ones: {missing} listed but \
                 missing or damaged, {extra} present but not listed",
                self.blocks.len(),
                scan.blocks.len()
            ));
        }
        v.holes = scan.holes.clone();
        v.blocks = scan.blocks.len() as u64;
        v.bytes = scan.blocks.iter().map(|e| e.header.len).sum();
        v.producers = producer_stats(&scan.blocks);
        v.problems.extend(sequence_problems(&scan.blocks));
        Ok(v)
    }
}

impl ContainerReader {
    /// The process writing the file when it was opened (it holds the file's lock), if
    /// any: an unclosed file is then in progress, not crashed.
    pub fn writer(&self) -> Option<LockHolder> {
        self.writer
    }

    /// What the opening scan found, when `open` scanned the whole file (no usable index).
    fn opening_scan(&self) -> Option<Scan> {
        match &self.layout {
            Layout::Scanned {
                damage, data_end, ..
            } => Some(Scan {
                blocks: self.blocks.clone(),
                holes: self.holes.clone(),
                damage: damage.clone(),
                data_end: *data_end,
            }),
            Layout::Indexed { .. } => None,
        }
    }
}

/// The first slot of `s` (offsets `0, step, 2 step, ...` whose 64-byte header fits in
/// `s`) holding a sealed block header, a magic and a good header checksum: `Ok(offset)`;
/// else `Err(offset of the first slot not examined)`. Candidates are checked four at a
/// time where the CPU has the `crc32` instruction: four independent chains of eight
/// instructions overlap, so four headers cost little more than one (about 7 ns).
pub(super) fn first_sealed_header(s: &[u8], step: usize) -> std::result::Result<usize, usize> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2, checked just above.
        return unsafe { first_sealed_header_sse42(s, step) };
    }
    first_sealed_header_portable(s, step)
}

/// [`first_sealed_header`] one slot at a time, on any CPU.
pub(super) fn first_sealed_header_portable(
    s: &[u8],
    step: usize,
) -> std::result::Result<usize, usize> {
    let mut i = 0;
    while i + HEADER_BYTES <= s.len() {
        if BlockHeader::checksum_ok(&s[i..i + HEADER_BYTES]) {
            return Ok(i);
        }
        i += step;
    }
    Err(i)
}

/// [`first_sealed_header`] with the `crc32` instruction, the whole search in one function
/// so that the checksums inline into the loop.
///
/// # Safety
/// The CPU must have SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn first_sealed_header_sse42(s: &[u8], step: usize) -> std::result::Result<usize, usize> {
    use std::arch::x86_64::{_mm_crc32_u32, _mm_crc32_u64};
    let magic = u64::from_le_bytes(BLOCK_MAGIC);
    let p = s.as_ptr();
    // Slots at `i < end` hold a whole header: `i + 64 <= s.len()`.
    let end = s.len().saturating_sub(HEADER_BYTES - 1);
    // SAFETY: callers pass offsets `a` of slots below `end` and `a + 8 <= a + 64`, inside
    // `s`; unaligned reads of plain bytes.
    let u64_at = |a: usize| u64::from_le(unsafe { (p.add(a) as *const u64).read_unaligned() });
    // SAFETY: as above, `a + 4 <= a + 64`.
    let u32_at = |a: usize| u32::from_le(unsafe { (p.add(a) as *const u32).read_unaligned() });
    let mut i = 0;
    loop {
        let (mut lanes, mut n) = ([0usize; 4], 0);
        while i < end && n < 4 {
            if u64_at(i) == magic {
                lanes[n] = i;
                n += 1;
            }
            i += step;
        }
        if n == 0 {
            return Err(i);
        }
        // Short of four: the first candidate fills the empty lanes.
        for k in n..4 {
            lanes[k] = lanes[0];
        }
        // The instruction updates a reflected CRC-32C without the standard's inversions:
        // start from all ones, invert at the end. The checksum covers bytes 0..60.
        let mut c = [u64::from(u32::MAX); 4];
        for w in 0..7 {
            for (crc, a) in c.iter_mut().zip(lanes) {
                *crc = _mm_crc32_u64(*crc, u64_at(a + w * 8));
            }
        }
        for (k, (crc, a)) in c.into_iter().zip(lanes).enumerate().take(n) {
            if !_mm_crc32_u32(crc as u32, u32_at(a + 56)) == u32_at(a + 60) {
                return Ok(lanes[k]);
            }
        }
    }
}

struct Scan {
    blocks: Vec<IndexEntry>,
    holes: Vec<Hole>,
    damage: Vec<Damage>,
    data_end: u64,
}

/// The file seen through one buffer of up to [`CHUNK`] bytes, refilled from wherever the
/// scan asks next: each byte of the file is read about once per scan.
struct Window<'a> {
    src: &'a dyn Source,
    path: &'a Path,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    start: u64,
    /// End of what the scan reads.
    limit: u64,
}

impl Window<'_> {
    /// Bytes from `at` (`at < limit`), at most `max` of them and at least
    /// `min(need, limit - at)` (`need <= CHUNK`): from the buffer when it holds `need`
    /// bytes at `at`, or else from a read of up to [`CHUNK`] bytes at `at`.
    fn some(&mut self, at: u64, need: usize, max: usize) -> Result<&[u8]> {
        let end = self.start + self.buf.len() as u64;
        let need_end = at.saturating_add(need as u64).min(self.limit);
        if at < self.start || need_end > end {
            let n = (self.limit - at).min(CHUNK as u64) as usize;
            self.buf.resize(n, 0);
            self.src
                .read_at(&mut self.buf, at)
                .map_err(|e| MergeError::file(format!("reading {at:#x}+{n} of"), self.path, e))?;
            self.start = at;
        }
        let from = (at - self.start) as usize;
        let to = self.buf.len().min(from.saturating_add(max));
        Ok(&self.buf[from..to])
    }

    /// Exactly the `n` bytes at `at` (`at + n <= limit`, `n <= CHUNK`).
    fn get(&mut self, at: u64, n: usize) -> Result<&[u8]> {
        self.some(at, n, n)
    }

    /// The first slot at or after `from` (a multiple of `align` from it) that holds a
    /// sealed block header: a magic and a good header checksum, found four candidates at a
    /// time ([`first_sealed_header`]); `limit` if there is none. Inside a
    /// damaged range, where a crafted file may put a magic in every slot, this keeps the
    /// scan close to the speed of reading the file.
    fn next_sealed(&mut self, from: u64, align: u64) -> Result<u64> {
        let h = HEADER_BYTES as u64;
        let step = align as usize;
        let mut at = from;
        loop {
            // Holes of sparse files are stepped over there; then the whole buffer from
            // the first candidate on is searched here.
            at = self.next_candidate(at, align)?;
            if at.saturating_add(h) > self.limit {
                return Ok(at);
            }
            let s = self.some(at, HEADER_BYTES, CHUNK)?;
            match first_sealed_header(s, step) {
                Ok(i) => return Ok(at + i as u64),
                Err(i) => at += i as u64,
            }
        }
    }

    /// The first slot (a multiple of `align` from `from`) at or after `from` where a block
    /// magic starts and a header fits before `limit`; `limit` if there is none. Holes of a
    /// sparse file (zeros, no magic) are stepped over unread.
    fn next_candidate(&mut self, from: u64, align: u64) -> Result<u64> {
        let h = HEADER_BYTES as u64;
        let mut at = from;
        while at.saturating_add(h) <= self.limit {
            let end = self.start + self.buf.len() as u64;
            if at < self.start || at >= end {
                // Slots are aligned from an aligned start: the first after a hole is the
                // first aligned offset at or after its end.
                match self.src.data_from(at) {
                    Some(data) if data > at => {
                        at = round_up(data, align);
                        continue;
                    }
                    Some(_) => {}
                    None => break,
                }
            }
            let room = (self.limit - at - h) as usize; // slots start at `at + 0..=room`
            let s = self.some(
                at,
                BLOCK_MAGIC.len(),
                room.saturating_add(BLOCK_MAGIC.len()),
            )?;
            let mut i = 0usize;
            while i + BLOCK_MAGIC.len() <= s.len() {
                if s[i..i + BLOCK_MAGIC.len()] == BLOCK_MAGIC {
                    return Ok(at + i as u64);
                }
                i += align as usize;
            }
            at += i as u64;
        }
        Ok(self.limit)
    }

    /// CRC32C of the `len` bytes at `at` (inside `limit`), read in chunks.
    fn payload_crc(&mut self, at: u64, len: u64) -> Result<u32> {
        let mut crc = crate::checksum::Crc32c::new();
        let mut done = 0u64;
        while done < len {
            let want = (len - done).min(CHUNK as u64) as usize;
            let s = self.some(at + done, 1, want)?;
            crc.update(s);
            done += s.len() as u64;
        }
        Ok(crc.finish())
    }
}

fn close_bad(damage: &mut Vec<Damage>, bad: &mut Option<(u64, String)>, end: u64) {
    if let Some((start, reason)) = bad.take() {
        if end > start {
            damage.push(Damage {
                offset: start,
                len: end - start,
                reason,
            });
        }
    }
}

fn producer_stats(blocks: &[IndexEntry]) -> BTreeMap<u32, ProducerStats> {
    let mut m: BTreeMap<u32, ProducerStats> = BTreeMap::new();
    for b in blocks {
        let s = m.entry(b.header.producer).or_insert(ProducerStats {
            first_seq: u64::MAX,
            ..Default::default()
        });
        s.blocks += 1;
        s.bytes += b.header.len;
        s.first_seq = s.first_seq.min(b.header.seq);
        s.last_seq = s.last_seq.max(b.header.seq);
    }
    m
}

/// Every producer's sequence numbers must be 0, 1, 2, ... each once.
fn sequence_problems(blocks: &[IndexEntry]) -> Vec<String> {
    let mut seqs: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for b in blocks {
        seqs.entry(b.header.producer)
            .or_default()
            .push(b.header.seq);
    }
    let mut out = Vec::new();
    for (p, mut s) in seqs {
        s.sort_unstable();
        let mut expect = 0u64;
        let mut missing = 0u64;
        let mut first_gap = None;
        let mut dups = 0u64;
        for (i, &x) in s.iter().enumerate() {
            if i > 0 && x == s[i - 1] {
                dups += 1;
                continue;
            }
            if x != expect {
                first_gap.get_or_insert(expect);
                missing += x.saturating_sub(expect);
            }
            expect = x.saturating_add(1);
        }
        if let Some(g) = first_gap {
            out.push(format!(
                "producer {p}: {missing} block(s) missing from its sequence, the first is {g}"
            ));
        }
        if dups > 0 {
            out.push(format!(
                "producer {p}: {dups} sequence number(s) appear more than once"
            ));
        }
    }
    out
}

/// Rewrites a crashed (or damaged) container in place with an index of its good blocks,
/// exactly and atomically: either the file ends up whole to [`ContainerReader::verify`]
/// with every block that was whole (unless damage is left inside it: blocks whose
/// header is good but whose payload is not, or a producer's sequence with a gap, both
/// listed), or the call fails and the file is left byte for byte as it was. A file that
/// is already whole is left untouched.
///
/// Holds the file's lock throughout: a file being written (another process holds its
/// lock) is refused with [`MergeError::Locked`] before anything is read.
///
/// The index goes at the end of the last good block (aligned: a cut inside a block's
/// padding leaves the data end short of it), after the old bytes it will cover, and the
/// room for the index and any hole header are saved aside and claimed first
/// (`fallocate`, so a full file system fails there); the file is cut to end with the
/// trailer only once the index is written and synced. On a failure the saved bytes and
/// the old size are put back. (The one failure that cannot be undone is the last sync,
/// after the cut: it is reported as such.)
pub fn recover(path: impl AsRef<Path>) -> Result<Recovery> {
    let path = path.as_ref();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| MergeError::file("opening for recovery", path, e))?;
    lock::lock_exclusive(&file, path, "recover")?;
    // Read through the same open file description, which holds the lock.
    let src = file
        .try_clone()
        .map_err(|e| MergeError::file("opening for recovery", path, e))?;
    let reader = ContainerReader::from_source(Box::new(src), path.to_path_buf())?;
    recover_into(&reader, &mut FileTarget(&file))
}

/// [`recover`] of a container image held in memory (tests, the fuzz target): `image`
/// is rewritten as the file would be, or left as it was when this fails.
pub fn recover_image(image: &mut Vec<u8>) -> Result<Recovery> {
    let reader = ContainerReader::from_bytes(image.clone())?;
    recover_into(&reader, &mut MemoryTarget(image))
}

/// Where [`recover`] writes: the locked file, or an image in memory.
pub(super) trait Target {
    /// Writes all of `buf` at `at`.
    fn write_at(&mut self, buf: &[u8], at: u64) -> io::Result<()>;
    /// Allocates `at..at + len`, extending the size when it ends past it, so that writes
    /// there cannot fail for want of space; succeeds doing nothing where the file system
    /// cannot allocate ahead.
    fn allocate(&mut self, at: u64, len: u64) -> io::Result<()>;
    /// Sets the size.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// Flushes data and size to stable storage.
    fn sync(&mut self) -> io::Result<()>;
}

struct FileTarget<'a>(&'a File);

impl Target for FileTarget<'_> {
    fn write_at(&mut self, buf: &[u8], at: u64) -> io::Result<()> {
        pwritev_all(self.0, &[buf], at)
    }
    fn allocate(&mut self, at: u64, len: u64) -> io::Result<()> {
        let (Ok(off), Ok(n)) = (libc::off_t::try_from(at), libc::off_t::try_from(len)) else {
            return Err(io::Error::other("file range beyond off_t"));
        };
        loop {
            // SAFETY: a plain system call on our own descriptor; it only allocates.
            if unsafe { libc::fallocate(self.0.as_raw_fd(), 0, off, n) } == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // The writes will tell.
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => return Ok(()),
                _ => return Err(e),
            }
        }
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_all()
    }
}

pub(super) struct MemoryTarget<'a>(pub(super) &'a mut Vec<u8>);

impl MemoryTarget<'_> {
    fn range(&mut self, at: u64, len: usize) -> io::Result<&mut [u8]> {
        let start = usize::try_from(at).map_err(io::Error::other)?;
        let end = start
            .checked_add(len)
            .ok_or_else(|| io::Error::other("range beyond memory"))?;
        if end > self.0.len() {
            self.0.resize(end, 0);
        }
        Ok(&mut self.0[start..end])
    }
}

impl Target for MemoryTarget<'_> {
    fn write_at(&mut self, buf: &[u8], at: u64) -> io::Result<()> {
        self.range(at, buf.len())?.copy_from_slice(buf);
        Ok(())
    }
    fn allocate(&mut self, at: u64, len: u64) -> io::Result<()> {
        let len = usize::try_from(len).map_err(io::Error::other)?;
        self.range(at, len).map(|_| ())
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0
            .resize(usize::try_from(len).map_err(io::Error::other)?, 0);
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The body of [`recover`]: reads through `reader`, writes through `dst` (the same file).
pub(super) fn recover_into(reader: &ContainerReader, dst: &mut dyn Target) -> Result<Recovery> {
    let path = reader.path();
    if matches!(reader.layout, Layout::Indexed { .. }) && reader.verify()?.is_whole() {
        return Ok(Recovery {
            already_whole: true,
            blocks: reader.blocks.len() as u64,
            bytes: reader.blocks.iter().map(|b| b.header.len).sum(),
            ..Default::default()
        });
    }
    // The whole file: an old index, if any, is not trusted.
    let scan = match reader.opening_scan() {
        Some(scan) => scan,
        None => reader.scan(reader.size)?,
    };
    let align = reader.header.align;
    // A cut inside the last block's padding leaves the scan's end short of the block's:
    // the index goes where the reader looks for it, at the next aligned offset.
    let data_end = round_up(scan.data_end, u64::from(align));
    let mut writes: Vec<(u64, Vec<u8>)> = Vec::new();
    // Damaged ranges between good blocks become holes, so the recovered file reads
    // cleanly; they stay listed in the returned `damage`. A block whose header is intact
    // but whose payload is not keeps its header: it stays visible as damage to `verify`.
    // (A merger killed while producers wrote in place leaves such ranges: rooms reserved,
    // never committed.)
    for d in scan
        .damage
        .iter()
        .filter(|d| d.offset + d.len <= scan.data_end)
    {
        let mut hb = [0u8; HEADER_BYTES];
        reader
            .src
            .read_at(&mut hb, d.offset)
            .map_err(|e| MergeError::file("reading", path, e))?;
        let (payload, _) = block_extent(d.offset, 0, align);
        // A header whose block is exactly the damaged range (its payload failed its
        // checksum) is kept. One that claims more (a block cut short by the end of the
        // file, whose declared length the recovered file may now hold) would swallow the
        // good blocks after it when the file is read again: it becomes a hole too.
        let keeps_its_extent = BlockHeader::decode(&hb)
            .is_ok_and(|bh| block_extent(d.offset, bh.len, align).1 == d.offset + d.len);
        if keeps_its_extent
            || !d.offset.is_multiple_of(u64::from(align))
            || d.offset + d.len < payload
        {
            continue;
        }
        let hole = BlockHeader {
            producer: u32::MAX,
            kind: BlockKind::Hole,
            seq: 0,
            len: d.offset + d.len - payload,
            payload_crc: 0,
        };
        writes.push((d.offset, hole.encode().to_vec()));
    }
    let mut tail = encode_index(&scan.blocks);
    let trailer = Trailer {
        index_offset: data_end,
        index_len: tail.len() as u64,
        blocks: scan.blocks.len() as u64,
        index_crc: crate::checksum::crc32c(&tail),
        flags: 0,
    };
    tail.extend_from_slice(&trailer.encode());
    let new_size = data_end + tail.len() as u64;
    writes.push((data_end, tail));
    // What the writes will cover of the file as it is, to put back on a failure.
    let old_size = reader.size;
    let mut saved = Vec::new();
    for (at, b) in writes.iter().filter(|(at, _)| *at < old_size) {
        let mut old = vec![0u8; (b.len() as u64).min(old_size - at) as usize];
        reader
            .src
            .read_at(&mut old, *at)
            .map_err(|e| MergeError::file("reading", path, e))?;
        saved.push((*at, old));
    }
    let done = (|| -> std::result::Result<(), (&'static str, io::Error)> {
        for (at, b) in &writes {
            dst.allocate(*at, b.len() as u64)
                .map_err(|e| ("claiming room for the index of", e))?;
        }
        for (at, b) in &writes {
            dst.write_at(b, *at)
                .map_err(|e| ("writing the index and trailer of", e))?;
        }
        // The index is down before the file is cut to end with it.
        dst.sync().map_err(|e| ("syncing", e))?;
        dst.set_len(new_size)
            .map_err(|e| ("cutting to its last good block", e))
    })();
    if let Err((step, e)) = done {
        let mut put_back = Ok(());
        for (at, old) in &saved {
            put_back = put_back.and(dst.write_at(old, *at));
        }
        put_back = put_back
            .and(dst.set_len(old_size))
            .and_then(|()| dst.sync());
        return Err(match put_back {
            Ok(()) => MergeError::file(
                format!("recovery changed nothing (the file is as it was): failed {step}"),
                path,
                e,
            ),
            Err(e2) => MergeError::file(
                format!("recovery failed {step} and putting the old bytes back failed too ({e2}):"),
                path,
                e,
            ),
        });
    }
    dst.sync().map_err(|e| {
        MergeError::file(
            "the index is written and the file cut to its last good block, but syncing failed:",
            path,
            e,
        )
    })?;
    Ok(Recovery {
        already_whole: false,
        blocks: scan.blocks.len() as u64,
        bytes: scan.blocks.iter().map(|b| b.header.len).sum(),
        truncated_bytes: old_size.saturating_sub(data_end),
        // Damage past the last good block was cut off; what remains is inside the file.
        damage: scan
            .damage
            .into_iter()
            .filter(|d| d.offset < scan.data_end)
            .collect(),
    })
}

/// Splits a [`super::BlockKind::Records`] payload into its records.
pub fn split_records(payload: &[u8]) -> std::result::Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < payload.len() {
        let Some(lb) = payload.get(at..at + 4) else {
            return Err(format!(
                "record length at byte {at} is cut off ({} bytes left)",
                payload.len() - at
            ));
        };
        let n = u32::from_le_bytes(lb.try_into().expect("4 bytes")) as usize;
        at += 4;
        let Some(r) = at.checked_add(n).and_then(|end| payload.get(at..end)) else {
            return Err(format!(
                "record at byte {} declares {n} bytes, only {} remain",
                at - 4,
                payload.len() - at
            ));
        };
        out.push(r);
        at += n;
    }
    Ok(out)
}
