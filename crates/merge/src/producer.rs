//! The producer side: connect to a merger, take a buffer (a slot of the merger's memory),
//! fill it, commit it.
//!
//! Over `shm://` a buffer *is* the merger's slot, mapped into this process
//! (`Endpoint::map_remote`): the producer's stores land in merger memory and the commit is
//! a 26-byte message. Over `tcp://` a buffer is a local staging slot whose bytes cross the
//! socket once at commit (`vwrite_to` into the merger's slot window).
//!
//! Writing in place ([`crate::WriteMode::Direct`]) the merger lends room in the output file
//! instead, and every block is written there once, by this producer, when its length is
//! known: `write_block` from the caller's bytes, a buffer or the record packer from a local
//! staging buffer at commit. A room is as large as the producer asks (its last block's
//! size, times as many as fit a slot), and what a block leaves of it stays lent for the
//! next ones ([`crate::wire::room_rest`]), so short blocks lie one after the other in the
//! file and no room goes unfilled.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use accio::{Endpoint, ErrorKind, MemView, Progress, RemoteMap, RmaFlags};

use crate::container::BlockKind;
use crate::error::{MergeError, Result};
use crate::helper::{Helper, HELP_MIN};
use crate::insert::{Mapping, PageInserter};
use crate::wire::{room_rest, Msg, ANY_PRODUCER, PROTOCOL};

/// Ring size of a producer's shm connection: control messages are tiny, so 64 KiB rings
/// (the minimum) instead of the 4 MiB default keep 256 producers' rings at 32 MiB.
const SHM_RING_BYTES: usize = 64 << 10;

/// Options of [`Producer::connect_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerOptions {
    /// How long to wait for the merger to accept (default 10 s).
    pub timeout: Duration,
    /// The producer id to ask for (default: the merger picks one).
    pub id: Option<u32>,
}

impl Default for ProducerOptions {
    fn default() -> Self {
        ProducerOptions {
            timeout: Duration::from_secs(10),
            id: None,
        }
    }
}

/// What a finished producer wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerSummary {
    /// Its id in the file.
    pub id: u32,
    /// Blocks acknowledged.
    pub blocks: u64,
    /// Payload bytes acknowledged.
    pub bytes: u64,
    /// Blocks written in place by inserting pages, on tmpfs: wholly (`write_block` beside
    /// other producers) or their second part (alone, beside a `pwrite`: `crate::helper`).
    pub inserted_blocks: u64,
}

/// A slot granted by the merger (writing in place, room in the file).
#[derive(Clone, Copy, Debug)]
struct Slot {
    id: u32,
    offset: u64,
    /// Payload bytes it holds.
    cap: usize,
}

/// Records being packed into a slot (`None`: the staging buffer, writing in place).
#[derive(Clone, Copy, Debug)]
struct Packing {
    slot: Option<Slot>,
    len: usize,
}

/// One producer's connection to a merger. Not `Sync`: one thread produces through it
/// (open one per thread; they are cheap).
pub struct Producer {
    ep: Box<dyn Endpoint>,
    merger: String,
    id: u32,
    slot_bytes: usize,
    credit: u32,
    /// True on shm: buffers are mapped merger memory.
    mapped: bool,
    /// Set when the merger lends room in the output file ([`Msg::Direct`]): the file,
    /// opened here, and the mappings of the rooms in use, by slot id.
    direct: Option<(std::fs::File, std::path::PathBuf)>,
    /// Writing in place, the file's block alignment ([`Msg::Direct`]).
    align: u64,
    /// Writing in place, the payload room each request not yet granted asked for.
    asked: VecDeque<u64>,
    /// Writing in place, the payload room to ask for next (0: a slot's): as many blocks
    /// of the last one's size as fit a slot.
    want: u64,
    rooms: HashMap<u32, Mapping>,
    /// Writing in place, the merger checksums the blocks ([`Msg::Policy`]).
    merger_checksums: bool,
    /// Writing in place, other producers write beside this one ([`Msg::Policy`]).
    shared: bool,
    /// Inserts pages into the output file (tmpfs; `crate::insert`), until one insertion
    /// fails.
    inserter: Option<Arc<PageInserter>>,
    /// Alone, the thread that takes part of each large block's work (`crate::helper`;
    /// started with the first such block).
    helper: Option<Helper>,
    /// How `write_block` writes in place when set (measurements only:
    /// `ACCIO_MERGE_IN_PLACE`); else as [`InPlace::auto`] says.
    in_place: Option<InPlace>,
    /// Blocks written by inserting pages, wholly or (split) their second half.
    inserted: u64,
    /// Granted, unused slots.
    free: VecDeque<Slot>,
    /// Slots asked for, not granted yet.
    requested: u32,
    /// Slots in use by a `Buffer` or the record packer.
    in_use: u32,
    /// Mappings of the merger's slot windows, by offset (shm).
    maps: HashMap<u64, RemoteMap>,
    /// The local buffer of the slot in use (tcp).
    staging: Vec<u8>,
    /// The pinned staging pipeline of [`Producer::write_device`], made at its first call
    /// (for the GPU of that block; remade for a block on another GPU).
    stager: Option<accio_device::Stager>,
    packing: Option<Packing>,
    next_seq: u64,
    acked: u64,
    acked_bytes: u64,
    /// Lengths of committed, unacknowledged blocks, in order.
    unacked: VecDeque<u64>,
    failed: Option<String>,
    bye_acked: bool,
    tx: Vec<u8>,
    rx: Vec<u8>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("merger", &self.merger)
            .field("id", &self.id)
            .field("next_seq", &self.next_seq)
            .field("acked", &self.acked)
            .finish_non_exhaustive()
    }
}

