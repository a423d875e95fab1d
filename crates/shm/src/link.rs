//! The link segment: one memfd, created by the connecting side and shared at connect time,
//! that holds everything two shm endpoints share besides window memory.
//!
//! ```text
//! page 0        header: magic, version, geometry, a "closed" word per side
//! tables        one window table per side (`TABLE_SLOTS` entries of 32 bytes)
//! ring 0        side 0 (connector) -> side 1 (acceptor)
//! ring 1        side 1 -> side 0
//! ```
//!
//! Each side publishes its registered windows in its own table; the peer reads it to check
//! every RMA against offset, length and rights without a round trip. An entry is a small
//! seqlock: `state_gen` (generation << 1 | active) is written last with release ordering
//! and re-read by the reader after the fields, so a torn read is detected and retried.

use accio_core::{Access, WindowDesc, PAGE};

use crate::ring::RingMem;
use crate::sync::{self, AtomicBool, AtomicU32, AtomicU64, Ordering};

const MAGIC: u64 = u64::from_le_bytes(*b"ACCIOSHM");
const VERSION: u64 = 1;
/// Window slots per side: the most windows one endpoint can have registered at once.
pub const TABLE_SLOTS: usize = 4096;
const ENTRY: usize = 32;

/// Geometry of a link, agreed at connect time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Data bytes of each ring (power of two).
    pub ring_cap: usize,
    /// Largest record payload.
    pub max_chunk: usize,
}

impl Geometry {
    fn table_bytes() -> usize {
        (TABLE_SLOTS * ENTRY).div_ceil(PAGE) * PAGE
    }

    fn ring_offset(&self, ring: usize) -> usize {
        PAGE + 2 * Self::table_bytes() + ring * RingMem::footprint(self.ring_cap)
    }

    /// Total size of the segment.
    pub fn segment_bytes(&self) -> usize {
        self.ring_offset(2)
    }
}

/// Where side `side`'s closed word lives in the header page.
fn closed_offset(side: usize) -> usize {
    64 + 64 * side
}

/// Where side `side`'s CPU word lives in the header page: 1 + the CPU the side last found
/// itself waiting on (0: not known yet). Each word has a pair of cache lines of its own and
/// is stored only when its side's CPU changed, so reading the peer's costs a cache hit.
fn cpu_offset(side: usize) -> usize {
    256 + 128 * side
}

/// Where side `side`'s barrier word lives in the header page: 1 when the side's process
/// is registered for process-wide barriers (`membarrier(2)`, [`sync::fenced_by_peers`]):
/// it runs one on every running thread of the other side's process as it announces a
/// sleep, and receives the other side's. Written before the side's handshake message,
/// read after the peer's.
fn barrier_offset(side: usize) -> usize {
    512 + 128 * side
}

/// A mapped link segment (raw pointer; the owner keeps the mapping alive).
#[derive(Clone, Copy, Debug)]
pub struct Link {
    base: *mut u8,
    geo: Geometry,
}

// SAFETY: all shared words are atomics; see module docs.
unsafe impl Send for Link {}
// SAFETY: as above.
unsafe impl Sync for Link {}

impl Link {
    /// Initializes a fresh (zeroed) segment at `base`.
    ///
    /// # Safety
    /// `base` must point at `geo.segment_bytes()` zeroed bytes that stay mapped while the
    /// link is used.
    pub unsafe fn init(base: *mut u8, geo: Geometry) -> Link {
        let link = Link { base, geo };
        link.u64_at(8).store(VERSION, Ordering::Relaxed);
        link.u64_at(16)
            .store(geo.ring_cap as u64, Ordering::Relaxed);
        link.u64_at(24)
            .store(geo.max_chunk as u64, Ordering::Relaxed);
        link.u64_at(0).store(MAGIC, Ordering::Release);
        link
    }

    /// Opens a segment initialized by the peer, validating its header against `len`, the
    /// size of the mapping.
    ///
    /// # Safety
    /// `base` must point at `len` mapped bytes that stay mapped while the link is used.
    pub unsafe fn open(base: *mut u8, len: usize) -> Result<Link, String> {
        if len < PAGE {
            return Err(format!("link segment of {len} bytes is too small"));
        }
        let probe = Link {
            base,
            geo: Geometry {
                ring_cap: 0,
                max_chunk: 0,
            },
        };
        if probe.u64_at(0).load(Ordering::Acquire) != MAGIC {
            return Err("link segment has a bad magic number".into());
        }
        let version = probe.u64_at(8).load(Ordering::Relaxed);
        if version != VERSION {
            return Err(format!("link segment version {version} is not {VERSION}"));
        }
        let ring_cap = probe.u64_at(16).load(Ordering::Relaxed) as usize;
        let max_chunk = probe.u64_at(24).load(Ordering::Relaxed) as usize;
        if !ring_cap.is_power_of_two()
            || !(4 * PAGE..=crate::ring::MAX_CAP).contains(&ring_cap)
            || max_chunk == 0
            || max_chunk > ring_cap / 4
        {
            return Err(format!(
                "link geometry (ring {ring_cap}, chunk {max_chunk}) is invalid"
            ));
        }
        let geo = Geometry {
            ring_cap,
            max_chunk,
        };
        if geo.segment_bytes() > len {
            return Err(format!(
                "link segment of {len} bytes is smaller than its geometry needs ({})",
                geo.segment_bytes()
            ));
        }
        Ok(Link { base, geo })
    }

