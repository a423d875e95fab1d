//! [`ContainerWriter`]: appends blocks with one `pwritev` each at an offset reserved under a
//! short lock, and writes the index and trailer at close.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::format::{
    block_extent, encode_index, BlockHeader, BlockKind, FileHeader, IndexEntry, Trailer,
    DEFAULT_ALIGN, FILE_MOVED, HEADER_BYTES, MAX_ALIGN, MIN_ALIGN, TRAILER_CLEAN, VERSION,
};
use super::headers::{fallocate_mode, ClaimMode, HeaderMap};
use crate::error::{MergeError, Result};

/// Options of a new container file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerOptions {
    /// Block alignment in bytes, a power of two in 64..=1 MiB (default 4096: payloads are
    /// page-aligned in the file; use 64 for many small blocks).
    pub align: u32,
}

impl Default for ContainerOptions {
    fn default() -> Self {
        ContainerOptions {
            align: DEFAULT_ALIGN,
        }
    }
}

/// What becomes of the rest of a room after a shorter block was committed into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rest {
    /// A hole: nobody writes there.
    Hole,
    /// Still reserved: its writer goes on writing blocks there.
    Lent,
}

/// What a closed container holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ContainerSummary {
    /// Blocks written.
    pub blocks: u64,
    /// Payload bytes written.
    pub payload_bytes: u64,
    /// Size of the file, index and trailer included.
    pub file_bytes: u64,
}

#[derive(Debug)]
struct State {
    /// Next free offset (always aligned).
    next: u64,
    /// Blocks written, in completion order.
    entries: Vec<IndexEntry>,
    payload_bytes: u64,
    /// Set by the first failed write: the file is not appended to any more.
    failed: Option<String>,
    /// Holes written that nobody maps (start, end): those at the end of the data are cut
    /// off at close, the others compacted away ([`ContainerWriter::finish`]).
    holes: Vec<(u64, u64)>,
    /// Holes of room someone may still write into (a producer that vanished may only be
    /// cut off, not dead): nothing moves into or across them.
    pinned: Vec<(u64, u64)>,
}

/// Writes one container file. `append` may be called from several threads at once: each
/// block's space is reserved under a lock, then written with one `pwritev` outside it.
///
/// Dropping a writer without [`ContainerWriter::finish`] leaves the file as a crash would:
/// every complete block readable by a scan, no index. Either way the file's lock goes with
/// the writer (see [`ContainerWriter::create`]).
#[derive(Debug)]
pub struct ContainerWriter {
    file: File,
    path: PathBuf,
    header: FileHeader,
    /// `align` zero bytes, the source of every padding write.
    zeros: Vec<u8>,
    state: Mutex<State>,
    /// Headers of room reserved for writers in place go through this (see
    /// `headers.rs`: no inode lock, so no waiting behind the producers' payload writes).
    headers: Mutex<HeaderMap>,
}

impl ContainerWriter {
    /// Creates (or truncates) `path` and writes the file header.
    ///
    /// The writer holds the file's exclusive lock for its whole life, taken before
    /// anything is truncated or written: a file another writer (or `recover`) holds is
    /// refused with [`MergeError::Locked`], naming the holder's pid, and left as it was.
    pub fn create(path: impl AsRef<Path>, opts: ContainerOptions) -> Result<ContainerWriter> {
        let path = path.as_ref().to_path_buf();
        if !opts.align.is_power_of_two() || !(MIN_ALIGN..=MAX_ALIGN).contains(&opts.align) {
            return Err(MergeError::Config(format!(
                "block alignment {} is not a power of two in {MIN_ALIGN}..={MAX_ALIGN}",
                opts.align
            )));
        }
        // Not truncated on open: only once the lock is ours (another writer's blocks
        // would go, and its mapped pages with them: a `SIGBUS` in that writer).
        #[allow(clippy::suspicious_open_options)]
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .open(&path)
            .map_err(|e| MergeError::file("creating", &path, e))?;
        super::lock::lock_exclusive(&file, &path, "overwrite")?;
        file.set_len(0)
            .map_err(|e| MergeError::file("truncating", &path, e))?;
        let header = FileHeader {
            flags: 0,
            version: VERSION,
            align: opts.align,
            created_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        };
        let first = header.first_block();
        let mut page = vec![0u8; first as usize];
        page[..HEADER_BYTES].copy_from_slice(&header.encode());
        file.write_all_at(&page, 0)
            .map_err(|e| MergeError::file("writing the header of", &path, e))?;
        let claim = ClaimMode::for_file(&file);
        Ok(ContainerWriter {
            file,
            path,
            header,
            zeros: vec![0u8; opts.align as usize],
            state: Mutex::new(State {
                next: first,
                entries: Vec::new(),
                payload_bytes: 0,
                failed: None,
                holes: Vec::new(),
                pinned: Vec::new(),
            }),
            headers: Mutex::new(HeaderMap::new(claim)),
        })
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How room reserved for writers in place is claimed now (see [`ClaimMode`]).
    pub fn claim_mode(&self) -> ClaimMode {
        self.headers.lock().expect("container header map").mode()
    }

    /// Claims room reserved for writers in place with `mode` from now on (the default
    /// comes from [`ClaimMode::for_file`]). A populate that fails turns the writer back
    /// to `fallocate` by itself.
    pub fn set_claim_mode(&self, mode: ClaimMode) {
        self.headers
            .lock()
            .expect("container header map")
            .set_mode(mode);
    }

    /// Tests: makes `MADV_POPULATE_WRITE` fail with `EINVAL`, as on Linux before 5.14.
    #[cfg(test)]
    pub(crate) fn simulate_no_populate(&self) {
        self.headers
            .lock()
            .expect("container header map")
            .no_populate = true;
    }

    /// The open file (the one holding the lock).
    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// The file's descriptor (for `fstatfs` and mapping probes).
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }

