//! Byte layout of the container format (specified in `docs/FORMAT.md`): encoders and
//! decoders of the file header, block headers, the index and the trailer. Decoders take
//! bytes from outside and check every field; they never panic (the fuzz target holds them
//! to that).

/// First 8 bytes of every container file.
pub const FILE_MAGIC: [u8; 8] = *b"ACCIOMF\x01";
/// First 8 bytes of every block header.
pub const BLOCK_MAGIC: [u8; 8] = *b"ACCIOBLK";
/// First 8 bytes of the index.
pub const INDEX_MAGIC: [u8; 8] = *b"ACCIOIDX";
/// First 8 bytes of the trailer (the last 64 bytes of a closed file).
pub const TRAILER_MAGIC: [u8; 8] = *b"ACCIOEND";
/// Format version written by this crate.
pub const VERSION: u32 = 1;
/// Size of the file header, of a block header and of the trailer.
pub const HEADER_BYTES: usize = 64;
/// Size of the index header (before the entries).
pub const INDEX_HEADER_BYTES: usize = 32;
/// Size of one index entry.
pub const INDEX_ENTRY_BYTES: usize = 48;
/// Default block alignment: one page, so payloads sit page-aligned in the file (O_DIRECT
/// works, and page-cache copies from page-aligned slots never hit 4 KiB aliasing).
pub const DEFAULT_ALIGN: u32 = 4096;
/// Smallest block alignment (one header).
pub const MIN_ALIGN: u32 = 64;
/// Largest block alignment.
pub const MAX_ALIGN: u32 = 1 << 20;
/// Largest payload a block may declare (1 TiB): bounds what a reader will believe.
pub const MAX_PAYLOAD: u64 = 1 << 40;
/// Trailer flag: the writer closed the file normally (not set by `recover`).
pub const TRAILER_CLEAN: u32 = 1;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Rounds `x` up to a multiple of `align` (a power of two).
pub fn round_up(x: u64, align: u64) -> u64 {
    (x + align - 1) & !(align - 1)
}

/// What a block's payload holds. Readers treat every kind as bytes; the kind tells tools
/// how to show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BlockKind {
    /// Opaque bytes written by the producer.
    Raw,
    /// Records packed by accio: each a little-endian `u32` length and that many bytes.
    Records,
    /// One Arrow IPC stream (schema and record batches) written by a producer.
    ArrowIpc,
    /// Space the merger reserved for a producer that did not fill it (it died mid-block,
    /// gave its buffer back, or committed less than the region held). Written only by the
    /// merger; its payload bytes mean nothing and are not checksummed.
    Hole,
    /// Room the merger reserved for a producer writing in place, not committed yet: the
    /// block's header replaces this one at commit, a hole's at abandonment. A file left
    /// by a killed merger may keep some; readers skip them as holes.
    Reserved,
    /// A kind this version does not know (kept, shown as a number).
    Other(u8),
}

impl BlockKind {
    /// The byte stored in the header.
    pub fn code(self) -> u8 {
        match self {
            BlockKind::Raw => 0,
            BlockKind::Records => 1,
            BlockKind::ArrowIpc => 2,
            BlockKind::Hole => 3,
            BlockKind::Reserved => 4,
            BlockKind::Other(c) => c,
        }
    }

    /// The kind stored as `code`.
    pub fn from_code(code: u8) -> BlockKind {
        match code {
            0 => BlockKind::Raw,
            1 => BlockKind::Records,
            2 => BlockKind::ArrowIpc,
            3 => BlockKind::Hole,
            4 => BlockKind::Reserved,
            c => BlockKind::Other(c),
        }
    }

    /// True for the kinds only the merger writes, which hold no data: holes and
    /// reserved room.
    pub fn is_space(self) -> bool {
        matches!(self, BlockKind::Hole | BlockKind::Reserved)
    }

    /// Name in tool output.
    pub fn name(self) -> String {
        match self {
            BlockKind::Raw => "raw".into(),
            BlockKind::Records => "records".into(),
            BlockKind::ArrowIpc => "arrow-ipc".into(),
            BlockKind::Hole => "hole".into(),
            BlockKind::Reserved => "reserved".into(),
            BlockKind::Other(c) => format!("kind-{c}"),
        }
    }
}