    /// A link for loom's models at `base`: the closed words and both rings are constructed
    /// (as model atomics); the header and the window tables are not, and must not be used.
    ///
    /// # Safety
    /// `base` must point at `geo.segment_bytes()` writable bytes, page aligned, that stay
    /// allocated while the link is used.
    #[cfg(loom)]
    pub unsafe fn place(base: *mut u8, geo: Geometry) -> Link {
        let link = Link { base, geo };
        for side in 0..2 {
            // SAFETY: the closed words and rings lie inside the segment, 64-byte aligned.
            unsafe {
                sync::place_u32(base.add(closed_offset(side)), 0);
                sync::place_u32(base.add(cpu_offset(side)), 0);
                sync::place_u32(base.add(barrier_offset(side)), 0);
                RingMem::place(base.add(geo.ring_offset(side)), geo.ring_cap);
            }
        }
        link
    }

    /// The geometry.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    fn u64_at(&self, at: usize) -> &AtomicU64 {
        // SAFETY: callers pass 8-aligned offsets inside the mapped segment.
        unsafe { sync::u64_at(self.base.add(at)) }
    }

    /// The word side `side` sets when it closes (also a futex word).
    pub fn closed(&self, side: usize) -> &AtomicU32 {
        // SAFETY: 64 and 128 are aligned offsets in the header page (under loom, `place`
        // put model atomics there).
        unsafe { sync::u32_at(self.base.add(closed_offset(side))) }
    }

    /// Side `side`'s barrier word (see [`barrier_offset`]).
    pub fn barrier(&self, side: usize) -> &AtomicU32 {
        // SAFETY: 512 and 640 are aligned offsets in the header page (under loom, `place`
        // put model atomics there).
        unsafe { sync::u32_at(self.base.add(barrier_offset(side))) }
    }

    /// Notes in side `side`'s barrier word whether this process takes part in
    /// process-wide barriers; before the side's handshake message. The process's first
    /// link waits up to 2 ms for its registration (microseconds in a process of one
    /// thread); a link made while it is still under way goes without.
    pub fn note_barrier(&self, side: usize) {
        let joined = sync::fenced_by_peers(std::time::Duration::from_millis(2));
        self.barrier(side).store(joined as u32, Ordering::Relaxed);
    }

    /// Whether side `side` may wake the other without fencing (see `ring::wake`): both
    /// processes take part in process-wide barriers. After the handshake.
    pub fn light_wake(&self, side: usize) -> bool {
        self.barrier(side).load(Ordering::Relaxed) == 1
            && self.barrier(1 - side).load(Ordering::Relaxed) == 1
    }

    /// Side `side`'s CPU word (see [`cpu_offset`]): a hint, read and written Relaxed.
    pub fn cpu(&self, side: usize) -> &AtomicU32 {
        // SAFETY: 256 and 384 are aligned offsets in the header page (under loom, `place`
        // put model atomics there).
        unsafe { sync::u32_at(self.base.add(cpu_offset(side))) }
    }

    /// Whether side `side` has closed. Relaxed: deciding that the peer is gone needs no
    /// ordering, and what the peer wrote before closing is read only after
    /// [`Link::last_look`], which acquires.
    pub fn is_closed(&self, side: usize) -> bool {
        self.closed(side).load(Ordering::Relaxed) != 0
    }

    /// Marks side `side` closed. The Release store publishes everything the side wrote
    /// before, its last messages included, to whoever acquires the word.
    pub fn mark_closed(&self, side: usize) {
        self.closed(side).store(1, Ordering::Release);
    }

    /// The last look at the ring by a receiver that found its peer, side `peer`, gone
    /// (through [`Link::is_closed`], or a [`Gone`] flag read set): returns `ready()`,
    /// evaluated so that it sees every record the peer published before
    /// [`Link::mark_closed`]. Two steps, each checked by the loom model
    /// `loom_last_message_before_close_is_not_lost`:
    ///
    /// - the Acquire fence pairs with [`Gone::set`]'s Release when another thread set the
    ///   flag, so this thread's load of the closed word cannot read an older value than
    ///   the one that thread saw (without it, loom finds a run where it reads 0);
    /// - the Acquire load of the closed word pairs with the peer's Release in
    ///   [`Link::mark_closed`], ordering the peer's ring writes before `ready()`.
    pub fn last_look(&self, peer: usize, ready: impl FnOnce() -> bool) -> bool {
        sync::fence(Ordering::Acquire);
        self.closed(peer).load(Ordering::Acquire);
        ready()
    }

    /// The ring on which side `side` sends.
    pub fn ring(&self, side: usize) -> RingMem {
        // SAFETY: the ring lies inside the segment (checked by `open`/sized by `init`).
        unsafe { RingMem::new(self.base.add(self.geo.ring_offset(side)), self.geo.ring_cap) }
    }

    /// The window table of side `side`.
    pub fn table(&self, side: usize) -> Table {
        Table {
            // SAFETY: tables lie after the header page, inside the segment.
            base: unsafe { self.base.add(PAGE + side * Geometry::table_bytes()) },
        }
    }
}

