//! Reading a container while it is being written.
//!
//! A block becomes visible to a [`Follower`] once its header — the commit record — is in
//! the file: the merger writes a block's header only after its payload is complete (see
//! `docs/FORMAT.md`, "Writing"), so a header with a good checksum stands on a whole payload.
//! The follower still checks every payload checksum before it returns a block.
//!
//! It walks the file in order, along the chain of headers from the first block — the chain
//! a scan, and so `recover`, walks too — and stops where no header is yet (the end of
//! what was written). Room reserved for a producer writing in place (a header of kind
//! [`BlockKind::Reserved`]) is stepped over and remembered: a block committed there
//! later is returned then, so blocks of in-place writers come in commit order rather
//! than file order, and no producer holding room keeps the others' blocks out of sight.
//! A block whose payload checksum fails (damage, not a write in progress: the header is
//! written after the payload) is skipped and listed in [`Follower::damage`], as a scan
//! skips it.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::format::{
    block_extent, BlockHeader, BlockKind, FileHeader, IndexEntry, Trailer, FILE_MOVED,
    HEADER_BYTES, INDEX_MAGIC,
};
use super::reader::Damage;
use crate::error::{MergeError, Result};

/// Follows a container file being written (see the module docs).
#[derive(Debug)]
pub struct Follower {
    file: File,
    path: PathBuf,
    header: FileHeader,
    /// Offset of the next block to read.
    pos: u64,
    closed: bool,
    damage: Vec<Damage>,
    /// Reserved room stepped over, not committed yet: where it starts and ends, in file
    /// order.
    pending: Vec<(u64, u64)>,
    /// Blocks returned so far, per producer (to return each once when the writer moved
    /// blocks at close and the rest comes from the index).
    returned: std::collections::HashMap<u32, Returned>,
    /// The writer moved blocks (the file header says so): the blocks not returned yet
    /// come from the index once the file is closed, in its order.
    moved: Option<std::collections::VecDeque<IndexEntry>>,
}

/// One producer's blocks a follower returned: every sequence number below `below`, and
/// those in `beyond`.
#[derive(Debug, Default)]
struct Returned {
    below: u64,
    beyond: std::collections::BTreeSet<u64>,
}

impl Returned {
    fn has(&self, seq: u64) -> bool {
        seq < self.below || self.beyond.contains(&seq)
    }

    fn add(&mut self, seq: u64) {
        if seq != self.below {
            self.beyond.insert(seq);
            return;
        }
        self.below += 1;
        while self.beyond.remove(&self.below) {
            self.below += 1;
        }
    }
}

