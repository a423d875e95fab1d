//! A single-producer single-consumer message ring in shared memory.
//!
//! Layout: a 4 KiB control page (`head` and `tail` byte counters and two futex words, each
//! on its own 128-byte pair of cache lines) followed by `cap` bytes of data (`cap` a power
//! of two). Messages are split into records of at most `max_chunk` payload bytes; each
//! record starts on a 64-byte boundary with a 16-byte header:
//!
//! ```text
//! u32 chunk_len | u32 stamp: (record line number + 1) << 3 | flags (FIRST, MORE, PAD)
//!               | u64 total message length (on FIRST)
//! ```
//!
//! Payloads of up to 48 bytes sit in the header's cache line (an 8-byte message moves as
//! one line); longer payloads start on the next line, so they are 64-byte aligned.
//! A record never wraps: when it does not fit before the end, a PAD record fills the gap.
//!
//! Publication: the producer writes a record, then stores its stamp with Release; the
//! consumer polls the stamp at its `tail` with Acquire. The stamp names the record's
//! position (its line number, modulo 2^29: a stale stamp from an earlier lap differs
//! unless the ring holds 2^29 lines, 32 GiB), so zeroed or old memory never reads as
//! published. A small message therefore costs the consumer one cache-line transfer (the
//! header line, which also carries up to 48 payload bytes) where polling `head` first
//! cost two dependent ones: the host moves this VM's vCPUs apart for seconds at a time
//! (`MACHINE_NOTES.md`, trait 7), and then every transfer costs several times more. The
//! consumer releases space with a Release store of `tail`, which the producer caches and
//! re-reads only when it runs out of room; `head` is still stored (for a reader of the
//! control page) but nobody waits on it.
//!
//! The consumer checks every header it reads (lengths, flags, bounds) before copying, so a
//! corrupted ring — a buggy or malicious peer — is a protocol error, not a wild copy.

use std::time::Duration;

use accio_core::copy_bytes;

use crate::stores::{ShmStores, Stores};
use crate::sync::{self, fence, AtomicU32, AtomicU64, Ordering};

/// Bytes of the control page in front of the data.
pub const CTL_BYTES: usize = 4096;
// 128 bytes apart, not 64: x86 cores fetch cache lines in adjacent pairs (the L2 spatial
// prefetcher), so the producer's `head` next to the consumer's `tail` would bounce between
// the cores as one, and every store by one side would cost the other a miss.
const HEAD: usize = 0;
const TAIL: usize = 128;
const CONSUMER_WAIT: usize = 256;
const PRODUCER_WAIT: usize = 384;

const HDR: usize = 16;
const INLINE_MAX: usize = 48;
const LINE: usize = 64;

const FIRST: u32 = 1;
const MORE: u32 = 2;
const PAD: u32 = 4;
/// Bits of the stamp word that hold flags; the rest is the line number + 1.
const FLAG_BITS: u32 = 3;
/// Offset of the stamp word in a record header.
const STAMP: usize = 4;
/// Largest ring: its lines must number fewer than the stamp's 2^29 line numbers, so that a
/// stale stamp of an earlier lap never reads as current (1 GiB keeps a wide margin).
pub const MAX_CAP: usize = 1 << 30;

/// The stamp a record starting at ring position `pos` carries, without flags.
fn stamp_of(pos: u64) -> u32 {
    ((pos / LINE as u64) as u32).wrapping_add(1) << FLAG_BITS
}

/// Size of the record that carries `len` payload bytes.
pub fn record_bytes(len: usize) -> usize {
    let off = if len <= INLINE_MAX { HDR } else { LINE };
    (off + len).div_ceil(LINE) * LINE
}

fn payload_offset(len: usize) -> usize {
    if len <= INLINE_MAX {
        HDR
    } else {
        LINE
    }
}

/// Raw view of one ring inside a mapping. Copyable; the mapping's owner keeps it alive.
#[derive(Clone, Copy, Debug)]
pub struct RingMem {
    base: *mut u8,
    cap: usize,
}

// SAFETY: the ring is shared memory designed for concurrent use by one producer and one
// consumer; all shared words are accessed atomically and data regions are handed over by
// release/acquire on the counters.
unsafe impl Send for RingMem {}
// SAFETY: see above.
unsafe impl Sync for RingMem {}

