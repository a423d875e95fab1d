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

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use accio_core::{Access, WindowDesc, PAGE};

use crate::ring::RingMem;

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
            || ring_cap < 4 * PAGE
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

    /// The geometry.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    fn u64_at(&self, at: usize) -> &AtomicU64 {
        // SAFETY: callers pass 8-aligned offsets inside the mapped segment.
        unsafe { AtomicU64::from_ptr(self.base.add(at) as *mut u64) }
    }

    /// The word side `side` sets when it closes (also a futex word).
    pub fn closed(&self, side: usize) -> &AtomicU32 {
        // SAFETY: 64 and 128 are aligned offsets in the header page.
        unsafe { AtomicU32::from_ptr(self.base.add(64 + 64 * side) as *mut u32) }
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
}

impl Table {
    fn word(&self, slot: usize, field: usize) -> &AtomicU64 {
        assert!(slot < TABLE_SLOTS);
        // SAFETY: slot < TABLE_SLOTS and field < 4, so the word lies inside the table.
        unsafe { AtomicU64::from_ptr(self.base.add(slot * ENTRY + field * 8) as *mut u64) }
    }

    /// Current `state_gen` of `slot` (odd = active).
    pub fn stamp(&self, slot: usize) -> u64 {
        self.word(slot, 0).load(Ordering::Acquire)
    }

    /// Publishes `desc` in `slot` (owner side only).
    pub fn publish(&self, slot: usize, desc: WindowDesc) {
        let gen = self.word(slot, 0).load(Ordering::Relaxed) >> 1;
        self.word(slot, 1).store(desc.offset, Ordering::Relaxed);
        self.word(slot, 2).store(desc.len, Ordering::Relaxed);
        self.word(slot, 3)
            .store(u64::from(desc.access.bits()), Ordering::Relaxed);
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
            std::sync::atomic::fence(Ordering::Acquire);
            if self.word(slot, 0).load(Ordering::Relaxed) == s1 {
                let access = Access::from_bits(access as u8).unwrap_or(Access::NONE);
                return Some(Entry {
                    slot,
                    stamp: s1,
                    desc: WindowDesc {
                        offset,
                        len,
                        access,
                    },
                });
            }
        }
    }

    /// Every active entry.
    pub fn active(&self) -> impl Iterator<Item = Entry> + '_ {
        (0..TABLE_SLOTS).filter_map(|s| self.read(s))
    }
}