    /// The block alignment.
    pub fn align(&self) -> u32 {
        self.header.align
    }

    /// Appends one block, computing the payload checksum. Returns its index entry once the
    /// block is in the file (the page cache; see [`ContainerWriter::sync`]).
    pub fn append(
        &self,
        producer: u32,
        seq: u64,
        kind: BlockKind,
        payload: &[u8],
    ) -> Result<IndexEntry> {
        self.append_with_crc(
            producer,
            seq,
            kind,
            payload,
            crate::checksum::crc32c(payload),
        )
    }

    /// Appends one block whose payload checksum the caller computed (a producer does it
    /// while the bytes are hot in its cache). A wrong checksum is not detected here; the
    /// reader reports the block as corrupt.
    pub fn append_with_crc(
        &self,
        producer: u32,
        seq: u64,
        kind: BlockKind,
        payload: &[u8],
        payload_crc: u32,
    ) -> Result<IndexEntry> {
        let len = payload.len() as u64;
        let start = {
            let mut st = self.state.lock().expect("container writer lock");
            if let Some(why) = &st.failed {
                return Err(MergeError::Sink {
                    path: self.path.clone(),
                    reason: format!("not appending after an earlier failure: {why}"),
                });
            }
            let start = st.next;
            st.next = block_extent(start, len, self.header.align).1;
            start
        };
        let (payload_at, end) = block_extent(start, len, self.header.align);
        let header = BlockHeader {
            producer,
            kind,
            seq,
            len,
            payload_crc,
        };
        let hb = header.encode();
        let pad1 = (payload_at - start) as usize - HEADER_BYTES;
        let pad2 = (end - payload_at - len) as usize;
        // Payload first, header (the commit record) second: a reader that finds a header
        // with a good checksum knows the payload under it is complete.
        let bufs: [&[u8]; 3] = [&self.zeros[..pad1], payload, &self.zeros[..pad2]];
        let written = pwritev_all(&self.file, &bufs, start + HEADER_BYTES as u64)
            .and_then(|()| pwritev_all(&self.file, &[&hb], start));
        match written {
            Ok(()) => {
                let entry = IndexEntry {
                    header,
                    offset: start,
                };
                let mut st = self.state.lock().expect("container writer lock");
                st.entries.push(entry);
                st.payload_bytes += len;
                Ok(entry)
            }
            Err(e) => {
                let err = MergeError::file(
                    format!("writing block {seq} of producer {producer} ({len} bytes) to"),
                    &self.path,
                    e,
                );
                let mut st = self.state.lock().expect("container writer lock");
                // Cut a partly written last block off, so the file ends on a whole block
                // (a block reserved after this one keeps the file from shrinking; a reader
                // skips the torn block by its checksums).
                if st.next == end && self.file.set_len(start).is_ok() {
                    st.next = start;
                }
                st.failed = Some(err.to_string());
                Err(err)
            }
        }
    }