impl RingMem {
    /// Total bytes a ring with `cap` data bytes occupies.
    pub fn footprint(cap: usize) -> usize {
        #[cfg(not(loom))]
        let extra = 0;
        // Under loom, one access-tracking cell per data line follows the data.
        // and one model atomic per line for the stamps (the header's own word otherwise).
        #[cfg(loom)]
        let extra = (cap / LINE
            * (std::mem::size_of::<sync::LineCell>() + std::mem::size_of::<AtomicU32>()))
        .next_multiple_of(LINE);
        CTL_BYTES + cap + extra
    }

    /// Constructs the model atomics and line cells of a ring at `base` (loom builds only).
    ///
    /// # Safety
    /// `base` must point at `footprint(cap)` writable bytes, 64-byte aligned, that stay
    /// allocated while the ring is used; `cap` a power of two of at least one line.
    #[cfg(loom)]
    pub unsafe fn place(base: *mut u8, cap: usize) {
        // SAFETY: every offset lies inside the footprint and is 64-byte aligned.
        unsafe {
            for at in [HEAD, TAIL] {
                sync::place_u64(base.add(at), 0);
            }
            for at in [CONSUMER_WAIT, PRODUCER_WAIT] {
                sync::place_u32(base.add(at), 0);
            }
            sync::place_cells(base.add(CTL_BYTES + cap), cap / LINE);
            let stamps =
                base.add(CTL_BYTES + cap + cap / LINE * std::mem::size_of::<sync::LineCell>());
            for line in 0..cap / LINE {
                sync::place_u32(stamps.add(line * std::mem::size_of::<AtomicU32>()), 0);
            }
        }
    }

    /// A ring at `base` (page aligned, `footprint(cap)` bytes, zeroed or previously used
    /// as the same ring).
    ///
    /// # Safety
    /// `base` must point at `footprint(cap)` bytes that stay mapped while the ring or any
    /// copy of it is used; `cap` must be a power of two.
    pub unsafe fn new(base: *mut u8, cap: usize) -> RingMem {
        debug_assert!(cap.is_power_of_two());
        RingMem { base, cap }
    }

    fn word64(&self, at: usize) -> &AtomicU64 {
        // SAFETY: `at` is one of the 64-byte aligned control slots inside the control page
        // (under loom, `place` put a model atomic there).
        unsafe { sync::u64_at(self.base.add(at)) }
    }

    fn word32(&self, at: usize) -> &AtomicU32 {
        // SAFETY: as for `word64`.
        unsafe { sync::u32_at(self.base.add(at)) }
    }

    /// Reports an access to `len` bytes of ring data at `at` to loom, which checks that it
    /// happens after the last conflicting one. Nothing at all in normal builds.
    #[inline(always)]
    fn touch(&self, at: *const u8, len: usize, write: bool) {
        #[cfg(not(loom))]
        let _ = (at, len, write);
        #[cfg(loom)]
        {
            let data = self.base as usize + CTL_BYTES;
            let first = (at as usize - data) / LINE;
            let end = (at as usize - data + len).div_ceil(LINE);
            for line in first..end {
                // SAFETY: `place` constructed `cap / LINE` cells after the data, and `at`
                // and `len` lie inside the data area.
                let cell = unsafe {
                    &*self
                        .base
                        .add(CTL_BYTES + self.cap)
                        .cast::<sync::LineCell>()
                        .add(line)
                };
                if write {
                    cell.with_mut(|_| ());
                } else {
                    cell.with(|_| ());
                }
            }
        }
    }

    /// The stamp word of the record at ring position `pos` (64-byte aligned).
    fn stamp(&self, pos: u64) -> &AtomicU32 {
        let line = pos as usize & (self.cap - 1);
        #[cfg(not(loom))]
        // SAFETY: `line` is a 64-byte aligned offset inside the data area; the stamp is
        // the 4-byte aligned word at STAMP in the header there.
        let w = unsafe { sync::u32_at(self.base.add(CTL_BYTES + line + STAMP)) };
        #[cfg(loom)]
        // SAFETY: `place` put `cap / LINE` model atomics after the line cells.
        let w = unsafe {
            sync::u32_at(self.base.add(
                CTL_BYTES
                    + self.cap
                    + self.cap / LINE * std::mem::size_of::<sync::LineCell>()
                    + line / LINE * std::mem::size_of::<AtomicU32>(),
            ))
        };
        w
    }

