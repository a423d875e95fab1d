//! The merging file service: a merger writing one container file, producers writing blocks
//! into it, and a reader of the result.

use std::ffi::c_char;
use std::ptr::NonNull;
use std::time::Duration;

use accio_merge::container::ContainerReader;
use accio_merge::{Buffer, ContainerSink, Merger, Producer, ProducerOptions, SyncPolicy};

use crate::{
    accio_status, bytes_mut, c_str, destroy, guard, into_handle, need, obj, obj_mut, put, put_text,
    take, CResult, Failure, Object,
};

/// `accio_merger_options.sync`: `fsync` the file once, at close (the default).
pub const ACCIO_SYNC_ON_CLOSE: u32 = 0;
/// `accio_merger_options.sync`: never `fsync` (page-cache speed).
pub const ACCIO_SYNC_NEVER: u32 = 1;
/// `accio_merger_options.sync`: `fdatasync` before acknowledging commits, and at close.
pub const ACCIO_SYNC_EVERY_COMMIT: u32 = 2;

/// A running merger: listens for producers and writes their blocks into one container
/// file (from `accio_merger_create`).
pub struct accio_merger {
    _opaque: [u8; 0],
}

/// One producer's connection to a merger (from `accio_producer_connect`). Use it from one
/// thread at a time; open one per thread (they are cheap).
pub struct accio_producer {
    _opaque: [u8; 0],
}

/// An open container file (from `accio_reader_open`).
pub struct accio_reader {
    _opaque: [u8; 0],
}

/// Settings of `accio_merger_create`. Zero in a field means its default, so a
/// zero-initialized struct (or a NULL pointer) gives every default.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct accio_merger_options {
    /// Memory for slots in bytes (default 256 MiB); at least one slot.
    pub budget: usize,
    /// Bytes per slot, a multiple of 4096 (default 2 MiB): the largest block a producer
    /// can commit.
    pub slot_bytes: usize,
    /// Slots one producer may hold at once (default 2).
    pub credit: u32,
    /// When to make the file durable: `ACCIO_SYNC_ON_CLOSE` (0), `ACCIO_SYNC_NEVER`,
    /// `ACCIO_SYNC_EVERY_COMMIT`.
    pub sync: u32,
}

/// Settings of `accio_producer_connect`. Zero-initialized (or NULL): the defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct accio_producer_options {
    /// How long to wait for the merger to accept, in ms (0: 10 s; negative: forever).
    pub timeout_ms: i64,
    /// Non-zero: ask for producer id `id` (ids must be unique); zero: the merger picks.
    pub use_id: u32,
    /// The id asked for when `use_id` is non-zero.
    pub id: u32,
}

/// What a closed merger wrote (`accio_merger_close`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct accio_merge_summary {
    /// Blocks in the file.
    pub blocks: u64,
    /// Their payload bytes.
    pub payload_bytes: u64,
    /// Size of the file.
    pub file_bytes: u64,
    /// Producers that finished normally.
    pub producers_finished: u64,
    /// Producers lost (died or hung up without finishing).
    pub producers_lost: u64,
}

/// Counters of a running merger (`accio_merger_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct accio_merger_counters {
    /// Producers connected now (said hello, not finished or lost).
    pub active: u64,
    /// Producers that finished normally.
    pub finished: u64,
    /// Producers lost (died, or hung up without finishing).
    pub lost: u64,
    /// Blocks written.
    pub blocks: u64,
    /// Payload bytes written.
    pub bytes: u64,
    /// Slot windows registered now.
    pub slots: u64,
    /// Most slot windows registered at once.
    pub peak_slots: u64,
}

/// What a finished producer wrote (`accio_producer_finish`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct accio_producer_summary {
    /// Its id in the file.
    pub id: u32,
    /// Blocks acknowledged (in the file).
    pub blocks: u64,
    /// Payload bytes acknowledged.
    pub bytes: u64,
}