    /// Reserves room for a block of up to `bytes` payload bytes (a multiple of the
    /// alignment) that someone else writes in place; returns the block's offset `B` (its
    /// payload goes at `B + round_up(64)`). The room gets a header of kind
    /// [`BlockKind::Reserved`] (readers skip it) until
    /// [`ContainerWriter::commit_reserved`] or [`ContainerWriter::abandon_reserved`]
    /// replaces it.
    pub fn reserve(&self, bytes: u64) -> Result<u64> {
        let a = u64::from(self.header.align);
        if !bytes.is_multiple_of(a) {
            return Err(MergeError::Config(format!(
                "a reservation of {bytes} bytes is not a multiple of the alignment {a}"
            )));
        }
        let mut st = self.state.lock().expect("container writer lock");
        if let Some(why) = &st.failed {
            return Err(MergeError::Sink {
                path: self.path.clone(),
                reason: format!("not reserving after an earlier failure: {why}"),
            });
        }
        let start = st.next;
        let end = block_extent(start, bytes, self.header.align).1;
        // Marked at once, so that a follower can step over the room while it is filled
        // and come back to it (`Follower`), and a scan after a crash skips it cleanly.
        let h = BlockHeader {
            producer: u32::MAX,
            kind: BlockKind::Reserved,
            seq: 0,
            len: bytes,
            payload_crc: 0,
        };
        let mut map = self.headers.lock().expect("container header map");
        let claimed = map
            .claim(&self.file, end, end - start)
            .and_then(|()| map.store(&self.file, start, &h.encode()));
        drop(map);
        if let Err(e) = claimed {
            let err = MergeError::file("reserving room in", &self.path, e);
            st.failed = Some(err.to_string());
            return Err(err);
        }
        st.next = end;
        Ok(start)
    }

    /// Commits a block whose payload was written in place into room reserved with
    /// [`ContainerWriter::reserve`] at `start` for `bytes`: writes its header (the commit
    /// record) and, when the block is shorter than the room, a header for the rest as
    /// `rest` says (still reserved, or a hole). `payload_crc` must be the checksum of what
    /// is in the file; a wrong one makes the block read as damaged, never as whole.
    #[allow(clippy::too_many_arguments)]
    pub fn commit_reserved(
        &self,
        start: u64,
        bytes: u64,
        producer: u32,
        seq: u64,
        kind: BlockKind,
        len: u64,
        payload_crc: u32,
        rest: Rest,
    ) -> Result<IndexEntry> {
        let (_, room_end) = block_extent(start, bytes, self.header.align);
        let (_, end) = block_extent(start, len, self.header.align);
        if end > room_end {
            return Err(MergeError::Config(format!(
                "block {seq} of producer {producer}: {len} bytes do not fit the {bytes}-byte room at {start:#x}"
            )));
        }
        let header = BlockHeader {
            producer,
            kind,
            seq,
            len,
            payload_crc,
        };
        let io = |e| {
            let err = MergeError::file(
                format!("writing the header of block {seq} of producer {producer} to"),
                &self.path,
                e,
            );
            self.state.lock().expect("container writer lock").failed = Some(err.to_string());
            err
        };
        if end < room_end {
            // The rest of the room first: once the block header is there, a scan steps
            // onto it.
            match rest {
                Rest::Hole => self.write_hole(end, room_end, true),
                Rest::Lent => self.write_space(end, room_end, BlockKind::Reserved),
            }
            .map_err(io)?;
        }
        self.store_header(start, &header.encode()).map_err(io)?;
        let entry = IndexEntry {
            header,
            offset: start,
        };
        let mut st = self.state.lock().expect("container writer lock");
        st.entries.push(entry);
        st.payload_bytes += len;
        Ok(entry)
    }

    /// Marks room reserved at `start` for `bytes` as a hole (its producer died, or gave it
    /// back): readers skip it. With `may_cut`, a hole at the end of the data is cut off at
    /// close; without, it stays (someone may still have the room mapped).
    pub fn abandon_reserved(&self, start: u64, bytes: u64, may_cut: bool) -> Result<()> {
        let (_, room_end) = block_extent(start, bytes, self.header.align);
        self.write_hole(start, room_end, may_cut)
            .map_err(|e| MergeError::file("marking a hole in", &self.path, e))
    }

