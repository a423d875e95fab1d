//! Reading, verifying and recovering container files.
//!
//! [`ContainerReader::open`] trusts the index only when the trailer, the index checksum and
//! every entry's bounds check out; otherwise it scans the blocks from the start, keeping
//! each one whose header and payload checksums are good, and skipping damaged regions
//! (after a damaged header it looks for the next block header at every alignment step).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::format::{
    block_extent, decode_index, encode_index, BlockHeader, BlockKind, FileHeader, IndexEntry,
    Trailer, BLOCK_MAGIC, HEADER_BYTES, INDEX_ENTRY_BYTES, INDEX_HEADER_BYTES, TRAILER_CLEAN,
};
use super::writer::pwritev_all;
use crate::error::{MergeError, Result};

/// Bytes read at once while checksumming payloads or looking for the next header.
const CHUNK: usize = 1 << 20;

/// Where the bytes come from: a file, or memory (tests, the fuzz target).
trait Source: Send + Sync {
    fn size(&self) -> u64;
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()>;
}

impl Source for File {
    fn size(&self) -> u64 {
        self.metadata().map_or(0, |m| m.len())
    }
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        self.read_exact_at(buf, at)
    }
}

struct Bytes(Vec<u8>);

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
        ContainerReader::from_source(Box::new(file), path)
    }

    /// Reads a container image held in memory (tests, the fuzz target).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<ContainerReader> {
        ContainerReader::from_source(Box::new(Bytes(bytes)), PathBuf::from("<memory>"))
    }

    fn from_source(src: Box<dyn Source>, path: PathBuf) -> Result<ContainerReader> {
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

    /// The trailer and index, if both are present and consistent.
    fn read_index(&self) -> std::result::Result<(Vec<IndexEntry>, Trailer), String> {
        let first = self.header.first_block();
        let t = HEADER_BYTES as u64;
        if self.size < first + t {
            return Err("the file ends before a trailer could follow the header".into());
        }
        let mut tb = [0u8; HEADER_BYTES];
        self.src
            .read_at(&mut tb, self.size - t)
            .map_err(|e| format!("reading the trailer: {e}"))?;
        let trailer = Trailer::decode(&tb)?;
        let max_index = INDEX_HEADER_BYTES as u64
            + (self.size / HEADER_BYTES as u64) * INDEX_ENTRY_BYTES as u64;
        let consistent = trailer.index_offset >= first
            && trailer.index_offset % u64::from(self.header.align) == 0
            && trailer.index_len <= max_index
            && trailer
                .index_offset
                .checked_add(trailer.index_len)
                .and_then(|x| x.checked_add(t))
                == Some(self.size);
        if !consistent {
            return Err(format!(
                "trailer places a {}-byte index at {:#x}, which does not end where the file does",
                trailer.index_len, trailer.index_offset
            ));
        }
        let mut ib = vec![0u8; trailer.index_len as usize];
        self.src
            .read_at(&mut ib, trailer.index_offset)
            .map_err(|e| format!("reading the index: {e}"))?;
        if crate::checksum::crc32c(&ib) != trailer.index_crc {
            return Err("index checksum mismatch".into());
        }
        let entries = decode_index(&ib, self.header.align, first, trailer.index_offset)?;
        if entries.len() as u64 != trailer.blocks {
            return Err(format!(
                "index holds {} entries, the trailer says {}",
                entries.len(),
                trailer.blocks
            ));
        }
        Ok((entries, trailer))
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
        let mut buf = Vec::new();
        let io = |e| MergeError::file("reading", &self.path, e);
        while off + h <= limit {
            let mut hb = [0u8; HEADER_BYTES];
            self.src.read_at(&mut hb, off).map_err(io)?;
            let reason = match BlockHeader::decode(&hb) {
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
                    } else if self.payload_crc(payload, bh.len, &mut buf)? != bh.payload_crc {
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
                        out.blocks.push(IndexEntry {
                            header: bh,
                            offset: off,
                        });
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
            off = self.next_candidate(off + align, limit, &mut buf)?;
        }
        if off < limit && bad.is_none() {
            bad = Some((off, "too short for a block header".into()));
        }
        close_bad(&mut out.damage, &mut bad, limit);
        Ok(out)
    }

    /// The first aligned offset at or after `from` where a block magic starts (or `limit`).
    fn next_candidate(&self, from: u64, limit: u64, buf: &mut Vec<u8>) -> Result<u64> {
        let align = u64::from(self.header.align);
        let mut at = from;
        while at + HEADER_BYTES as u64 <= limit {
            let n = (limit - at).min(CHUNK as u64) as usize;
            buf.resize(n, 0);
            self.src
                .read_at(buf, at)
                .map_err(|e| MergeError::file("reading", &self.path, e))?;
            let mut i = 0usize;
            while i + BLOCK_MAGIC.len() <= n {
                if buf[i..i + BLOCK_MAGIC.len()] == BLOCK_MAGIC {
                    return Ok(at + i as u64);
                }
                i += align as usize;
            }
            at += i as u64;
        }
        Ok(limit)
    }

    fn payload_crc(&self, at: u64, len: u64, buf: &mut Vec<u8>) -> Result<u32> {
        let mut crc = crate::checksum::Crc32c::new();
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(CHUNK as u64) as usize;
            buf.resize(n, 0);
            self.src
                .read_at(buf, at + done)
                .map_err(|e| MergeError::file("reading", &self.path, e))?;
            crc.update(buf);
            done += n as u64;
        }
        Ok(crc.finish())
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
        let mut v = Verification::default();
        let (limit, indexed) = match &self.layout {
            Layout::Indexed { data_end, .. } => (*data_end, true),
            Layout::Scanned { why, .. } => {
                v.problems.push(format!(
                    "no usable index ({why}): the file was not closed; `accio recover` rewrites it with one"
                ));
                (self.size, false)
            }
        };
        v.indexed = indexed;
        let scan = if indexed {
            self.scan(limit)?
        } else {
            // `open` already scanned the whole file.
            match &self.layout {
                Layout::Scanned {
                    damage, data_end, ..
                } => Scan {
                    blocks: self.blocks.clone(),
                    holes: self.holes.clone(),
                    damage: damage.clone(),
                    data_end: *data_end,
                },
                Layout::Indexed { .. } => unreachable!("checked above"),
            }
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

struct Scan {
    blocks: Vec<IndexEntry>,
    holes: Vec<Hole>,
    damage: Vec<Damage>,
    data_end: u64,
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

/// Rewrites a crashed (or damaged) container in place: cuts everything after its last good
/// block, then appends an index of the good blocks and a trailer, and syncs. A file that
/// [`ContainerReader::verify`] finds whole is left untouched.
pub fn recover(path: impl AsRef<Path>) -> Result<Recovery> {
    let path = path.as_ref();
    let reader = ContainerReader::open(path)?;
    if matches!(reader.layout, Layout::Indexed { .. }) && reader.verify()?.is_whole() {
        return Ok(Recovery {
            already_whole: true,
            blocks: reader.blocks.len() as u64,
            bytes: reader.blocks.iter().map(|b| b.header.len).sum(),
            ..Default::default()
        });
    }
    // Rescan the whole file: an old index, if any, is not trusted.
    let scan = reader.scan(reader.size)?;
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| MergeError::file("opening for recovery", path, e))?;
    let data_end = scan.data_end;
    file.set_len(data_end)
        .map_err(|e| MergeError::file("truncating", path, e))?;
    // Damaged ranges between good blocks become holes, so the recovered file reads
    // cleanly; they stay listed in the returned `damage`. A block whose header is intact
    // but whose payload is not keeps its header: it stays visible as damage to `verify`.
    // (A merger killed while producers wrote in place leaves such ranges: rooms reserved,
    // never committed.)
    let align = u64::from(reader.header.align);
    for d in scan.damage.iter().filter(|d| d.offset + d.len <= data_end) {
        let mut hb = [0u8; HEADER_BYTES];
        reader
            .src
            .read_at(&mut hb, d.offset)
            .map_err(|e| MergeError::file("reading", path, e))?;
        let (payload, _) = block_extent(d.offset, 0, reader.header.align);
        if BlockHeader::decode(&hb).is_ok()
            || !d.offset.is_multiple_of(align)
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
        pwritev_all(&file, &[&hole.encode()], d.offset)
            .map_err(|e| MergeError::file("marking a hole in", path, e))?;
    }
    let index = encode_index(&scan.blocks);
    let trailer = Trailer {
        index_offset: data_end,
        index_len: index.len() as u64,
        blocks: scan.blocks.len() as u64,
        index_crc: crate::checksum::crc32c(&index),
        flags: 0,
    };
    pwritev_all(&file, &[&index, &trailer.encode()], data_end)
        .map_err(|e| MergeError::file("writing the index and trailer of", path, e))?;
    file.sync_all()
        .map_err(|e| MergeError::file("syncing", path, e))?;
    Ok(Recovery {
        already_whole: false,
        blocks: scan.blocks.len() as u64,
        bytes: scan.blocks.iter().map(|b| b.header.len).sum(),
        truncated_bytes: reader.size.saturating_sub(data_end),
        // Damage past the last good block was cut off; what remains is inside the file.
        damage: scan
            .damage
            .into_iter()
            .filter(|d| d.offset < data_end)
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