/// What `accio_reader_verify` found.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct accio_verification {
    /// Good blocks.
    pub blocks: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Distinct producers.
    pub producers: u64,
    /// Problems that keep the file from being whole (0: closed, every checksum matches,
    /// every producer's sequence runs 0, 1, 2, ... without gaps).
    pub problems: u64,
}

/// One block of a container file (`accio_reader_block`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct accio_block_info {
    /// The producer that wrote it.
    pub producer: u32,
    /// Its kind: 0 raw bytes, 1 packed records (`u32` length + bytes each), 2 Arrow IPC.
    pub kind: u32,
    /// The producer's sequence number (0, 1, 2, ...).
    pub seq: u64,
    /// Payload bytes.
    pub len: u64,
}

pub(crate) struct MergerObj(Merger);

impl Object for MergerObj {
    const MAGIC: u64 = 0x6d72_6772_6163_6334;
    const NAME: &'static str = "accio_merger";
    type Opaque = accio_merger;
}

/// A producer and the buffer it lent out, if any. The buffer borrows the producer, which
/// lives in its own heap block (never moved while the buffer lives); the buffer is always
/// dropped first.
pub(crate) struct ProducerObj {
    buf: Option<Buffer<'static>>,
    producer: NonNull<Producer>,
}

impl Object for ProducerObj {
    const MAGIC: u64 = 0x7072_6f64_6163_6335;
    const NAME: &'static str = "accio_producer";
    type Opaque = accio_producer;
}

impl ProducerObj {
    /// The producer, refused while a buffer is out (the buffer holds it).
    fn get(&mut self, op: &str) -> CResult<&mut Producer> {
        if self.buf.is_some() {
            return Err(Failure::invalid(
                op,
                "the producer has a buffer out: commit it (accio_producer_commit) or give it \
                 back (accio_producer_release) first",
            ));
        }
        // SAFETY: the producer is owned by self and alive; no buffer borrows it now, and
        // the &mut self borrow makes this the only reference.
        Ok(unsafe { &mut *self.producer.as_ptr() })
    }

    /// Gives the producer back, dropping an outstanding buffer (its slot returns unused).
    fn into_producer(mut self) -> Box<Producer> {
        self.buf = None;
        let p = self.producer;
        std::mem::forget(self);
        // SAFETY: the pointer came from Box::into_raw in accio_producer_connect, no buffer
        // borrows it any more, and forgetting self keeps Drop from freeing it twice.
        unsafe { Box::from_raw(p.as_ptr()) }
    }
}

impl Drop for ProducerObj {
    fn drop(&mut self) {
        self.buf = None;
        // SAFETY: as in into_producer; Drop runs once.
        drop(unsafe { Box::from_raw(self.producer.as_ptr()) });
    }
}

pub(crate) struct ReaderObj(ContainerReader);

impl Object for ReaderObj {
    const MAGIC: u64 = 0x7265_6164_6163_6336;
    const NAME: &'static str = "accio_reader";
    type Opaque = accio_reader;
}

// ---- merger ----------------------------------------------------------------------------

/// Creates (or truncates) the container file `path`, listens on `addr` (`"shm://NAME"` or
/// `"tcp://HOST:PORT"`) and starts merging; stores the merger in `*out`. `opts` may be
/// NULL (defaults). Lost producers and sink failures are reported on stderr.
///
/// # Safety
/// `addr` and `path` are NUL-terminated strings; `opts` is NULL or readable; `out` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn accio_merger_create(
    addr: *const c_char,
    path: *const c_char,
    opts: *const accio_merger_options,
    out: *mut *mut accio_merger,
) -> accio_status {
    const OP: &str = "accio_merger_create";
    guard(OP, || {
        need(OP, "out", out)?;
        // SAFETY: the caller's contract.
        let (addr, path) = unsafe { (c_str(OP, "addr", addr)?, c_str(OP, "path", path)?) };
        // SAFETY: NULL or readable by the caller's contract.
        let o = unsafe { opts.as_ref() }.copied().unwrap_or_default();
        let mut b = Merger::builder();
        if o.budget != 0 {
            b = b.budget(o.budget);
        }
        if o.slot_bytes != 0 {
            b = b.slot_bytes(o.slot_bytes);
        }
        if o.credit != 0 {
            b = b.credit(o.credit);
        }
        b = b.sync(match o.sync {
            ACCIO_SYNC_ON_CLOSE => SyncPolicy::OnClose,
            ACCIO_SYNC_NEVER => SyncPolicy::Never,
            ACCIO_SYNC_EVERY_COMMIT => SyncPolicy::EveryCommit,
            s => return Err(Failure::invalid(OP, format!("unknown sync policy {s}"))),
        });
        let sink = ContainerSink::create(path, Default::default())?;
        let m = b.listen(addr, Box::new(sink))?;
        // SAFETY: out checked non-NULL above; writable by contract.
        unsafe { put(OP, "out", out, into_handle(MergerObj(m))) }
    })
}