    fn data(&self, pos: u64) -> *mut u8 {
        // SAFETY: the masked position is inside the data area.
        unsafe { self.base.add(CTL_BYTES + (pos as usize & (self.cap - 1))) }
    }

    /// The futex word the consumer sleeps on (waiting for data).
    pub fn consumer_wait(&self) -> &AtomicU32 {
        self.word32(CONSUMER_WAIT)
    }

    /// The futex word the producer sleeps on (waiting for room).
    pub fn producer_wait(&self) -> &AtomicU32 {
        self.word32(PRODUCER_WAIT)
    }
}

/// Wakes the sleeper on `word` if it announced itself. Pairs with [`announce_sleep`]: a
/// Dekker handshake, each side's store ordered before its load of the other's word. The
/// waker's half of that ordering is a fence after its store, unless the sleeper gives it
/// (`light`: the sleeper's process runs a barrier on the waker's threads when it announces
/// itself, [`sync::fence_everyone`], and the waker's process receives them).
///
/// Only the consumer's wake-up after a pop goes light ([`Consumer::set_light_wake`]): its
/// fence waited for the released space's store and slowed the consumer of a stream of
/// small messages, which is where such a stream is limited (8 B: 0.157 to 0.22 GB/s, 64 B
/// 1.1 to 1.43, 4 KiB 49 to 53, one-way latency unchanged). A producer that skipped its
/// fence after a push started polling for the answer while its record's store was still
/// on its way, and a one-way 8 B message took 0.080 us instead of 0.075.
fn wake(word: &AtomicU32, light: bool) {
    if light {
        sync::compiler_fence_seq_cst();
    } else {
        fence(Ordering::SeqCst);
    }
    if word.load(Ordering::Relaxed) != 0 {
        word.store(0, Ordering::Relaxed);
        sync::futex_wake(word);
    }
}

/// Announces that the caller is about to sleep on `word`; the caller must re-check its
/// condition afterwards and only then sleep (the Dekker pattern with [`wake`]). `everyone`:
/// the waker may skip its fence (a producer waiting for room, woken by a consumer's pop),
/// so the barrier runs on its threads too.
fn announce_sleep(word: &AtomicU32, everyone: bool) {
    word.store(1, Ordering::Relaxed);
    if everyone {
        sync::fence_everyone();
    } else {
        fence(Ordering::SeqCst);
    }
}

/// One sleep of a waiter on `word` (a ring's [`RingMem::consumer_wait`] or
/// [`RingMem::producer_wait`]): announces itself, re-checks `ready`, and sleeps at most
/// `tick` only if still not ready. Returns `ready()` as of the end; the other side's
/// push or pop wakes a sleeper that announced itself, so no wake-up is lost. `room`: the
/// producer waits for room, and the consumer that frees it may wake without a fence
/// ([`announce_sleep`]).
pub fn sleep_once(
    word: &AtomicU32,
    mut ready: impl FnMut() -> bool,
    tick: Duration,
    room: bool,
) -> bool {
    announce_sleep(word, room);
    if ready() {
        word.store(0, Ordering::Relaxed);
        return true;
    }
    sync::futex_wait(word, 1, tick);
    word.store(0, Ordering::Relaxed);
    ready()
}

/// The producing end (one per ring, used under the endpoint's send lock).
#[derive(Debug)]
pub struct Producer {
    ring: RingMem,
    head: u64,
    tail: u64,
    max_chunk: usize,
    stores: Stores,
}

impl Producer {
    /// The producing end of `ring`, records carrying at most `max_chunk` bytes.
    pub fn new(ring: RingMem, max_chunk: usize) -> Producer {
        let head = ring.word64(HEAD).load(Ordering::Relaxed);
        let tail = ring.word64(TAIL).load(Ordering::Acquire);
        Producer {
            ring,
            head,
            tail,
            max_chunk,
            stores: Stores::default(),
        }
    }

    /// How payloads are stored into the ring from now on.
    pub fn set_stores(&mut self, mode: ShmStores) {
        self.stores = Stores::new(mode);
    }

    /// Largest payload of one record.
    pub fn max_chunk(&self) -> usize {
        self.max_chunk
    }