/// The file header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// Format version.
    pub version: u32,
    /// Block alignment in bytes (power of two, [`MIN_ALIGN`]..=[`MAX_ALIGN`]).
    pub align: u32,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_unix_ns: u64,
    /// [`FILE_MOVED`], or 0.
    pub flags: u32,
}

/// File header flag: blocks were moved after they were written (the writer compacted the
/// file at close), so a reader that followed the file while it was written goes by the
/// index from then on.
pub const FILE_MOVED: u32 = 1;

impl FileHeader {
    /// Encodes the header (64 bytes).
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[..8].copy_from_slice(&FILE_MAGIC);
        put32(&mut b, 8, self.version);
        put32(&mut b, 12, HEADER_BYTES as u32);
        put32(&mut b, 16, self.align);
        put32(&mut b, 20, self.flags);
        put64(&mut b, 24, self.created_unix_ns);
        let crc = crate::checksum::crc32c(&b[..60]);
        put32(&mut b, 60, crc);
        b
    }

    /// Decodes and checks a header.
    pub fn decode(b: &[u8]) -> Result<FileHeader, String> {
        if b.len() < HEADER_BYTES {
            return Err(format!(
                "file of {} bytes is shorter than the {HEADER_BYTES}-byte header",
                b.len()
            ));
        }
        if b[..8] != FILE_MAGIC {
            return Err("not an accio container file (bad magic at offset 0)".into());
        }
        if crate::checksum::crc32c(&b[..60]) != u32_at(b, 60) {
            return Err("file header checksum mismatch at offset 0".into());
        }
        let version = u32_at(b, 8);
        if version != VERSION {
            return Err(format!(
                "format version {version} is not supported (this build reads {VERSION})"
            ));
        }
        let align = u32_at(b, 16);
        if !align.is_power_of_two() || !(MIN_ALIGN..=MAX_ALIGN).contains(&align) {
            return Err(format!(
                "block alignment {align} is not a power of two in {MIN_ALIGN}..={MAX_ALIGN}"
            ));
        }
        Ok(FileHeader {
            version,
            align,
            created_unix_ns: u64_at(b, 24),
            // Unknown flags are kept, not refused: a later writer may add some.
            flags: u32_at(b, 20),
        })
    }

    /// Offset of the first block.
    pub fn first_block(&self) -> u64 {
        round_up(HEADER_BYTES as u64, u64::from(self.align))
    }
}

/// A block header (64 bytes), followed by padding to the alignment and the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockHeader {
    /// The producer that wrote the payload.
    pub producer: u32,
    /// What the payload holds.
    pub kind: BlockKind,
    /// The producer's sequence number of this block (0, 1, 2, ...).
    pub seq: u64,
    /// Payload length in bytes.
    pub len: u64,
    /// CRC32C (Castagnoli) of the payload.
    pub payload_crc: u32,
}

impl BlockHeader {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[..8].copy_from_slice(&BLOCK_MAGIC);
        put32(&mut b, 8, self.producer);
        b[12] = self.kind.code();
        put64(&mut b, 16, self.seq);
        put64(&mut b, 24, self.len);
        put32(&mut b, 32, self.payload_crc);
        let crc = crate::checksum::crc32c(&b[..60]);
        put32(&mut b, 60, crc);
        b
    }

    /// True when `b` starts with a block magic and a good header checksum: the cheap
    /// part of [`BlockHeader::decode`], with no message built.
    pub fn checksum_ok(b: &[u8]) -> bool {
        b.len() >= HEADER_BYTES
            && b[..8] == BLOCK_MAGIC
            && crate::checksum::crc32c(&b[..60]) == u32_at(b, 60)
    }

    /// Decodes and checks a header (not the payload).
    pub fn decode(b: &[u8]) -> Result<BlockHeader, String> {
        if b.len() < HEADER_BYTES {
            return Err("truncated block header".into());
        }
        if b[..8] != BLOCK_MAGIC {
            return Err("no block magic".into());
        }
        if crate::checksum::crc32c(&b[..60]) != u32_at(b, 60) {
            return Err("block header checksum mismatch".into());
        }
        let len = u64_at(b, 24);
        if len > MAX_PAYLOAD {
            return Err(format!(
                "block declares {len} payload bytes, above the {MAX_PAYLOAD} limit"
            ));
        }
        Ok(BlockHeader {
            producer: u32_at(b, 8),
            kind: BlockKind::from_code(b[12]),
            seq: u64_at(b, 16),
            len,
            payload_crc: u32_at(b, 32),
        })
    }
}