/// Copies the address producers connect to (for `tcp://…:0`, with the real port) into
/// `buf` (`cap` bytes, NUL included) and its length into `*len` (may be NULL);
/// `ACCIO_BUFFER_TOO_SMALL` (length stored) when it does not fit.
///
/// # Safety
/// `merger` is a live merger; `buf` is writable for `cap` bytes; `len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn accio_merger_addr(
    merger: *const accio_merger,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> accio_status {
    const OP: &str = "accio_merger_addr";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let m = unsafe { obj::<MergerObj>(OP, merger)? };
        let text = m.0.addr().to_string();
        // SAFETY: the caller's contract.
        unsafe { put_text(OP, &text, buf, cap, len) }
    })
}

/// Stores the merger's current counters in `*stats`.
///
/// # Safety
/// `merger` is a live merger; `stats` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_merger_stats(
    merger: *const accio_merger,
    stats: *mut accio_merger_counters,
) -> accio_status {
    const OP: &str = "accio_merger_stats";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let m = unsafe { obj::<MergerObj>(OP, merger)? };
        let s = m.0.stats();
        let out = accio_merger_counters {
            active: s.active as u64,
            finished: s.finished as u64,
            lost: s.lost as u64,
            blocks: s.blocks,
            bytes: s.bytes,
            slots: s.slots as u64,
            peak_slots: s.peak_slots as u64,
        };
        // SAFETY: the caller's contract.
        unsafe { put(OP, "stats", stats, out) }
    })
}

/// Waits at most `timeout_ms` (negative: forever) until `producers` producers have
/// finished or been lost.
///
/// # Safety
/// `merger` is a live merger.
#[no_mangle]
pub unsafe extern "C" fn accio_merger_wait_done(
    merger: *const accio_merger,
    producers: usize,
    timeout_ms: i64,
) -> accio_status {
    const OP: &str = "accio_merger_wait_done";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let m = unsafe { obj::<MergerObj>(OP, merger)? };
        let t = crate::timeout(timeout_ms).unwrap_or(Duration::MAX);
        m.0.wait_done(producers, t)?;
        Ok(())
    })
}

/// Stops accepting producers, waits for the connected ones to finish (or die), closes the
/// file (index, trailer, `fsync` unless `ACCIO_SYNC_NEVER`) and frees the merger, even when
/// it fails. Stores what was written in `*summary` (may be NULL).
///
/// # Safety
/// `merger` is a live merger, not used again; `summary` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn accio_merger_close(
    merger: *mut accio_merger,
    summary: *mut accio_merge_summary,
) -> accio_status {
    const OP: &str = "accio_merger_close";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let m = unsafe { take::<MergerObj>(OP, merger)? };
        let s = m.0.close()?;
        if !summary.is_null() {
            let out = accio_merge_summary {
                blocks: s.sink.blocks,
                payload_bytes: s.sink.payload_bytes,
                file_bytes: s.sink.file_bytes,
                producers_finished: s.stats.finished as u64,
                producers_lost: s.stats.lost as u64,
            };
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { summary.write(out) };
        }
        Ok(())
    })
}