    /// The ring.
    pub fn ring(&self) -> &RingMem {
        &self.ring
    }

    fn need(&self, rec: usize) -> usize {
        let off = self.head as usize & (self.ring.cap - 1);
        let contiguous = self.ring.cap - off;
        if rec > contiguous {
            contiguous + rec
        } else {
            rec
        }
    }

    fn free(&mut self, refresh: bool) -> usize {
        if refresh {
            self.tail = self.ring.word64(TAIL).load(Ordering::Acquire);
        }
        self.ring.cap - (self.head - self.tail) as usize
    }

    /// True if a record with `len` payload bytes fits now.
    pub fn fits(&mut self, len: usize) -> bool {
        let need = self.need(record_bytes(len));
        need <= self.free(false) || need <= self.free(true)
    }

    /// Writes one record if it fits (see [`Producer::fits`]) and publishes it. `first` and
    /// `more` mark message boundaries; `total` is the message length (read on `first`).
    /// Returns false (writing nothing) if there is no room.
    pub fn try_push(&mut self, chunk: &[u8], first: bool, more: bool, total: u64) -> bool {
        debug_assert!(chunk.len() <= self.max_chunk);
        let rec = record_bytes(chunk.len());
        if !self.fits(chunk.len()) {
            return false;
        }
        let off = self.head as usize & (self.ring.cap - 1);
        if rec > self.ring.cap - off {
            let at = self.ring.data(self.head);
            self.ring.touch(at, HDR, true);
            // SAFETY: `off` is 64-byte aligned and at least one line remains before the
            // end of the data area, which the consumer has released (checked by `fits`).
            unsafe { write_header(at, 0, 0) };
            self.ring
                .stamp(self.head)
                .store(stamp_of(self.head) | PAD, Ordering::Release);
            self.head += (self.ring.cap - off) as u64;
        }
        let flags = if first { FIRST } else { 0 } | if more { MORE } else { 0 };
        let at = self.ring.data(self.head);
        self.ring.touch(at, rec, true);
        // SAFETY: the record's `rec` bytes at `at` are free (checked above) and do not wrap;
        // `chunk` is caller memory, distinct from the ring.
        unsafe {
            write_header(at, chunk.len() as u32, total);
            self.stores.copy(
                at.add(payload_offset(chunk.len())),
                chunk.as_ptr(),
                chunk.len(),
            );
        }
        // Publishes the record: the consumer acquires this word before it reads the rest.
        self.ring
            .stamp(self.head)
            .store(stamp_of(self.head) | flags, Ordering::Release);
        self.head += rec as u64;
        self.ring.word64(HEAD).store(self.head, Ordering::Release);
        wake(self.ring.consumer_wait(), false);
        true
    }
}

/// Writes a header's length and total; the stamp between them is stored last, atomically.
///
/// # Safety
/// `at` must be 16 writable bytes inside a free part of the ring.
unsafe fn write_header(at: *mut u8, len: u32, total: u64) {
    // SAFETY: forwarded; `at` is 64-byte aligned so the u32/u64 writes are aligned.
    unsafe {
        (at as *mut u32).write(len);
        (at.add(8) as *mut u64).write(total);
    }
}

/// A record read from the ring, valid until [`Consumer::pop`].
#[derive(Debug, Clone, Copy)]
pub struct Record {
    /// Payload length.
    pub len: usize,
    /// First record of a message.
    pub first: bool,
    /// More records of the same message follow.
    pub more: bool,
    /// Message length (meaningful when `first`).
    pub total: u64,
    payload: *const u8,
    bytes: usize,
}

/// What is wrong with a record header the consumer read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptRecord(pub String);

/// The consuming end (one per ring, used under the endpoint's receive lock).
#[derive(Debug)]
pub struct Consumer {
    ring: RingMem,
    tail: u64,
    max_chunk: usize,
    light_wake: bool,
}

impl Consumer {
    /// The consuming end of `ring`.
    pub fn new(ring: RingMem, max_chunk: usize) -> Consumer {
        let tail = ring.word64(TAIL).load(Ordering::Relaxed);
        Consumer {
            ring,
            tail,
            max_chunk,
            light_wake: false,
        }
    }