    fn write_hole(&self, start: u64, end: u64, may_cut: bool) -> std::io::Result<()> {
        self.write_space(start, end, BlockKind::Hole)?;
        // Only a hole whose header is there may be cut off: cutting the file where a
        // header could not be stored (a full disk) would cut into the room around it.
        let mut st = self.state.lock().expect("container writer lock");
        if may_cut {
            st.holes.push((start, end));
        } else {
            st.pinned.push((start, end));
        }
        Ok(())
    }

    /// Writes the header of room `start..end` that holds no block (yet): a hole or
    /// reserved room.
    fn write_space(&self, start: u64, end: u64, kind: BlockKind) -> std::io::Result<()> {
        let (payload, _) = block_extent(start, 0, self.header.align);
        let h = BlockHeader {
            producer: u32::MAX,
            kind,
            seq: 0,
            len: end - payload,
            payload_crc: 0,
        };
        self.store_header(start, &h.encode())
    }

    /// Writes a header into room reserved before (inside the claimed file).
    fn store_header(&self, start: u64, header: &[u8]) -> std::io::Result<()> {
        self.headers
            .lock()
            .expect("container header map")
            .store(&self.file, start, header)
    }

    /// CRC-32C of the `len` payload bytes of the block reserved at `start`, which a
    /// producer wrote in place (for [`ContainerWriter::commit_reserved`]).
    pub fn reserved_payload_crc(&self, start: u64, len: u64) -> Result<u32> {
        let (payload_at, _) = block_extent(start, 0, self.header.align);
        self.headers
            .lock()
            .expect("container header map")
            .checksum(&self.file, payload_at, len)
            .map_err(|e| MergeError::file("reading a block written in place in", &self.path, e))
    }

    /// Flushes written blocks to stable storage (`fdatasync`).
    pub fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| MergeError::file("syncing", &self.path, e))
    }

    /// The first write failure, if any (the writer refuses blocks after one).
    pub fn failure(&self) -> Option<String> {
        self.state
            .lock()
            .expect("container writer lock")
            .failed
            .clone()
    }

    /// Blocks written so far.
    pub fn blocks(&self) -> u64 {
        self.state
            .lock()
            .expect("container writer lock")
            .entries
            .len() as u64
    }

    /// Writes the index and trailer, then (with `sync`) `fsync`s the file. If the index
    /// cannot be written (e.g. the disk is full) it is cut off again, so the file stays a
    /// valid unclosed container that `recover` can finish later.
    pub fn finish(self, sync: bool) -> Result<ContainerSummary> {
        let mut st = self.state.into_inner().expect("container writer lock");
        let mut entries = std::mem::take(&mut st.entries);
        cut_and_sort(&mut st, &mut entries);
        if st.failed.is_none() {
            // A failure leaves the file as it was at that step: whole, with its holes.
            let _ = settle(
                &self.file,
                self.header,
                &mut st,
                &mut entries,
                usize::MAX,
                true,
            );
            // Room left between blocks (a producer that vanished, a compaction that
            // stopped or was turned off) holds nothing: its pages go back.
            punch_gaps(&self.file, self.header, &entries, st.next);
        }
        let index = encode_index(&entries);
        let trailer = Trailer {
            index_offset: st.next,
            index_len: index.len() as u64,
            blocks: entries.len() as u64,
            index_crc: crate::checksum::crc32c(&index),
            flags: TRAILER_CLEAN,
        };
        let tb = trailer.encode();
        let file_bytes = st.next + index.len() as u64 + tb.len() as u64;
        // Producers writing in place may have claimed room past the index's end (room cut
        // off above): the trailer must end the file.
        let written = pwritev_all(&self.file, &[&index, &tb], st.next)
            .and_then(|()| self.file.set_len(file_bytes));
        if let Err(e) = written {
            let _ = self.file.set_len(st.next);
            return Err(MergeError::file(
                "writing the index and trailer of",
                &self.path,
                e,
            ));
        }
        if sync {
            self.file
                .sync_all()
                .map_err(|e| MergeError::file("syncing", &self.path, e))?;
        }
        Ok(ContainerSummary {
            blocks: entries.len() as u64,
            payload_bytes: st.payload_bytes,
            file_bytes,
        })
    }
}

impl ContainerWriter {
    /// Tests: closes as [`ContainerWriter::finish`] does up to the compaction's `steps`-th
    /// write, then stops as a killed writer would (no index); true when it stopped before
    /// the compaction was done.
    #[cfg(test)]
    pub(crate) fn stop_compacting_after(self, steps: usize, collapse: bool) -> bool {
        let mut st = self.state.into_inner().expect("container writer lock");
        let mut entries = std::mem::take(&mut st.entries);
        cut_and_sort(&mut st, &mut entries);
        settle(
            &self.file,
            self.header,
            &mut st,
            &mut entries,
            steps,
            collapse,
        )
        .is_err()
    }
}