/// Stops the merger without closing the file (NULL is ignored): like a crash, the file
/// keeps every acknowledged block but no index (`accio recover` restores it). Use
/// `accio_merger_close` to finish normally.
///
/// # Safety
/// `merger` is NULL or a live merger, not used again.
#[no_mangle]
pub unsafe extern "C" fn accio_merger_destroy(merger: *mut accio_merger) -> accio_status {
    // SAFETY: the caller's contract.
    unsafe { destroy::<MergerObj>("accio_merger_destroy", merger) }
}

// ---- producer --------------------------------------------------------------------------

/// Connects a producer to the merger at `addr` and stores it in `*out`. `opts` may be
/// NULL (defaults).
///
/// # Safety
/// `addr` is a NUL-terminated string; `opts` is NULL or readable; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_producer_connect(
    addr: *const c_char,
    opts: *const accio_producer_options,
    out: *mut *mut accio_producer,
) -> accio_status {
    const OP: &str = "accio_producer_connect";
    guard(OP, || {
        need(OP, "out", out)?;
        // SAFETY: the caller's contract.
        let addr = unsafe { c_str(OP, "addr", addr)? };
        // SAFETY: NULL or readable by the caller's contract.
        let o = unsafe { opts.as_ref() }.copied().unwrap_or_default();
        let mut po = ProducerOptions::default();
        match o.timeout_ms {
            0 => {}
            t if t < 0 => po.timeout = Duration::from_secs(365 * 24 * 3600),
            t => po.timeout = Duration::from_millis(t as u64),
        }
        if o.use_id != 0 {
            po.id = Some(o.id);
        }
        let p = Producer::connect_with(addr, po)?;
        let handle = into_handle(ProducerObj {
            buf: None,
            producer: NonNull::from(Box::leak(Box::new(p))),
        });
        // SAFETY: out checked non-NULL above; writable by contract.
        unsafe { put(OP, "out", out, handle) }
    })
}

/// Stores the producer's id (as recorded in the file) in `*id`.
///
/// # Safety
/// `producer` is a live producer used by this thread only; `id` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_producer_id(
    producer: *mut accio_producer,
    id: *mut u32,
) -> accio_status {
    const OP: &str = "accio_producer_id";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let p = unsafe { obj_mut::<ProducerObj>(OP, producer)? };
        // SAFETY: the producer is alive; reading its id does not touch the buffer.
        let v = unsafe { p.producer.as_ref() }.id();
        // SAFETY: the caller's contract.
        unsafe { put(OP, "id", id, v) }
    })
}

/// Lends the producer a buffer to fill, waiting for a free slot if none is
/// (back-pressure): stores its start in `*data` and its size in `*capacity` (may be NULL).
/// On shm through the merger's slots these are the merger's own pages (no copy); where
/// producers write the file in place, a buffer of the producer's, written into the file
/// once at commit, into room of the block's size. Then call `accio_producer_commit`
/// (or `accio_producer_release`); other producer calls are refused meanwhile.
///
/// # Safety
/// `producer` is a live producer used by this thread only; `data` is writable;
/// `capacity` is NULL or writable. The memory is valid until the commit or release.
#[no_mangle]
pub unsafe extern "C" fn accio_producer_buffer(
    producer: *mut accio_producer,
    data: *mut *mut u8,
    capacity: *mut usize,
) -> accio_status {
    const OP: &str = "accio_producer_buffer";
    guard(OP, || {
        need(OP, "data", data)?;
        // SAFETY: the caller's contract.
        let p = unsafe { obj_mut::<ProducerObj>(OP, producer)? };
        if p.buf.is_some() {
            return Err(Failure::invalid(
                OP,
                "the producer already has a buffer out",
            ));
        }
        // SAFETY: the producer lives in its own heap block until ProducerObj is dropped,
        // which drops the buffer first; while the buffer is out, every other access to the
        // producer is refused (ProducerObj::get), so the buffer's borrow is the only one.
        let prod: &'static mut Producer = unsafe { &mut *p.producer.as_ptr() };
        let mut buf = prod.buffer()?;
        let slice = buf.as_mut_slice();
        let (ptr, cap) = (slice.as_mut_ptr(), slice.len());
        p.buf = Some(buf);
        // SAFETY: data checked non-NULL above; both writable by contract.
        unsafe {
            data.write(ptr);
            if !capacity.is_null() {
                capacity.write(cap);
            }
        }
        Ok(())
    })
}