    /// Wakes the producer after a pop without a fence of its own (see [`wake`]): only
    /// when the producer's process runs a barrier on this one's threads as it announces
    /// a sleep, and this one receives it.
    pub fn set_light_wake(&mut self, light: bool) {
        self.light_wake = light;
    }

    /// The ring.
    pub fn ring(&self) -> &RingMem {
        &self.ring
    }

    /// True if a record is available: the stamp at `tail` names `tail` (one load, of the
    /// line that holds the record itself).
    pub fn ready(&mut self) -> bool {
        self.published().is_some()
    }

    /// The flags of the record at `tail` if it is published. Acquire: pairs with the
    /// producer's Release store of the stamp, after its writes of the record.
    fn published(&self) -> Option<u32> {
        let w = self.ring.stamp(self.tail).load(Ordering::Acquire);
        let mask = (1u32 << FLAG_BITS) - 1;
        (w & !mask == stamp_of(self.tail)).then_some(w & mask)
    }

    /// The next record, if any, after checking its header.
    pub fn peek(&mut self) -> Result<Option<Record>, CorruptRecord> {
        loop {
            if !self.tail.is_multiple_of(LINE as u64) {
                return Err(CorruptRecord(format!(
                    "ring counter out of range (tail {})",
                    self.tail
                )));
            }
            let Some(flags) = self.published() else {
                return Ok(None);
            };
            let off = self.tail as usize & (self.ring.cap - 1);
            let contiguous = self.ring.cap - off;
            let at = self.ring.data(self.tail);
            self.ring.touch(at, HDR, false);
            // SAFETY: the producer published the record at `tail` (its stamp, acquired
            // above); `at` is 64-byte aligned.
            let (len, total) = unsafe {
                (
                    (at as *const u32).read() as usize,
                    (at.add(8) as *const u64).read(),
                )
            };
            if flags == PAD {
                self.tail += contiguous as u64;
                continue;
            }
            if flags & !(FIRST | MORE) != 0 {
                return Err(CorruptRecord(format!(
                    "record flags {flags:#x} are unknown"
                )));
            }
            if len > self.max_chunk {
                return Err(CorruptRecord(format!(
                    "record of {len} bytes exceeds the {}-byte chunk limit",
                    self.max_chunk
                )));
            }
            let bytes = record_bytes(len);
            if bytes > contiguous {
                return Err(CorruptRecord(format!(
                    "record of {len} bytes at {off:#x} runs past the published data"
                )));
            }
            // SAFETY: the payload lies inside the record, checked above.
            let payload = unsafe { at.add(payload_offset(len)) };
            return Ok(Some(Record {
                len,
                first: flags & FIRST != 0,
                more: flags & MORE != 0,
                total,
                payload,
                bytes,
            }));
        }
    }

    /// Copies the record's payload to `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for `rec.len` writes, and `rec` must be the record returned by
    /// the last `peek` (not yet popped).
    pub unsafe fn copy_out(&self, rec: &Record, dst: *mut u8) {
        self.ring.touch(rec.payload, rec.len, false);
        // SAFETY: forwarded; the payload is published and not reused until `pop`.
        unsafe { copy_bytes(dst, rec.payload, rec.len) }
    }