/// Accepts a file a merger lent to write in place only if it is a regular file opened for
/// reading and writing: anything else (a device, a pipe, a socket) is a broken or hostile
/// merger.
fn check_lent_file(f: std::fs::File, merger: &str) -> accio::Result<std::fs::File> {
    let meta = f
        .metadata()
        .map_err(|e| accio::Error::io("fstat", format!("the file lent by {merger}"), e))?;
    // SAFETY: F_GETFL on a descriptor we own has no memory effects.
    let flags = unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&f), libc::F_GETFL) };
    if !meta.file_type().is_file() || flags < 0 || flags & libc::O_ACCMODE != libc::O_RDWR {
        return Err(accio::Error::protocol(
            merger,
            "the output file it lent is not a regular file open for reading and writing",
        ));
    }
    Ok(f)
}

impl Producer {
    /// Connects to the merger at `addr` with the default options.
    pub fn connect(addr: &str) -> Result<Producer> {
        Producer::connect_with(addr, ProducerOptions::default())
    }

    /// Connects to the merger at `addr`.
    pub fn connect_with(addr: &str, opts: ProducerOptions) -> Result<Producer> {
        let parsed: accio::Addr = addr.parse()?;
        let env = accio::ShmOptions::from_env();
        let shm = accio::ShmOptions {
            ring_bytes: SHM_RING_BYTES,
            chunk_bytes: SHM_RING_BYTES / 4,
            // A producer waits for slots, i.e. for file writes (milliseconds): spinning
            // would only take the CPU from the merger, so sleep at once unless
            // ACCIO_SHM_SPIN_US asks otherwise.
            spin: if std::env::var_os("ACCIO_SHM_SPIN_US").is_some() {
                env.spin
            } else {
                Duration::ZERO
            },
            ..env
        };
        let ep = accio::connect_with(addr, opts.timeout, &accio::Options::new().with(shm))?;
        let mapped = ep.capabilities().map_remote;
        let mut p = Producer {
            ep,
            merger: parsed.to_string(),
            id: 0,
            slot_bytes: 0,
            credit: 0,
            mapped,
            direct: None,
            align: 4096,
            asked: VecDeque::new(),
            want: 0,
            rooms: HashMap::new(),
            merger_checksums: false,
            shared: false,
            inserter: None,
            helper: None,
            in_place: InPlace::from_env()?,
            inserted: 0,
            free: VecDeque::new(),
            requested: 0,
            in_use: 0,
            maps: HashMap::new(),
            staging: Vec::new(),
            stager: None,
            packing: None,
            next_seq: 0,
            acked: 0,
            acked_bytes: 0,
            unacked: VecDeque::new(),
            failed: None,
            bye_acked: false,
            tx: Vec::with_capacity(64),
            rx: Vec::with_capacity(64),
        };
        p.send(&Msg::Hello {
            version: PROTOCOL,
            producer: opts.id.unwrap_or(ANY_PRODUCER),
        })?;
        p.ep.recv_timeout(&mut p.rx, Some(opts.timeout))?;
        let mut first = Msg::decode(&p.rx).map_err(|r| MergeError::protocol(&p.merger, r))?;
        if let Msg::Direct { .. } = first {
            // Room in the file will be lent, not slots: open the file, then the welcome.
            p.absorb()?;
            p.check_failed()?;
            p.ep.recv_timeout(&mut p.rx, Some(opts.timeout))?;
            first = Msg::decode(&p.rx).map_err(|r| MergeError::protocol(&p.merger, r))?;
        }
        match first {
            Msg::Welcome {
                producer,
                slot_bytes,
                credit,
            } => {
                p.id = producer;
                p.slot_bytes = usize::try_from(slot_bytes)
                    .map_err(|_| MergeError::protocol(&p.merger, "slot size too large"))?;
                p.credit = credit.max(1);
            }
            Msg::Fail { reason } => {
                return Err(MergeError::Merger {
                    merger: p.merger,
                    reason,
                })
            }
            other => {
                return Err(MergeError::protocol(
                    &p.merger,
                    format!("expected welcome, got {other:?}"),
                ))
            }
        }
        // Ask for the first slots now: the merger registers (and pre-faults) them while
        // the producer prepares its data, not when it wants to write.
        p.request_more()?;
        Ok(p)
    }