/// Commits the first `len` bytes of the lent buffer as one block and stores its sequence
/// number in `*seq` (may be NULL). The buffer is gone afterwards, even on failure.
///
/// # Safety
/// `producer` is a live producer used by this thread only; `seq` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn accio_producer_commit(
    producer: *mut accio_producer,
    len: usize,
    seq: *mut u64,
) -> accio_status {
    const OP: &str = "accio_producer_commit";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let p = unsafe { obj_mut::<ProducerObj>(OP, producer)? };
        let buf = p.buf.take().ok_or_else(|| {
            Failure::invalid(OP, "no buffer is out (call accio_producer_buffer first)")
        })?;
        let s = buf.commit(len)?;
        if !seq.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { seq.write(s) };
        }
        Ok(())
    })
}

/// Gives the lent buffer back uncommitted (no-op without one).
///
/// # Safety
/// `producer` is a live producer used by this thread only.
#[no_mangle]
pub unsafe extern "C" fn accio_producer_release(producer: *mut accio_producer) -> accio_status {
    const OP: &str = "accio_producer_release";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let p = unsafe { obj_mut::<ProducerObj>(OP, producer)? };
        p.buf = None;
        Ok(())
    })
}

/// Writes `len` bytes at `data` as one block (one copy into the merger's slot on shm) and
/// stores its sequence number in `*seq` (may be NULL). At most the merger's slot size.
///
/// # Safety
/// `producer` is a live producer used by this thread only; `data` is readable for `len`
/// bytes; `seq` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn accio_producer_write(
    producer: *mut accio_producer,
    data: *const u8,
    len: usize,
    seq: *mut u64,
) -> accio_status {
    const OP: &str = "accio_producer_write";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let p = unsafe { obj_mut::<ProducerObj>(OP, producer)? };
        // SAFETY: the caller's contract.
        let data = unsafe { crate::bytes(OP, "data", "len", data, len)? };
        let s = p.get(OP)?.write_block(data)?;
        if !seq.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { seq.write(s) };
        }
        Ok(())
    })
}

/// Writes `len` bytes of CUDA device memory at device address `data` (a `CUdeviceptr`, or a
/// pointer from `cudaMalloc`) as one block: copied through pinned staging into the
/// merger's slot, the copy engine overlapping the host's copy; the block, its checksum and
/// the file as for `accio_producer_write`. Stores its sequence number in `*seq` (may be
/// NULL). The address is checked with the driver first: host memory, memory of no
/// allocation, or a range past its allocation fail with `ACCIO_INVALID_ARGUMENT` (naming
/// the cause), a library built without CUDA or a machine without driver or GPU with
/// `ACCIO_UNSUPPORTED`. Work queued on the GPU by the caller must be complete (synchronize
/// its stream first).
///
/// # Safety
/// `producer` is a live producer used by this thread only; `seq` is NULL or writable.
/// `data` need not be readable by the host: the driver checks it.
#[no_mangle]
pub unsafe extern "C" fn accio_producer_write_device(
    producer: *mut accio_producer,
    data: u64,
    len: usize,
    seq: *mut u64,
) -> accio_status {
    const OP: &str = "accio_producer_write_device";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let p = unsafe { obj_mut::<ProducerObj>(OP, producer)? };
        let s = if len == 0 {
            p.get(OP)?.write_block(&[])?
        } else {
            let range =
                accio_device::device_range(data, len).map_err(accio_merge::MergeError::from)?;
            p.get(OP)?.write_device(&range)?
        };
        if !seq.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { seq.write(s) };
        }
        Ok(())
    })
}