/// Where a block's payload starts and where the next block starts, for a block at `start`.
pub fn block_extent(start: u64, len: u64, align: u32) -> (u64, u64) {
    let a = u64::from(align);
    let payload = start + round_up(HEADER_BYTES as u64, a);
    (payload, payload + round_up(len, a))
}

/// One entry of the index: a block and where it lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    /// The block's header fields.
    pub header: BlockHeader,
    /// File offset of the block header.
    pub offset: u64,
}

impl IndexEntry {
    /// File offset of the payload.
    pub fn payload_offset(&self, align: u32) -> u64 {
        block_extent(self.offset, self.header.len, align).0
    }

    /// File offset just past the block (and its padding).
    pub fn end(&self, align: u32) -> u64 {
        block_extent(self.offset, self.header.len, align).1
    }
}

/// Encodes the index of `entries` (header and entries).
pub fn encode_index(entries: &[IndexEntry]) -> Vec<u8> {
    let mut b = vec![0u8; INDEX_HEADER_BYTES + entries.len() * INDEX_ENTRY_BYTES];
    b[..8].copy_from_slice(&INDEX_MAGIC);
    put64(&mut b, 8, entries.len() as u64);
    put32(&mut b, 16, INDEX_ENTRY_BYTES as u32);
    for (i, e) in entries.iter().enumerate() {
        let at = INDEX_HEADER_BYTES + i * INDEX_ENTRY_BYTES;
        let r = &mut b[at..at + INDEX_ENTRY_BYTES];
        put32(r, 0, e.header.producer);
        r[4] = e.header.kind.code();
        put64(r, 8, e.header.seq);
        put64(r, 16, e.offset);
        put64(r, 24, e.header.len);
        put32(r, 32, e.header.payload_crc);
    }
    b
}

/// Decodes an index; every entry must lie in `data_start..data_end` after the previous one
/// (blocks are listed in file order and do not overlap). Readers decode entries one chunk
/// at a time ([`decode_index_header`], [`decode_index_entry`]); this is their whole-slice
/// form, for tests.
#[cfg(test)]
pub(crate) fn decode_index(
    b: &[u8],
    align: u32,
    data_start: u64,
    data_end: u64,
) -> Result<Vec<IndexEntry>, String> {
    let count = decode_index_header(b.get(..INDEX_HEADER_BYTES).unwrap_or(b))?;
    let expect = (count as u128) * INDEX_ENTRY_BYTES as u128 + INDEX_HEADER_BYTES as u128;
    if expect != b.len() as u128 {
        return Err(format!(
            "index of {} bytes cannot hold {count} entries",
            b.len()
        ));
    }
    let mut out = Vec::new();
    let mut at_least = data_start;
    for (i, r) in b[INDEX_HEADER_BYTES..]
        .chunks_exact(INDEX_ENTRY_BYTES)
        .enumerate()
    {
        let e = decode_index_entry(r, i as u64, align, at_least, data_end)?;
        at_least = e.end(align);
        out.push(e);
    }
    Ok(out)
}

/// Decodes the index header (its first [`INDEX_HEADER_BYTES`] bytes): the number of
/// entries it announces.
pub(crate) fn decode_index_header(b: &[u8]) -> Result<u64, String> {
    if b.len() < INDEX_HEADER_BYTES || b[..8] != INDEX_MAGIC {
        return Err("no index magic".into());
    }
    if u32_at(b, 16) as usize != INDEX_ENTRY_BYTES {
        return Err(format!(
            "index entries of {} bytes are not supported",
            u32_at(b, 16)
        ));
    }
    Ok(u64_at(b, 8))
}