    /// This producer's id in the output.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Bytes of every buffer (the largest block).
    pub fn buffer_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Blocks committed so far (the next block's sequence number).
    pub fn committed(&self) -> u64 {
        self.next_seq
    }

    /// Blocks the merger has acknowledged: blocks `0..acked()` are in the file.
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// True when buffers are the merger's memory mapped here (zero-copy, shm, through the
    /// merger's slots).
    pub fn is_zero_copy(&self) -> bool {
        self.mapped && self.direct.is_none()
    }

    /// True when this producer writes its blocks into the output file itself, once each,
    /// and the merger copies nothing ([`crate::WriteMode::Direct`]).
    pub fn writes_in_place(&self) -> bool {
        self.direct.is_some()
    }

    fn send(&mut self, m: &Msg) -> Result<()> {
        m.encode(&mut self.tx);
        self.ep.send(&self.tx)?;
        Ok(())
    }

    fn check_failed(&self) -> Result<()> {
        match &self.failed {
            Some(reason) => Err(MergeError::Merger {
                merger: self.merger.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Handles one message from the merger.
    fn absorb(&mut self) -> Result<()> {
        match Msg::decode(&self.rx).map_err(|r| MergeError::protocol(&self.merger, r))? {
            Msg::Grant { slot, offset } => {
                if self.requested == 0 {
                    return Err(MergeError::protocol(
                        &self.merger,
                        "grant without a request",
                    ));
                }
                self.requested -= 1;
                let cap = match self.asked.pop_front() {
                    Some(b) if b > 0 => b as usize,
                    _ => self.slot_bytes,
                };
                self.free.push_back(Slot {
                    id: slot,
                    offset,
                    cap,
                });
            }
            Msg::Ack { seq } => {
                if seq != self.acked {
                    return Err(MergeError::protocol(
                        &self.merger,
                        format!("ack of block {seq}, expected {}", self.acked),
                    ));
                }
                self.acked += 1;
                self.acked_bytes += self.unacked.pop_front().unwrap_or(0);
            }
            Msg::Direct { align, path } => {
                self.align = u64::from(align);
                use std::os::unix::ffi::OsStrExt;
                // The path names the file in messages only: the file itself came with the
                // message, and no path a peer sends is ever opened here (a merger could
                // name any file this process may write).
                let path = std::path::Path::new(std::ffi::OsStr::from_bytes(&path));
                match self
                    .ep
                    .recv_file()
                    .and_then(|f| check_lent_file(f, &self.merger))
                {
                    Ok(f) => {
                        self.inserter = match self.in_place {
                            Some(InPlace::Pwrite | InPlace::Map) => None,
                            _ => PageInserter::for_file(&f).map(Arc::new),
                        };
                        self.helper = None;
                        self.direct = Some((f, path.to_path_buf()));
                    }
                    Err(e) => {
                        self.failed.get_or_insert(format!(
                            "cannot take the output {} to write in place: {e}",
                            path.display()
                        ));
                    }
                }
            }
            Msg::Policy {
                merger_checksums,
                shared,
            } => {
                self.merger_checksums = merger_checksums;
                self.shared = shared;
            }
            Msg::ByeAck => self.bye_acked = true,
            Msg::Fail { reason } => {
                self.failed.get_or_insert(reason);
            }
            other => {
                return Err(MergeError::protocol(
                    &self.merger,
                    format!("unexpected message {other:?}"),
                ))
            }
        }
        Ok(())
    }

    /// Handles every message already there.
    fn poll(&mut self) -> Result<()> {
        loop {
            match self.ep.try_recv(&mut self.rx) {
                Ok(Progress::Ready(_)) => self.absorb()?,
                Ok(Progress::WouldBlock) => return Ok(()),
                Err(e) => return Err(self.gone(e)),
            }
        }
    }

    /// Waits for one message and handles it.
    fn wait_one(&mut self) -> Result<()> {
        match self.ep.recv(&mut self.rx) {
            Ok(_) => self.absorb(),
            Err(e) => Err(self.gone(e)),
        }
    }

    fn gone(&self, e: accio::Error) -> MergeError {
        if let Some(reason) = &self.failed {
            return MergeError::Merger {
                merger: self.merger.clone(),
                reason: reason.clone(),
            };
        }
        if e.kind() == ErrorKind::PeerGone {
            MergeError::Merger {
                merger: self.merger.clone(),
                reason: format!(
                    "connection lost after {} of {} blocks were acknowledged: {e}",
                    self.acked, self.next_seq
                ),
            }
        } else {
            MergeError::Transport(e)
        }
    }

    /// Asks for slots up to the credit (one in use, the rest prefetched).
    fn request_more(&mut self) -> Result<()> {
        while self.free.len() as u32 + self.requested + self.in_use < self.credit {
            let bytes = if self.direct.is_some() { self.want } else { 0 };
            self.send(&Msg::Acquire { bytes })?;
            self.requested += 1;
            if self.direct.is_some() {
                self.asked.push_back(bytes);
            }
        }
        Ok(())
    }

    /// Writing in place: room for a block of `len` bytes, waiting for it if none is lent
    /// (back-pressure). Lent room too small for it goes back (a hole in the file); rooms
    /// asked for from now on fit blocks of this size.
    fn take_room(&mut self, len: usize) -> Result<Slot> {
        let (a, len) = (self.align, len as u64);
        let extent = a + len.div_ceil(a) * a;
        let fit = ((a + self.slot_bytes as u64) / extent).max(1);
        self.want = fit * extent - a;
        self.poll()?;
        self.check_failed()?;
        loop {
            while let Some(s) = self.free.pop_front() {
                if s.cap as u64 >= len {
                    self.in_use += 1;
                    self.request_more()?;
                    return Ok(s);
                }
                // Best effort: a failed release means the connection is gone (the next
                // wait says so), which frees the room too.
                let _ = self.send(&Msg::Release { slot: s.id });
            }
            self.request_more()?;
            self.wait_one()?;
            self.check_failed()?;
        }
    }

    /// A slot of the merger's (not writing in place), waiting for one with `block`.
    fn take_slot(&mut self, block: bool) -> Result<Option<Slot>> {
        self.poll()?;
        self.check_failed()?;
        loop {
            if let Some(s) = self.free.pop_front() {
                self.in_use += 1;
                if let Err(e) = self.prepare(s) {
                    self.release(s);
                    return Err(e);
                }
                // Keep the next slot coming while this one is filled.
                self.request_more()?;
                return Ok(Some(s));
            }
            self.request_more()?;
            if !block {
                return Ok(None);
            }
            self.wait_one()?;
            self.check_failed()?;
        }
    }

    fn view(&mut self, slot: Slot) -> Result<MemView> {
        if !self.maps.contains_key(&slot.offset) {
            // Keep only the mappings of slots we may still be granted; windows the merger
            // moved elsewhere are released with their mapping.
            if self.maps.len() > self.credit as usize {
                let keep: Vec<u64> = self
                    .free
                    .iter()
                    .chain(self.packing.as_ref().and_then(|pk| pk.slot.as_ref()))
                    .map(|s| s.offset)
                    .collect();
                self.maps.retain(|off, _| keep.contains(off));
            }
            let m = self.ep.map_remote(slot.offset, self.slot_bytes)?;
            self.maps.insert(slot.offset, m);
        }
        Ok((*self.maps[&slot.offset]).clone())
    }

    /// Makes `slot` writable here: maps it (shm, or room in the file) or sizes the staging
    /// buffer (tcp).
    fn prepare(&mut self, slot: Slot) -> Result<()> {
        if let Some((f, path)) = &self.direct {
            let m = map_room(f, slot.offset, slot.cap).map_err(|e| {
                MergeError::file(
                    format!(
                        "claiming {} bytes at {:#x} to write in place in",
                        slot.cap, slot.offset
                    ),
                    path,
                    e,
                )
            })?;
            self.rooms.insert(slot.id, m);
        } else if self.mapped {
            self.view(slot)?;
        } else if self.staging.len() != self.slot_bytes {
            self.staging = vec![0u8; self.slot_bytes];
        }
        Ok(())
    }

    /// The bytes of a prepared slot, or (`None`, writing in place) the staging buffer.
    fn slot_mut(&mut self, slot: Option<Slot>) -> &mut [u8] {
        let Some(slot) = slot else {
            if self.staging.len() != self.slot_bytes {
                self.staging = vec![0u8; self.slot_bytes];
            }
            return &mut self.staging[..];
        };
        if self.direct.is_some() {
            let m = &self.rooms[&slot.id];
            // SAFETY: the merger reserved this room of the file for us alone and writes
            // nothing there before our commit; the mapping lives in `self.rooms`, which the
            // returned borrow of `self` keeps unchanged.
            unsafe { std::slice::from_raw_parts_mut(m.ptr, m.len) }
        } else if self.mapped {
            let v = &self.maps[&slot.offset];
            // SAFETY: the merger granted this slot to us alone and does not read it before
            // our commit; the mapping lives in `self.maps`, which the returned borrow of
            // `self` keeps unchanged. A merger that broke the protocol could race these
            // bytes, which would corrupt only the block it then writes.
            unsafe { std::slice::from_raw_parts_mut(v.as_ptr(), v.len()) }
        } else {
            &mut self.staging[..]
        }
    }

    /// Sends the first `len` bytes of `slot` as block `kind`, `data` being those bytes
    /// where the caller has them elsewhere (tcp sends them from there), `crc` their
    /// checksum where the caller computed it.
    fn commit_slot(
        &mut self,
        slot: Slot,
        len: usize,
        kind: BlockKind,
        data: Option<&[u8]>,
        crc: Option<u32>,
    ) -> Result<u64> {
        // In place, while the merger has a CPU of its own, it checksums the block from the
        // file beside this producer's next copy.
        let crc = crc.or_else(|| match data {
            _ if self.direct.is_some() && self.merger_checksums => None,
            Some(d) => Some(crate::checksum::crc32c(d)),
            None => Some(crate::checksum::crc32c(&self.slot_mut(Some(slot))[..len])),
        });
        if !self.mapped && len > 0 {
            let src = match data {
                Some(d) => d,
                None => &self.staging[..len],
            };
            self.ep.vwrite_to(src, slot.offset, RmaFlags::ASYNC)?;
            // The data must be in the merger's window before it sees the commit.
            let mark = self.ep.fence_mark()?;
            self.ep.fence_wait(mark)?;
        }
        // Unmapped before the commit: after it, nothing here can change the block.
        self.rooms.remove(&slot.id);
        let seq = self.next_seq;
        self.send(&Msg::Commit {
            slot: slot.id,
            seq,
            len: len as u64,
            crc,
            kind: kind.code(),
        })?;
        self.next_seq += 1;
        self.in_use -= 1;
        self.unacked.push_back(len as u64);
        if self.direct.is_some() {
            // What the block left of its room is still ours, before every other room.
            if let Some((shift, cap)) = room_rest(self.align, slot.cap as u64, len as u64) {
                self.free.push_front(Slot {
                    id: slot.id,
                    offset: slot.offset + shift,
                    cap: cap as usize,
                });
            }
        }
        // The block is committed whatever happens next; a broken connection shows at the
        // next call.
        let _ = self.request_more();
        Ok(seq)
    }

    /// Writing in place: commits the first `len` bytes of the staging buffer as one block.
    fn commit_staged(&mut self, len: usize, kind: BlockKind) -> Result<u64> {
        let staged = std::mem::take(&mut self.staging);
        let r = self.write_block_in_place(&staged[..len], kind);
        self.staging = staged;
        r
    }

    /// A buffer to fill, waiting for a free slot if none is (back-pressure). Writing in
    /// place it is a staging buffer of this process's, written into the file once at
    /// commit, where room of the block's real size waits then.
    pub fn buffer(&mut self) -> Result<Buffer<'_>> {
        self.flush_records()?;
        let slot = if self.direct.is_some() {
            self.poll()?;
            self.check_failed()?;
            None
        } else {
            self.take_slot(true)?
        };
        Ok(Buffer {
            p: self,
            slot,
            done: false,
        })
    }

    /// A buffer if a slot is free now; [`Progress::WouldBlock`] otherwise (a slot has been
    /// asked for: try again later). Writing in place: a buffer while room in the file is
    /// lent (the commit waits only if the block needs more room than that).
    pub fn try_buffer(&mut self) -> Result<Progress<Buffer<'_>>> {
        self.flush_records()?;
        let slot = if self.direct.is_some() {
            self.poll()?;
            self.check_failed()?;
            if self.free.is_empty() {
                self.request_more()?;
                return Ok(Progress::WouldBlock);
            }
            None
        } else {
            match self.take_slot(false)? {
                Some(slot) => Some(slot),
                None => return Ok(Progress::WouldBlock),
            }
        };
        Ok(Progress::Ready(Buffer {
            p: self,
            slot,
            done: false,
        }))
    }

    /// Writes `data` as one block (one copy into the merger's slot on shm; sent from `data`
    /// on tcp). Returns its sequence number.
    pub fn write_block(&mut self, data: &[u8]) -> Result<u64> {
        self.write_block_kind(data, BlockKind::Raw)
    }

    /// Writes a block that lives in GPU memory (seed 004's producers on the card): copied
    /// through pinned staging chunks straight into the buffer [`Producer::buffer`] lends
    /// (the merger's pages on shm), the copy engine filling the next chunk while the CPU
    /// moves this one, then committed as [`Producer::write_block`] commits, with the same
    /// checksum and container format. While this producer copies its next block, the
    /// merger writes the last one into the file. Returns its sequence number.
    ///
    /// `src` is checked by the driver ([`accio_device::device_range`]); a pointer from C,
    /// Python or another library becomes one that way. Work that writes `src` must be
    /// complete: the copies run on a stream of their own, ordered after nothing of the
    /// caller's (synchronize that stream, or call [`accio_device::synchronize`]).
    ///
    /// # Errors
    ///
    /// [`MergeError::TooLarge`] for a block larger than a buffer; [`MergeError::Device`]
    /// when there is no GPU code, driver or GPU, or a copy fails; the errors of
    /// [`Producer::buffer`] and [`Buffer::commit`].
    pub fn write_device(&mut self, src: &accio_device::DeviceRange) -> Result<u64> {
        self.write_device_kind(src, BlockKind::Raw)
    }

    /// Makes the pinned staging of [`Producer::write_device`] for GPU `ordinal` now rather
    /// than at the first block: a producer that times its blocks, or must not stall on its
    /// first, pays the milliseconds of pinned allocation up front.
    ///
    /// # Errors
    ///
    /// [`MergeError::Device`] when there is no GPU code, driver or GPU.
    pub fn prepare_device(&mut self, ordinal: u32) -> Result<()> {
        if self.stager.as_ref().is_none_or(|s| s.ordinal() != ordinal) {
            self.stager = Some(accio_device::Stager::new(ordinal)?);
        }
        Ok(())
    }

    /// [`Producer::write_device`] with a block kind.
    pub fn write_device_kind(
        &mut self,
        src: &accio_device::DeviceRange,
        kind: BlockKind,
    ) -> Result<u64> {
        let len = src.len();
        if len > self.slot_bytes {
            return Err(MergeError::TooLarge {
                what: "device block",
                len,
                limit: self.slot_bytes,
            });
        }
        let mut stager = match self.stager.take() {
            Some(s) if s.ordinal() == src.ordinal() => s,
            _ => accio_device::Stager::new(src.ordinal())?,
        };
        let r = (|| {
            let mut b = self.buffer()?;
            stager.to_host(src, &mut b.as_mut_slice()[..len])?;
            b.commit_kind(len, kind)
        })();
        self.stager = Some(stager);
        r
    }

    /// [`Producer::write_block`] with a block kind.
    pub fn write_block_kind(&mut self, data: &[u8], kind: BlockKind) -> Result<u64> {
        self.flush_records()?;
        if data.len() > self.slot_bytes {
            return Err(MergeError::TooLarge {
                what: "block",
                len: data.len(),
                limit: self.slot_bytes,
            });
        }
        if self.direct.is_some() && self.in_place != Some(InPlace::Map) {
            return self.write_block_in_place(data, kind);
        }
        let slot = if self.direct.is_some() {
            let room = self.take_room(data.len())?;
            if let Err(e) = self.prepare(room) {
                self.release(room);
                return Err(e);
            }
            room
        } else {
            self.take_slot(true)?.expect("blocking take")
        };
        let r = if self.direct.is_some() || self.mapped {
            accio::copy_slice(&mut self.slot_mut(Some(slot))[..data.len()], data);
            self.commit_slot(slot, data.len(), kind, Some(data), None)
        } else {
            self.commit_slot(slot, data.len(), kind, Some(data), None)
        };
        if r.is_err() {
            self.release(slot);
        }
        r
    }

    /// A whole block from `data`, written in place into room in the file: one copy, no
    /// page cleared first (a page faulted in through a mapping is). How is
    /// [`InPlace::auto`]'s choice (`crate::insert` has the measurements); where inserting
    /// fails, with `pwrite`, then and from then on.
    fn write_block_in_place(&mut self, data: &[u8], kind: BlockKind) -> Result<u64> {
        let slot = self.take_room(data.len())?;
        let how = self
            .in_place
            .unwrap_or_else(|| InPlace::auto(self.shared, data.len()));
        let crc = match self.write_in_place(how, data, slot.offset) {
            Ok(crc) => crc,
            Err(e) => {
                let (_, path) = self.direct.as_ref().expect("direct");
                let at = format!(
                    "writing {} bytes at {:#x} in place in",
                    data.len(),
                    slot.offset
                );
                let e = MergeError::file(at, path, e);
                self.release(slot);
                return Err(e);
            }
        };
        let r = self.commit_slot(slot, data.len(), kind, Some(data), crc);
        if r.is_err() {
            self.release(slot);
        }
        r
    }

    /// Writes `data` at `offset` of the output file `how` says, counting the blocks
    /// whose pages were inserted. Returns the block's checksum where it was computed on
    /// the way (by a helper beside the `pwrite`, or here while the helper inserts: see
    /// `crate::helper`).
    fn write_in_place(
        &mut self,
        how: InPlace,
        data: &[u8],
        offset: u64,
    ) -> std::io::Result<Option<u32>> {
        use std::os::unix::fs::FileExt;
        let (f, _) = self.direct.as_ref().expect("direct");
        let (mut crc, mut insert_failed) = (None, false);
        // (all written, some pages inserted)
        let (written, inserted) = match (how, &self.inserter) {
            _ if data.is_empty() => (false, false),
            (InPlace::Insert, Some(ins)) => {
                let ok = ins.write_at(f, data, offset).is_ok();
                insert_failed = !ok;
                (ok, ok)
            }
            // Where the merger checksums and no pages can be inserted, a helper has nothing
            // to take.
            (InPlace::Split, ins)
                if data.len() >= HELP_MIN && (ins.is_some() || !self.merger_checksums) =>
            {
                if self.helper.is_none() {
                    self.helper = Helper::start(ins.as_ref().map(|i| (i.clone(), f))).ok();
                }
                match &self.helper {
                    Some(h) if h.inserts() => {
                        let (inserted, c) = h.write_split(f, data, offset)?;
                        (crc, insert_failed) = (Some(c), !inserted);
                        (true, inserted)
                    }
                    Some(h) => {
                        crc = Some(h.write_checksummed(f, data, offset)?);
                        (true, false)
                    }
                    None => (false, false),
                }
            }
            _ => (false, false),
        };
        self.inserted += u64::from(inserted);
        if insert_failed {
            // Not again: a failure here is a page already there, a full file system or
            // no userfaultfd after all; `pwrite` writes over what was inserted.
            self.inserter = None;
            self.helper = None;
        }
        if !written {
            f.write_all_at(data, offset)?;
        }
        Ok(crc)
    }

    /// Appends one record; records are packed into buffers (each a `u32` length and the
    /// bytes) and a full buffer is committed as a [`BlockKind::Records`] block.
    pub fn write_record(&mut self, record: &[u8]) -> Result<()> {
        // Checked: a length from C (`SIZE_MAX`) must not wrap into a small `need`, and the
        // length prefix is a `u32`.
        let need = match record.len().checked_add(4) {
            Some(n) if n <= self.slot_bytes && u32::try_from(record.len()).is_ok() => n,
            _ => {
                return Err(MergeError::TooLarge {
                    what: "record (with its 4-byte length)",
                    len: record.len().saturating_add(4),
                    limit: self.slot_bytes.min((u32::MAX as usize).saturating_add(4)),
                })
            }
        };
        if let Some(pk) = self.packing {
            if pk.len + need > self.slot_bytes {
                self.flush_records()?;
            }
        }
        let mut pk = match self.packing {
            Some(pk) => pk,
            None if self.direct.is_some() => Packing { slot: None, len: 0 },
            None => {
                let slot = self.take_slot(true)?;
                Packing { slot, len: 0 }
            }
        };
        let s = self.slot_mut(pk.slot);
        s[pk.len..pk.len + 4].copy_from_slice(&(record.len() as u32).to_le_bytes());
        accio::copy_slice(&mut s[pk.len + 4..pk.len + need], record);
        pk.len += need;
        self.packing = Some(pk);
        Ok(())
    }

    /// Commits the records packed so far (no-op without any).
    pub fn flush_records(&mut self) -> Result<()> {
        match self.packing.take() {
            Some(Packing {
                slot: Some(slot),
                len,
            }) => {
                if let Err(e) = self.commit_slot(slot, len, BlockKind::Records, None, None) {
                    self.release(slot);
                    return Err(e);
                }
            }
            Some(Packing { slot: None, len }) => {
                self.commit_staged(len, BlockKind::Records)?;
            }
            None => {}
        }
        Ok(())
    }

    fn release(&mut self, slot: Slot) {
        self.in_use = self.in_use.saturating_sub(1);
        self.rooms.remove(&slot.id);
        // Best effort: a failed release means the connection is gone, which frees it too.
        let _ = self.send(&Msg::Release { slot: slot.id });
    }

    /// Commits pending records and waits until the merger has acknowledged every block
    /// committed so far (they are in the file; synced with `SyncPolicy::EveryCommit`).
    /// Returns the number of blocks acknowledged.
    pub fn wait_acked(&mut self) -> Result<u64> {
        self.flush_records()?;
        while self.acked < self.next_seq {
            self.check_failed()?;
            self.wait_one()?;
        }
        self.check_failed()?;
        Ok(self.acked)
    }

    /// Commits pending records, waits until every block is acknowledged, and says goodbye.
    pub fn finish(mut self) -> Result<ProducerSummary> {
        self.flush_records()?;
        self.send(&Msg::Bye)?;
        while !self.bye_acked {
            self.check_failed()?;
            self.wait_one()?;
        }
        self.check_failed()?;
        if self.acked != self.next_seq {
            return Err(MergeError::protocol(
                &self.merger,
                format!(
                    "said goodbye with {} of {} blocks acknowledged",
                    self.acked, self.next_seq
                ),
            ));
        }
        Ok(ProducerSummary {
            id: self.id,
            blocks: self.acked,
            bytes: self.acked_bytes,
            inserted_blocks: self.inserted,
        })
    }

    /// Writes one Arrow record batch as one block (an Arrow IPC stream: schema, batch,
    /// end marker), serialized straight into the buffer.
    #[cfg(feature = "arrow")]
    pub fn write_batch(&mut self, batch: &arrow_array::RecordBatch) -> Result<u64> {
        let mut buf = self.buffer()?;
        let cap = buf.capacity();
        let mut w = SliceWriter {
            buf: buf.as_mut_slice(),
            len: 0,
            wanted: 0,
        };
        let res = (|| {
            let mut sw = arrow_ipc::writer::StreamWriter::try_new(&mut w, &batch.schema())?;
            sw.write(batch)?;
            sw.finish()
        })();
        let (len, wanted) = (w.len, w.wanted);
        match res {
            Ok(()) if wanted <= cap => buf.commit_kind(len, BlockKind::ArrowIpc),
            _ if wanted > cap => Err(MergeError::TooLarge {
                what: "arrow batch (as an IPC stream)",
                len: wanted,
                limit: cap,
            }),
            Err(e) => Err(MergeError::Sink {
                path: "<producer>".into(),
                reason: format!("cannot encode the arrow batch: {e}"),
            }),
            Ok(()) => unreachable!("covered above"),
        }
    }
}

/// How `write_block` writes a block in place (`ACCIO_MERGE_IN_PLACE`, for measurements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InPlace {
    /// One `pwrite`.
    Pwrite,
    /// Inserting pages (tmpfs; `pwrite` where that fails).
    Insert,
    /// Blocks of at least [`HELP_MIN`] with a helper thread (`crate::helper`): on tmpfs a
    /// `pwrite` of the first part beside the helper inserting the rest (`pwrite` where
    /// inserting fails), elsewhere a `pwrite` beside the helper checksumming. Smaller:
    /// one `pwrite`.
    Split,
    /// Through a shared mapping of the room, claimed and faulted in first.
    Map,
}

impl InPlace {
    /// The choice for a block of `len` bytes: beside other producers, insert its pages (the
    /// producers' copies then run in parallel instead of taking turns on the inode lock);
    /// alone, share a large block's work with a helper thread where there is a CPU for
    /// each; else one `pwrite`. Inserting applies on tmpfs only: elsewhere `Insert` is a
    /// `pwrite` and `Split` a `pwrite` beside the helper checksumming.
    fn auto(shared: bool, len: usize) -> InPlace {
        static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let cpus =
            *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        if shared {
            InPlace::Insert
        } else if len >= HELP_MIN && cpus > 1 {
            InPlace::Split
        } else {
            InPlace::Pwrite
        }
    }

    fn from_env() -> Result<Option<InPlace>> {
        match std::env::var("ACCIO_MERGE_IN_PLACE").as_deref() {
            Err(_) | Ok("" | "auto") => Ok(None),
            Ok("pwrite") => Ok(Some(InPlace::Pwrite)),
            Ok("insert") => Ok(Some(InPlace::Insert)),
            Ok("split") => Ok(Some(InPlace::Split)),
            Ok("map") => Ok(Some(InPlace::Map)),
            Ok(other) => Err(MergeError::Config(format!(
                "ACCIO_MERGE_IN_PLACE={other}: expected auto, pwrite, insert, split or map"
            ))),
        }
    }
}

/// A producer's shared mapping of its room in the output file: claims `len` bytes of
/// `file` at `offset` (`fallocate`: a full disk fails here, not as a `SIGBUS` on a store),
/// maps them shared and writable, and faults the pages in with one call
/// (`MACHINE_NOTES.md` trait 10: faults, not copies, set the price).
fn map_room(file: &std::fs::File, offset: u64, len: usize) -> std::io::Result<Mapping> {
    use std::os::fd::AsRawFd;
    let off =
        libc::off_t::try_from(offset).map_err(|_| std::io::Error::other("offset beyond off_t"))?;
    // SAFETY: a plain system call on our own descriptor; `fallocate` only allocates.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, off, len as libc::off_t) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let m = Mapping::new(file, offset, len)?;
    // MADV_POPULATE_WRITE (Linux 5.14); on older kernels the stores fault page by page.
    // SAFETY: advice on the mapping just made; failure changes nothing.
    unsafe { libc::madvise(m.ptr.cast(), len, libc::MADV_POPULATE_WRITE) };
    Ok(m)
}

/// `io::Write` into a fixed slice that counts what did not fit (to report the size).
#[cfg(feature = "arrow")]
struct SliceWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
    wanted: usize,
}

#[cfg(feature = "arrow")]
impl std::io::Write for SliceWriter<'_> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.wanted += data.len();
        if self.wanted > self.buf.len() {
            // Keep counting; the caller reports the size and drops the buffer.
            return Ok(data.len());
        }
        self.buf[self.len..self.len + data.len()].copy_from_slice(data);
        self.len += data.len();
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A slot lent to the producer: fill it, then [`Buffer::commit`]. Dropped uncommitted, it
/// goes back to the merger unused.
pub struct Buffer<'a> {
    p: &'a mut Producer,
    /// `None` writing in place: the producer's staging buffer.
    slot: Option<Slot>,
    done: bool,
}