/// Appends one record of `len` bytes; records are packed into buffers (each a `u32`
/// length and the bytes) and a full buffer is committed as one block (kind 1). A record
/// longer than the merger's slot size less 4 bytes fails with `ACCIO_TOO_LARGE`; a `len`
/// above `PTRDIFF_MAX` (`SIZE_MAX`, say) with `ACCIO_INVALID_ARGUMENT`.
///
/// # Safety
/// `producer` is a live producer used by this thread only; `data` is readable for `len`
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn accio_producer_write_record(
    producer: *mut accio_producer,
    data: *const u8,
    len: usize,
) -> accio_status {
    const OP: &str = "accio_producer_write_record";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let p = unsafe { obj_mut::<ProducerObj>(OP, producer)? };
        // SAFETY: the caller's contract.
        let data = unsafe { crate::bytes(OP, "data", "len", data, len)? };
        Ok(p.get(OP)?.write_record(data)?)
    })
}

/// Commits pending records and waits until the merger acknowledged every block committed
/// so far (they are in the file); stores their number in `*acked` (may be NULL).
///
/// # Safety
/// `producer` is a live producer used by this thread only; `acked` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn accio_producer_wait_acked(
    producer: *mut accio_producer,
    acked: *mut u64,
) -> accio_status {
    const OP: &str = "accio_producer_wait_acked";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let p = unsafe { obj_mut::<ProducerObj>(OP, producer)? };
        let n = p.get(OP)?.wait_acked()?;
        if !acked.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { acked.write(n) };
        }
        Ok(())
    })
}

/// Commits pending records, waits until every block is in the file, says goodbye and
/// frees the producer, even when it fails (a lent buffer is given back uncommitted).
/// Stores what it wrote in `*summary` (may be NULL).
///
/// # Safety
/// `producer` is a live producer used by this thread only, not used again; `summary` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn accio_producer_finish(
    producer: *mut accio_producer,
    summary: *mut accio_producer_summary,
) -> accio_status {
    const OP: &str = "accio_producer_finish";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let p = unsafe { take::<ProducerObj>(OP, producer)? };
        let s = p.into_producer().finish()?;
        if !summary.is_null() {
            let out = accio_producer_summary {
                id: s.id,
                blocks: s.blocks,
                bytes: s.bytes,
            };
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { summary.write(out) };
        }
        Ok(())
    })
}

/// Drops the producer without finishing (NULL is ignored): the merger sees it as lost,
/// keeps its committed blocks and reclaims its slots.
///
/// # Safety
/// `producer` is NULL or a live producer, not used again.
#[no_mangle]
pub unsafe extern "C" fn accio_producer_destroy(producer: *mut accio_producer) -> accio_status {
    // SAFETY: the caller's contract.
    unsafe { destroy::<ProducerObj>("accio_producer_destroy", producer) }
}

// ---- reader ----------------------------------------------------------------------------

/// Opens the container file `path` (using its index, or scanning a file that was not
/// closed) and stores the reader in `*out`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_reader_open(
    path: *const c_char,
    out: *mut *mut accio_reader,
) -> accio_status {
    const OP: &str = "accio_reader_open";
    guard(OP, || {
        need(OP, "out", out)?;
        // SAFETY: the caller's contract.
        let path = unsafe { c_str(OP, "path", path)? };
        let r = ContainerReader::open(path)?;
        // SAFETY: out checked non-NULL above; writable by contract.
        unsafe { put(OP, "out", out, into_handle(ReaderObj(r))) }
    })
}

/// Stores the number of blocks in `*count`.
///
/// # Safety
/// `reader` is a live reader; `count` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_reader_block_count(
    reader: *const accio_reader,
    count: *mut usize,
) -> accio_status {
    const OP: &str = "accio_reader_block_count";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let r = unsafe { obj::<ReaderObj>(OP, reader)? };
        // SAFETY: the caller's contract.
        unsafe { put(OP, "count", count, r.0.blocks().len()) }
    })
}