/// Cuts the holes that end the data off (room reserved last and never filled, producers'
/// prefetched rooms mostly: it ends the file for nothing) and puts `entries` in file order.
fn cut_and_sort(st: &mut State, entries: &mut [IndexEntry]) {
    st.holes.sort_unstable();
    while let Some(&(start, end)) = st.holes.last() {
        if end != st.next {
            break;
        }
        st.next = start;
        st.holes.pop();
    }
    entries.sort_by_key(|e| e.offset);
}

/// Compacts the file ([`compact`]) unless `ACCIO_MERGE_COMPACT=off`, in at most `steps`
/// writes (tests stop there, as a kill would), `entries` in file order.
fn settle(
    file: &File,
    header: FileHeader,
    st: &mut State,
    entries: &mut [IndexEntry],
    steps: usize,
    collapse: bool,
) -> std::io::Result<()> {
    // ACCIO_MERGE_COMPACT: `copy` moves blocks even where the file system could cut the
    // holes out (to measure); `off` leaves the holes in place, deallocated (a file on
    // tmpfs then costs no memory for them, and closing copies nothing: see FORMAT.md).
    let how = std::env::var("ACCIO_MERGE_COMPACT");
    let mut w = Steps {
        file,
        align: header.align,
        left: steps,
        collapse: collapse && how.as_deref() != Ok("copy"),
    };
    if how.as_deref() == Ok("off") {
        return Ok(());
    }
    compact(&mut w, header, entries, &st.pinned, &mut st.next)
}

/// Deallocates the space between blocks (past each gap's first `align` bytes, where one
/// hole header over the gap goes), on file systems that can (`FALLOC_FL_PUNCH_HOLE`: tmpfs, ext4, xfs,
/// btrfs); elsewhere the room stays allocated. Best effort: reading the file never depends
/// on it.
fn punch_gaps(file: &File, header: FileHeader, entries: &[IndexEntry], next: u64) {
    let align = u64::from(header.align);
    let page = 4096u64.max(align);
    let mut all = gaps(entries, header.align, header.first_block(), u64::MAX);
    // And room past the last block, where the data ends with such room.
    let last = entries.last().map_or(header.first_block(), |e| {
        block_extent(e.offset, e.header.len, header.align).1
    });
    if next > last {
        all.push((last, next));
    }
    for (start, end) in all {
        let (from, to) = ((start + align).div_ceil(page) * page, end / page * page);
        // One hole header over the whole gap first: it may hold several holes, and the
        // headers of the later ones lie in what is punched.
        if to > from && write_space_at(file, header.align, start, end).is_ok() {
            let _ = fallocate_mode(
                file,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                from,
                to - from,
            );
        }
    }
}

/// The space between the blocks (in file order) that start in `lo..hi`, from `lo` on.
fn gaps(entries: &[IndexEntry], align: u32, lo: u64, hi: u64) -> Vec<(u64, u64)> {
    let mut end = lo;
    let mut gaps = Vec::new();
    for e in entries.iter().filter(|e| (lo..hi).contains(&e.offset)) {
        if e.offset > end {
            gaps.push((end, e.offset));
        }
        end = block_extent(e.offset, e.header.len, align).1;
    }
    gaps
}

/// The writes of a compaction, counted: tests stop one after any number of them.
struct Steps<'a> {
    file: &'a File,
    align: u32,
    left: usize,
    /// Gaps may be cut out with `FALLOC_FL_COLLAPSE_RANGE` (until it is refused).
    collapse: bool,
}

impl Steps<'_> {
    fn step(&mut self) -> std::io::Result<()> {
        if self.left == 0 {
            return Err(std::io::Error::other("compaction stopped"));
        }
        self.left -= 1;
        Ok(())
    }

    fn write(&mut self, bytes: &[u8], at: u64) -> std::io::Result<()> {
        self.step()?;
        self.file.write_all_at(bytes, at)
    }

    /// A hole header over `start..end`.
    fn hole(&mut self, start: u64, end: u64) -> std::io::Result<()> {
        self.step()?;
        write_space_at(self.file, self.align, start, end)
    }

    fn copy(&mut self, from: u64, to: u64, len: u64) -> std::io::Result<()> {
        self.step()?;
        copy_within(self.file, from, to, len)
    }

    /// Cuts `offset..offset + len` out of the file, shifting what follows down.
    fn collapse_range(&mut self, offset: u64, len: u64) -> std::io::Result<()> {
        self.step()?;
        fallocate_mode(self.file, libc::FALLOC_FL_COLLAPSE_RANGE, offset, len)
    }
}