impl std::fmt::Debug for Buffer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("slot", &self.slot.map(|s| s.id))
            .field("capacity", &self.p.slot_bytes)
            .finish()
    }
}

impl Buffer<'_> {
    /// Bytes the buffer holds.
    pub fn capacity(&self) -> usize {
        self.p.slot_bytes
    }

    /// The whole buffer, to write into. On shm these are the merger's pages.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let slot = self.slot;
        self.p.slot_mut(slot)
    }

    /// Commits the first `len` bytes as a raw block; returns its sequence number.
    pub fn commit(self, len: usize) -> Result<u64> {
        self.commit_kind(len, BlockKind::Raw)
    }

    /// Commits the first `len` bytes as a block of `kind`.
    pub fn commit_kind(mut self, len: usize, kind: BlockKind) -> Result<u64> {
        if len > self.p.slot_bytes {
            return Err(MergeError::TooLarge {
                what: "commit",
                len,
                limit: self.p.slot_bytes,
            });
        }
        self.done = true;
        let Some(slot) = self.slot else {
            return self.p.commit_staged(len, kind);
        };
        let r = self.p.commit_slot(slot, len, kind, None, None);
        if r.is_err() {
            self.p.release(slot);
        }
        r
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        if let (false, Some(slot)) = (self.done, self.slot) {
            self.p.release(slot);
        }
    }
}