/// An endpoint's sticky "the peer is gone" flag, set by whichever of its threads finds
/// out first and read by all of them on every call.
#[derive(Debug)]
pub struct Gone(AtomicBool);

impl Gone {
    /// A flag not set.
    pub fn new() -> Gone {
        Gone(AtomicBool::new(false))
    }

    /// Sets the flag. Release, so that a thread that reads it set and then takes
    /// [`Link::last_look`] sees the peer's closed word as this thread saw it.
    pub fn set(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether the flag is set. Relaxed: a plain load on the hot path of every call;
    /// [`Link::last_look`] supplies the ordering where data depends on it.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl Default for Gone {
    fn default() -> Gone {
        Gone::new()
    }
}

/// One side's window table in the link segment.
#[derive(Clone, Copy, Debug)]
pub struct Table {
    base: *mut u8,
}

// SAFETY: entries are atomics.
unsafe impl Send for Table {}
// SAFETY: as above.
unsafe impl Sync for Table {}

/// A consistent snapshot of one active table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Slot index.
    pub slot: usize,
    /// `state_gen` value when read (identifies this registration).
    pub stamp: u64,
    /// The window.
    pub desc: WindowDesc,
    /// Whether it is device memory (a GPU's): reached through its driver, not mapped.
    pub device: bool,
}

/// The bit of an entry's access word that marks device memory (above the rights' bits).
const DEVICE_BIT: u64 = 1 << 32;

impl Table {
    fn word(&self, slot: usize, field: usize) -> &AtomicU64 {
        assert!(slot < TABLE_SLOTS);
        // SAFETY: slot < TABLE_SLOTS and field < 4, so the word lies inside the table.
        unsafe { sync::u64_at(self.base.add(slot * ENTRY + field * 8)) }
    }

    /// Current `state_gen` of `slot` (odd = active).
    pub fn stamp(&self, slot: usize) -> u64 {
        self.word(slot, 0).load(Ordering::Acquire)
    }

    /// Publishes `desc` in `slot` (owner side only), marked as device memory when
    /// `device`.
    pub fn publish(&self, slot: usize, desc: WindowDesc, device: bool) {
        let gen = self.word(slot, 0).load(Ordering::Relaxed) >> 1;
        self.word(slot, 1).store(desc.offset, Ordering::Relaxed);
        self.word(slot, 2).store(desc.len, Ordering::Relaxed);
        let kind = if device { DEVICE_BIT } else { 0 };
        self.word(slot, 3)
            .store(u64::from(desc.access.bits()) | kind, Ordering::Relaxed);
        self.word(slot, 0)
            .store(((gen + 1) << 1) | 1, Ordering::Release);
    }

    /// Withdraws `slot` (owner side only).
    pub fn retire(&self, slot: usize) {
        let gen = self.word(slot, 0).load(Ordering::Relaxed) >> 1;
        self.word(slot, 0).store((gen + 1) << 1, Ordering::Release);
    }

    /// A consistent snapshot of `slot` if it is active.
    pub fn read(&self, slot: usize) -> Option<Entry> {
        loop {
            let s1 = self.word(slot, 0).load(Ordering::Acquire);
            if s1 & 1 == 0 {
                return None;
            }
            let offset = self.word(slot, 1).load(Ordering::Relaxed);
            let len = self.word(slot, 2).load(Ordering::Relaxed);
            let access = self.word(slot, 3).load(Ordering::Relaxed);
            sync::fence(Ordering::Acquire);
            if self.word(slot, 0).load(Ordering::Relaxed) == s1 {
                let device = access & DEVICE_BIT != 0;
                let access = Access::from_bits(access as u8).unwrap_or(Access::NONE);
                return Some(Entry {
                    slot,
                    stamp: s1,
                    desc: WindowDesc {
                        offset,
                        len,
                        access,
                    },
                    device,
                });
            }
        }
    }

    /// Every active entry.
    pub fn active(&self) -> impl Iterator<Item = Entry> + '_ {
        (0..TABLE_SLOTS).filter_map(|s| self.read(s))
    }
}