impl Follower {
    /// Opens `path`, waiting up to `timeout` for its file header to appear.
    pub fn open(path: impl AsRef<Path>, timeout: Duration) -> Result<Follower> {
        let path = path.as_ref().to_path_buf();
        let deadline = Instant::now() + timeout;
        let (file, header) = loop {
            let attempt = File::open(&path)
                .map_err(|e| MergeError::file("opening", &path, e))
                .and_then(|f| {
                    let mut hb = [0u8; HEADER_BYTES];
                    f.read_exact_at(&mut hb, 0)
                        .map_err(|e| MergeError::file("reading the header of", &path, e))?;
                    let h = FileHeader::decode(&hb).map_err(|r| MergeError::format(&path, r))?;
                    Ok((f, h))
                });
            match attempt {
                Ok(x) => break x,
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        Ok(Follower {
            pos: header.first_block(),
            file,
            path,
            header,
            closed: false,
            damage: Vec::new(),
            pending: Vec::new(),
            returned: Default::default(),
            moved: None,
        })
    }

    /// The file header.
    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// True once the writer closed the file (its index and trailer are there): no block
    /// will follow.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Blocks skipped because their payload checksum failed.
    pub fn damage(&self) -> &[Damage] {
        &self.damage
    }

    /// The offset up to which the file has been read (the next block's place).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Reserved rooms stepped over whose blocks have not come yet.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Reads `buf.len()` bytes at `at`; false when the file ends first (the writer cut it
    /// since its size was read: closing cuts unfilled room off the end).
    fn read_at(&self, buf: &mut [u8], at: u64) -> Result<bool> {
        match self.file.read_exact_at(buf, at) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(MergeError::file("reading", &self.path, e)),
        }
    }

    /// Reads the header at `at`, if the file is long enough and it decodes.
    fn header_at(&self, at: u64, size: u64) -> Result<Option<BlockHeader>> {
        if at + HEADER_BYTES as u64 > size {
            return Ok(None);
        }
        let mut hb = [0u8; HEADER_BYTES];
        if !self.read_at(&mut hb, at)? {
            return Ok(None);
        }
        Ok(BlockHeader::decode(&hb).ok())
    }

    /// Reads and checks the payload of the block `bh` at `at`: `Some(Some(data))` when
    /// whole, `Some(None)` (recorded as damage) when its checksum fails, `None` when the
    /// file ended before it (look again later).
    fn payload(&mut self, at: u64, bh: &BlockHeader) -> Result<Option<Option<Vec<u8>>>> {
        let (payload_at, end) = block_extent(at, bh.len, self.header.align);
        let len = usize::try_from(bh.len)
            .map_err(|_| MergeError::format(&self.path, "block too large for this machine"))?;
        let mut data = vec![0u8; len];
        if !self.read_at(&mut data, payload_at)? {
            return Ok(None);
        }
        if crate::checksum::crc32c(&data) != bh.payload_crc {
            self.damage.push(Damage {
                offset: at,
                len: end - at,
                reason: format!(
                    "payload checksum mismatch in block {} of producer {}",
                    bh.seq, bh.producer
                ),
            });
            return Ok(Some(None));
        }
        Ok(Some(Some(data)))
    }

    /// A block committed into room stepped over before, if one has come.
    fn try_pending(&mut self, size: u64) -> Result<Option<(IndexEntry, Vec<u8>)>> {
        let mut i = 0;
        while i < self.pending.len() {
            let (at, room_end) = self.pending[i];
            match self.header_at(at, size)? {
                // Still reserved, or its header being replaced right now.
                Some(bh) if bh.kind == BlockKind::Reserved && !self.closed => i += 1,
                None if !self.closed => i += 1,
                // Cut off at close, or abandoned: no block will come.
                None => {
                    self.pending.remove(i);
                }
                Some(bh) if bh.kind.is_space() => {
                    self.pending.remove(i);
                }
                Some(bh) => {
                    let (payload_at, end) = block_extent(at, bh.len, self.header.align);
                    if payload_at + bh.len > size {
                        i += 1;
                        continue;
                    }
                    match self.payload(at, &bh)? {
                        None => i += 1,
                        Some(got) => {
                            // The rest of the room, if the block left any, is its
                            // writer's still (reserved) or a hole: looked at from now on.
                            if end < room_end {
                                self.pending[i] = (end, room_end);
                            } else {
                                self.pending.remove(i);
                            }
                            if let Some(data) = got {
                                return Ok(Some((
                                    IndexEntry {
                                        header: bh,
                                        offset: at,
                                    },
                                    data,
                                )));
                            }
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// The next committed block and its payload (checked), if one is there now.
    pub fn try_next(&mut self) -> Result<Option<(IndexEntry, Vec<u8>)>> {
        loop {
            if self.moved.is_some() {
                return self.next_moved();
            }
            let got = self.walk()?;
            // Checked after the read: the writer sets the flag before it moves anything,
            // so a block read while it was clear was read where it was written.
            if self.writer_moved_blocks()? {
                self.moved = Some(Default::default());
                self.closed = false;
                continue; // that block, if any, comes again from the index
            }
            if let Some((e, _)) = &got {
                self.returned
                    .entry(e.header.producer)
                    .or_default()
                    .add(e.header.seq);
            }
            return Ok(got);
        }
    }

    /// Whether the file header says the writer moved blocks (a header that does not
    /// decode, being rewritten, says so too: the index is the safe way then).
    fn writer_moved_blocks(&self) -> Result<bool> {
        let mut hb = [0u8; HEADER_BYTES];
        if !self.read_at(&mut hb, 0)? {
            return Ok(true);
        }
        Ok(FileHeader::decode(&hb).map_or(true, |h| h.flags & FILE_MOVED != 0))
    }

    /// After the writer moved blocks: once the file is closed, the indexed blocks not
    /// returned yet, in file order.
    fn next_moved(&mut self) -> Result<Option<(IndexEntry, Vec<u8>)>> {
        if !self.closed {
            let size = self
                .file
                .metadata()
                .map_err(|e| MergeError::file("reading the size of", &self.path, e))?
                .len();
            if self.trailer(size)?.is_none() {
                return Ok(None);
            }
            let file = self
                .file
                .try_clone()
                .map_err(|e| MergeError::file("reopening", &self.path, e))?;
            let r = super::ContainerReader::from_source(Box::new(file), self.path.clone())?;
            let todo = r
                .blocks()
                .iter()
                .filter(|e| {
                    !self
                        .returned
                        .get(&e.header.producer)
                        .is_some_and(|r| r.has(e.header.seq))
                })
                .copied()
                .collect();
            self.moved = Some(todo);
            self.pending.clear();
            self.closed = true;
        }
        while let Some(e) = self.moved.as_mut().and_then(|q| q.pop_front()) {
            if let Some(Some(data)) = self.payload(e.offset, &e.header)? {
                self.returned
                    .entry(e.header.producer)
                    .or_default()
                    .add(e.header.seq);
                self.pos = self
                    .pos
                    .max(block_extent(e.offset, e.header.len, self.header.align).1);
                return Ok(Some((e, data)));
            }
        }
        Ok(None)
    }

    /// The walk along the file as it is written (see the module docs).
    fn walk(&mut self) -> Result<Option<(IndexEntry, Vec<u8>)>> {
        let io = |what: &str, path: &Path, e| MergeError::file(what.to_string(), path, e);
        loop {
            let size = self
                .file
                .metadata()
                .map_err(|e| io("reading the size of", &self.path, e))?
                .len();
            if let Some(b) = self.try_pending(size)? {
                return Ok(Some(b));
            }
            if self.closed {
                return Ok(None);
            }
            let h = HEADER_BYTES as u64;
            if self.pos + h > size {
                // Closing cuts unfilled room off the end, perhaps behind this position.
                self.closed = self.trailer_ends_at(size)?;
                if self.closed {
                    continue; // settle the pending rooms against the final file
                }
                return Ok(None);
            }
            let mut hb = [0u8; HEADER_BYTES];
            if !self.read_at(&mut hb, self.pos)? {
                continue; // cut since: look at the new end
            }
            if hb[..8] == INDEX_MAGIC {
                self.closed = self.trailer_ends_at(size)?;
                if !self.closed {
                    return Ok(None); // the trailer is on its way
                }
                continue; // settle the pending rooms against the final file
            }
            // Zeros (room not committed yet) or a header being written: wait.
            let Ok(bh) = BlockHeader::decode(&hb) else {
                return Ok(None);
            };
            let (payload_at, end) = block_extent(self.pos, bh.len, self.header.align);
            if payload_at + bh.len > size {
                return Ok(None);
            }
            let at = self.pos;
            match bh.kind {
                BlockKind::Hole => {
                    self.pos = end;
                    continue;
                }
                BlockKind::Reserved => {
                    self.pending.push((at, end));
                    self.pos = end;
                    continue;
                }
                _ => {}
            }
            match self.payload(at, &bh)? {
                None => continue, // cut since: look at the new end
                Some(got) => {
                    self.pos = end;
                    if let Some(data) = got {
                        return Ok(Some((
                            IndexEntry {
                                header: bh,
                                offset: at,
                            },
                            data,
                        )));
                    }
                }
            }
        }
    }

    /// The next committed block, waiting up to `timeout` for one (polling every
    /// millisecond or so); `None` when the file was closed, or on timeout.
    pub fn next_within(&mut self, timeout: Duration) -> Result<Option<(IndexEntry, Vec<u8>)>> {
        let deadline = Instant::now() + timeout;
        let mut nap = Duration::from_micros(100);
        loop {
            if let Some(b) = self.try_next()? {
                return Ok(Some(b));
            }
            if self.closed || Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(nap.min(deadline.saturating_duration_since(Instant::now())));
            nap = (nap * 2).min(Duration::from_millis(5));
        }
    }

    /// The trailer that ends the file, if one does.
    fn trailer(&self, size: u64) -> Result<Option<Trailer>> {
        let mut tb = [0u8; HEADER_BYTES];
        if size < self.header.first_block() + HEADER_BYTES as u64 {
            return Ok(None);
        }
        // Cut since its size was read (a file being compacted shrinks): look again later.
        if !self.read_at(&mut tb, size - HEADER_BYTES as u64)? {
            return Ok(None);
        }
        Ok(Trailer::decode(&tb).ok().filter(|t| {
            t.index_offset
                .checked_add(t.index_len + HEADER_BYTES as u64)
                == Some(size)
        }))
    }

    /// True when the file ends with a trailer whose index starts here or before (the
    /// room between, cut off at close, held no blocks).
    fn trailer_ends_at(&self, size: u64) -> Result<bool> {
        Ok(self
            .trailer(size)?
            .is_some_and(|t| t.index_offset <= self.pos))
    }
}