/// Decodes entry `i` of an index (its [`INDEX_ENTRY_BYTES`] bytes `r`); it must lie at or
/// after `at_least` (the end of the entry before), aligned, and end by `data_end`.
pub(crate) fn decode_index_entry(
    r: &[u8],
    i: u64,
    align: u32,
    at_least: u64,
    data_end: u64,
) -> Result<IndexEntry, String> {
    let len = u64_at(r, 24);
    let offset = u64_at(r, 16);
    if len > MAX_PAYLOAD {
        return Err(format!("index entry {i} declares {len} payload bytes"));
    }
    let e = IndexEntry {
        header: BlockHeader {
            producer: u32_at(r, 0),
            kind: BlockKind::from_code(r[4]),
            seq: u64_at(r, 8),
            len,
            payload_crc: u32_at(r, 32),
        },
        offset,
    };
    if offset < at_least
        || !offset.is_multiple_of(u64::from(align))
        || offset > data_end
        || e.end(align) > data_end
    {
        return Err(format!(
            "index entry {i} (block at {offset:#x}, {len} bytes) lies outside the data \
             area {at_least:#x}..{data_end:#x} or is misaligned"
        ));
    }
    Ok(e)
}

/// The trailer: the last 64 bytes of a closed file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailer {
    /// Offset of the index (= end of the data area).
    pub index_offset: u64,
    /// Length of the index in bytes.
    pub index_len: u64,
    /// Number of blocks in the index.
    pub blocks: u64,
    /// CRC32C of the index bytes.
    pub index_crc: u32,
    /// [`TRAILER_CLEAN`] and future flags.
    pub flags: u32,
}

impl Trailer {
    /// Encodes the trailer.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[..8].copy_from_slice(&TRAILER_MAGIC);
        put64(&mut b, 8, self.index_offset);
        put64(&mut b, 16, self.index_len);
        put64(&mut b, 24, self.blocks);
        put32(&mut b, 32, self.index_crc);
        put32(&mut b, 36, self.flags);
        let crc = crate::checksum::crc32c(&b[..60]);
        put32(&mut b, 60, crc);
        b
    }

    /// Decodes and checks a trailer.
    pub fn decode(b: &[u8]) -> Result<Trailer, String> {
        if b.len() < HEADER_BYTES || b[..8] != TRAILER_MAGIC {
            return Err("no trailer magic".into());
        }
        if crate::checksum::crc32c(&b[..60]) != u32_at(b, 60) {
            return Err("trailer checksum mismatch".into());
        }
        Ok(Trailer {
            index_offset: u64_at(b, 8),
            index_len: u64_at(b, 16),
            blocks: u64_at(b, 24),
            index_crc: u32_at(b, 32),
            flags: u32_at(b, 36),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_reject_a_flipped_bit() {
        let h = BlockHeader {
            producer: 7,
            kind: BlockKind::Records,
            seq: 42,
            len: 2 << 20,
            payload_crc: 0xdead_beef,
        };
        let mut b = h.encode();
        assert_eq!(BlockHeader::decode(&b), Ok(h));
        b[17] ^= 1;
        assert_eq!(
            BlockHeader::decode(&b).unwrap_err(),
            "block header checksum mismatch"
        );
        let f = FileHeader {
            version: VERSION,
            flags: 0,
            align: 4096,
            created_unix_ns: 5,
        };
        assert_eq!(FileHeader::decode(&f.encode()), Ok(f));
        assert_eq!(f.first_block(), 4096);
        let t = Trailer {
            index_offset: 8192,
            index_len: 80,
            blocks: 1,
            index_crc: 3,
            flags: TRAILER_CLEAN,
        };
        assert_eq!(Trailer::decode(&t.encode()), Ok(t));
    }

    #[test]
    fn block_extent_pads_header_and_payload_to_the_alignment() {
        assert_eq!(block_extent(4096, 1, 4096), (8192, 12288));
        assert_eq!(block_extent(4096, 4096, 4096), (8192, 12288));
        assert_eq!(block_extent(64, 100, 64), (128, 256));
        assert_eq!(block_extent(64, 0, 64), (128, 128));
    }

    #[test]
    fn index_rejects_overlapping_entries() {
        let e = |offset, len| IndexEntry {
            header: BlockHeader {
                producer: 0,
                kind: BlockKind::Raw,
                seq: 0,
                len,
                payload_crc: 0,
            },
            offset,
        };
        let good = [e(64, 10), e(192, 10)];
        let b = encode_index(&good);
        assert_eq!(decode_index(&b, 64, 64, 320).unwrap(), good.to_vec());
        let bad = encode_index(&[e(64, 100), e(128, 10)]);
        assert!(decode_index(&bad, 64, 64, 1024)
            .unwrap_err()
            .contains("entry 1"));
        assert!(decode_index(&b, 64, 64, 200)
            .unwrap_err()
            .contains("outside"));
    }
}