fn block_at<'a>(
    op: &str,
    r: &'a ContainerReader,
    index: usize,
) -> CResult<&'a accio_merge::container::IndexEntry> {
    r.blocks().get(index).ok_or_else(|| {
        Failure::invalid(
            op,
            format!(
                "block {index} of {}: the file has {} blocks",
                r.path().display(),
                r.blocks().len()
            ),
        )
    })
}

/// Stores the producer, kind, sequence number and length of block `index` (0-based, in
/// file order) in `*info`.
///
/// # Safety
/// `reader` is a live reader; `info` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_reader_block(
    reader: *const accio_reader,
    index: usize,
    info: *mut accio_block_info,
) -> accio_status {
    const OP: &str = "accio_reader_block";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let r = unsafe { obj::<ReaderObj>(OP, reader)? };
        let h = &block_at(OP, &r.0, index)?.header;
        let v = accio_block_info {
            producer: h.producer,
            kind: u32::from(h.kind.code()),
            seq: h.seq,
            len: h.len,
        };
        // SAFETY: the caller's contract.
        unsafe { put(OP, "info", info, v) }
    })
}

/// Reads the payload of block `index` into `buf` (`cap` bytes), checking its CRC, and
/// stores its length in `*len`. Too small a buffer stores the length and fails with
/// `ACCIO_BUFFER_TOO_SMALL`.
///
/// # Safety
/// `reader` is a live reader; `buf` is writable for `cap` bytes; `len` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_reader_read(
    reader: *const accio_reader,
    index: usize,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> accio_status {
    const OP: &str = "accio_reader_read";
    guard(OP, || {
        need(OP, "len", len)?;
        // SAFETY: the caller's contract.
        let r = unsafe { obj::<ReaderObj>(OP, reader)? };
        // SAFETY: the caller's contract.
        let dst = unsafe { bytes_mut(OP, "buf", "cap", buf, cap)? };
        let b = block_at(OP, &r.0, index)?;
        let n = usize::try_from(b.header.len).unwrap_or(usize::MAX);
        // SAFETY: len checked non-NULL above; writable by contract.
        unsafe { put(OP, "len", len, n)? };
        if n > dst.len() {
            return Err(Failure::new(
                accio_status::ACCIO_BUFFER_TOO_SMALL,
                format!(
                    "{OP}: block {index} of {} has {n} bytes, the buffer {cap}",
                    r.0.path().display()
                ),
            ));
        }
        let payload = r.0.read_payload(b)?;
        dst[..n].copy_from_slice(&payload);
        Ok(())
    })
}

/// Checks the whole file (every checksum, the index, each producer's sequence) and stores
/// what it found in `*out`. A file with problems still returns `ACCIO_OK` with
/// `out->problems` > 0; the first problem is then in `accio_last_error_message`.
///
/// # Safety
/// `reader` is a live reader; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_reader_verify(
    reader: *const accio_reader,
    out: *mut accio_verification,
) -> accio_status {
    const OP: &str = "accio_reader_verify";
    guard(OP, || {
        need(OP, "out", out)?;
        // SAFETY: the caller's contract.
        let r = unsafe { obj::<ReaderObj>(OP, reader)? };
        let v = r.0.verify()?;
        if let Some(first) = v.problems.first() {
            crate::set_last_error(&format!("{}: {first}", r.0.path().display()));
        }
        let s = accio_verification {
            blocks: v.blocks,
            bytes: v.bytes,
            producers: v.producers.len() as u64,
            problems: v.problems.len() as u64,
        };
        // SAFETY: out checked non-NULL above; writable by contract.
        unsafe { put(OP, "out", out, s) }
    })
}

/// Closes the file and frees the reader (NULL is ignored).
///
/// # Safety
/// `reader` is NULL or a live reader, not used again.
#[no_mangle]
pub unsafe extern "C" fn accio_reader_destroy(reader: *mut accio_reader) -> accio_status {
    // SAFETY: the caller's contract.
    unsafe { destroy::<ReaderObj>("accio_reader_destroy", reader) }
}