    /// Releases the record to the producer.
    pub fn pop(&mut self, rec: &Record) {
        self.tail += rec.bytes as u64;
        self.ring.word64(TAIL).store(self.tail, Ordering::Release);
        wake(self.ring.producer_wait(), self.light_wake);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    struct Mem(Vec<u64>);

    fn ring(cap: usize) -> (Mem, RingMem) {
        let mut m = Mem(vec![0u64; RingMem::footprint(cap) / 8]);
        // SAFETY: the vector has footprint(cap) bytes and outlives the ring in each test.
        let r = unsafe { RingMem::new(m.0.as_mut_ptr() as *mut u8, cap) };
        (m, r)
    }

    #[test]
    fn record_sizes_keep_lines_whole() {
        assert_eq!(record_bytes(0), 64);
        assert_eq!(record_bytes(48), 64);
        assert_eq!(record_bytes(49), 128);
        assert_eq!(record_bytes(64), 128);
        assert_eq!(record_bytes(65), 192);
    }

    /// Pushes 2000 messages of sizes up to `max_chunk` through a ring of `cap` bytes whose
    /// producer stores as `stores` says, popping when it is full; each arrives whole and in
    /// order.
    fn round_trip(cap: usize, max_chunk: usize, stores: ShmStores) {
        let (_m, r) = ring(cap);
        let mut p = Producer::new(r, max_chunk);
        p.set_stores(stores);
        let mut c = Consumer::new(r, max_chunk);
        let mut next_in = 0u32;
        let mut next_out = 0u32;
        for round in 0..2000usize {
            let len = (round * 37 * (max_chunk / 1024)) % (max_chunk + 1);
            let msg: Vec<u8> = (0..len).map(|i| (i as u32 ^ next_in) as u8).collect();
            while !p.try_push(&msg, true, false, len as u64) {
                let rec = c.peek().unwrap().expect("ring full means data is there");
                let mut out = vec![0u8; rec.len];
                // SAFETY: `out` has rec.len bytes.
                unsafe { c.copy_out(&rec, out.as_mut_ptr()) };
                assert!(rec.first && !rec.more);
                assert_eq!(rec.total as usize, rec.len);
                assert!(
                    out.iter()
                        .enumerate()
                        .all(|(i, &b)| b == (i as u32 ^ next_out) as u8),
                    "message {next_out} ({} bytes, stores {stores:?}) arrived changed",
                    rec.len
                );
                c.pop(&rec);
                next_out += 1;
            }
            next_in += 1;
        }
        while let Some(rec) = c.peek().unwrap() {
            c.pop(&rec);
            next_out += 1;
        }
        assert_eq!(next_in, next_out);
    }

    #[test]
    fn records_round_trip_across_wraps_in_order() {
        round_trip(4096, 1024, ShmStores::Auto);
    }

    #[test]
    fn large_records_round_trip_with_every_store_mode() {
        for stores in [ShmStores::Auto, ShmStores::Cached, ShmStores::Streaming] {
            round_trip(1 << 16, 16 << 10, stores);
        }
    }

    #[test]
    fn corrupt_header_is_reported_not_copied() {
        let (m, r) = ring(4096);
        let mut p = Producer::new(r, 1024);
        assert!(p.try_push(b"hello", true, false, 5));
        // Overwrite the length with something past the chunk limit.
        let base = m.0.as_ptr() as *mut u8;
        // SAFETY: the first record header lies at CTL_BYTES in the test buffer.
        unsafe { (base.add(CTL_BYTES) as *mut u32).write(1 << 30) };
        let mut c = Consumer::new(r, 1024);
        let e = c.peek().unwrap_err();
        assert!(e.0.contains("exceeds the 1024-byte chunk limit"), "{e:?}");
    }

    /// The consumer reads headers written by another process: whatever bytes and counters
    /// it finds, it must return records inside the ring or an error, never panic.
    #[test]
    fn random_ring_contents_never_escape_the_ring() {
        let cap = 8192;
        let (mut m, r) = ring(cap);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let lo = m.0.as_ptr() as usize + CTL_BYTES;
        for _ in 0..20_000 {
            for w in m.0.iter_mut() {
                *w = next();
            }
            // Counters: sometimes sane, sometimes wild.
            let tail = if next() % 2 == 0 {
                (next() % 1000) * 64
            } else {
                next()
            };
            let head = if next() % 2 == 0 {
                tail.wrapping_add(next() % (cap as u64 + 128))
            } else {
                next()
            };
            m.0[HEAD / 8] = head;
            m.0[TAIL / 8] = tail;
            // Random words rarely read as published: stamp the record at `tail` half the
            // time, with random flags, so that its random header gets checked.
            if next() % 2 == 0 && tail.is_multiple_of(LINE as u64) {
                let at = (CTL_BYTES + (tail as usize & (cap - 1)) + STAMP) / 4;
                let words = m.0.as_mut_ptr() as *mut u32;
                let w = stamp_of(tail) | (next() as u32 & ((1 << FLAG_BITS) - 1));
                // SAFETY: `at` indexes a u32 inside the test buffer.
                unsafe { words.add(at).write(w) };
            }
            let mut c = Consumer::new(r, 1024);
            for _ in 0..4 {
                match c.peek() {
                    Ok(Some(rec)) => {
                        let p = rec.payload as usize;
                        assert!(
                            p >= lo && p + rec.len <= lo + cap,
                            "record escapes the ring"
                        );
                        c.pop(&rec);
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }
}