/// Compacts the file at close: moves the blocks after the first hole down over the
/// holes, so that the file holds its data and the container's own overhead only
/// (`docs/FORMAT.md`, "Size"). `entries` (in file order) and `next` (the end of the
/// data) follow the blocks as they move.
///
/// Every step leaves a file that a scan reads whole, so a writer killed here loses
/// nothing: a block's bytes are copied into hole space first and its new header,
/// the commit record, is written last; its old place becomes a hole by one header
/// store. Where those two stores cannot come in that order (the old header is where
/// the new copy's hole must start), the block is briefly in the file twice, which a
/// scan reads as one block and a copy ([`super::reader`]: a block that repeats an
/// earlier one's producer, sequence number, length and checksum is a hole). A block
/// larger than the hole before it would overwrite itself: it goes through room past
/// the end of the data first. Nothing moves into or across room a producer may still
/// write (`pinned`). The file header says blocks moved ([`FILE_MOVED`]) before the
/// first one does, so a follower goes by the index.
fn compact(
    w: &mut Steps<'_>,
    header: FileHeader,
    entries: &mut [IndexEntry],
    pinned: &[(u64, u64)],
    next: &mut u64,
) -> std::io::Result<()> {
    let align = header.align;
    let gaps = |entries: &[IndexEntry], lo: u64, hi: u64| gaps(entries, align, lo, hi);
    // Room someone may still write is a wall: blocks move only within the stretches
    // between walls, and only past the last wall may the file shrink.
    let mut walls = pinned.to_vec();
    walls.sort_unstable();
    let mut stretches: Vec<(u64, u64, u64)> = Vec::new(); // (start, wall start, wall end)
    let mut lo = header.first_block();
    for &(a, b) in &walls {
        stretches.push((lo, a, b));
        lo = b;
    }
    if stretches
        .iter()
        .all(|&(s, a, _)| gaps(entries, s, a).is_empty())
        && gaps(entries, lo, u64::MAX).is_empty()
    {
        return Ok(());
    }
    let mut header = header;
    header.flags |= FILE_MOVED;
    w.write(&header.encode(), 0)?;
    let spare = *next; // room past the data, for blocks larger than their hole
    for &(s, a, b) in &stretches {
        if let Some(&(first, _)) = gaps(entries, s, a).first() {
            let dst = slide(w, entries, first, a, spare, align)?;
            // What the blocks left before the wall joins its hole.
            w.hole(dst, b)?;
        }
    }
    let mut todo = gaps(entries, lo, u64::MAX);
    // Where the file system shifts the file's extents (ext4, xfs), no byte moves: each
    // gap is cut out of the file, the last first, so the others stay where they are.
    while let Some(&(a, b)) = todo.last().filter(|_| w.collapse) {
        match w.collapse_range(a, b - a) {
            Ok(()) => {
                for e in entries.iter_mut().filter(|e| e.offset >= b) {
                    e.offset -= b - a;
                }
                *next -= b - a;
                todo.pop();
            }
            // Not this file system, or not at this alignment: copy instead.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                w.collapse = false;
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(&(first, _)) = todo.first() {
        *next = slide(w, entries, first, u64::MAX, spare, align)?;
    }
    Ok(())
}

/// Moves the blocks that start in `first..limit` (in file order, `first` the start of
/// the first gap) down over the gaps between them, one write at a time as
/// [`compact`] says; returns where the last one ends now. `spare`: room past all data,
/// for a block larger than the hole below it.
fn slide(
    w: &mut Steps<'_>,
    entries: &mut [IndexEntry],
    first: u64,
    limit: u64,
    spare: u64,
    align: u32,
) -> std::io::Result<u64> {
    let mut dst = first;
    for e in entries
        .iter_mut()
        .filter(|e| (first..limit).contains(&e.offset))
    {
        let (s, ext) = (
            e.offset,
            block_extent(e.offset, e.header.len, align).1 - e.offset,
        );
        if s == dst {
            dst += ext;
            continue;
        }
        let hb = e.header.encode();
        // Nothing lives in dst..s: one hole over all of it, so that the copy below
        // lands inside a hole whatever headers lay there.
        w.hole(dst, s)?;
        let from = if s - dst >= ext {
            s
        } else {
            // Overlapping: the block goes past the data first (a second copy, which
            // a scan takes for one), then its old place and the hole before it are
            // one hole.
            w.copy(
                s + HEADER_BYTES as u64,
                spare + HEADER_BYTES as u64,
                ext - 64,
            )?;
            w.write(&hb, spare)?;
            w.hole(dst, s + ext)?;
            spare
        };
        w.copy(
            from + HEADER_BYTES as u64,
            dst + HEADER_BYTES as u64,
            ext - 64,
        )?;
        if dst + ext < s || from == spare {
            // Inside the hole over dst..s (or dst..s + ext): nobody sees it yet.
            w.hole(dst + ext, s + ext)?;
            w.write(&hb, dst)?;
        } else {
            // The old header is where the hole after the new copy starts: the new
            // header first (the block is there twice for a moment), then the old
            // place becomes a hole.
            w.write(&hb, dst)?;
            w.hole(s, s + ext)?;
        }
        if from == spare {
            // The copy past the data is a copy no more.
            w.write(&[0u8; HEADER_BYTES], spare)?;
        }
        e.offset = dst;
        dst += ext;
    }
    Ok(dst)
}

/// Writes the header of a hole over `start..end` with `pwrite` (at close, when nobody
/// writes beside the writer).
fn write_space_at(file: &File, align: u32, start: u64, end: u64) -> std::io::Result<()> {
    let (payload, _) = block_extent(start, 0, align);
    let h = BlockHeader {
        producer: u32::MAX,
        kind: BlockKind::Hole,
        seq: 0,
        len: end - payload,
        payload_crc: 0,
    };
    file.write_all_at(&h.encode(), start)
}

/// Copies `len` bytes of the file from `from` to `to` (ranges that do not overlap):
/// `copy_file_range`, which shares the blocks where the file system can (xfs, btrfs)
/// and copies in the kernel elsewhere; a buffer where it is refused.
fn copy_within(file: &File, from: u64, to: u64, len: u64) -> std::io::Result<()> {
    let fd = file.as_raw_fd();
    let (mut off_in, mut off_out, mut left) = (from as libc::loff_t, to as libc::loff_t, len);
    while left > 0 {
        let chunk = left.min(1 << 30) as usize;
        // SAFETY: a plain system call on our own descriptor, with offsets it updates.
        let n = unsafe { libc::copy_file_range(fd, &mut off_in, fd, &mut off_out, chunk, 0) };
        if n > 0 {
            left -= n as u64;
            continue;
        }
        if n == 0 {
            // The source ends before the range does (errno says nothing here).
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("copy_file_range found the file ending at {off_in}"),
            ));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            // Not between these files or on this file system: copy through a buffer.
            Some(libc::EXDEV | libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) => break,
            _ => return Err(e),
        }
    }
    let mut buf = vec![0u8; left.min(1 << 20) as usize];
    while left > 0 {
        let n = buf.len().min(left as usize);
        file.read_exact_at(&mut buf[..n], off_in as u64)?;
        file.write_all_at(&buf[..n], off_out as u64)?;
        (off_in, off_out, left) = (off_in + n as i64, off_out + n as i64, left - n as u64);
    }
    Ok(())
}

/// Writes every byte of `bufs`, in order, at `offset`: one `pwritev` in the common case,
/// more after a short write.
pub(crate) fn pwritev_all(file: &File, bufs: &[&[u8]], mut offset: u64) -> std::io::Result<()> {
    let mut parts: Vec<&[u8]> = bufs.iter().copied().filter(|b| !b.is_empty()).collect();
    let mut first = 0;
    while first < parts.len() {
        let iov: Vec<libc::iovec> = parts[first..]
            .iter()
            .take(1024)
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: every iovec points into a live slice of `bufs` for its stated length;
        // the kernel only reads them.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                offset as libc::off_t,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "pwritev wrote nothing",
            ));
        }
        let mut n = n as usize;
        offset += n as u64;
        while n > 0 {
            let len = parts[first].len();
            if n >= len {
                n -= len;
                first += 1;
            } else {
                parts[first] = &parts[first][n..];
                n = 0;
            }
        }
    }
    Ok(())
}
