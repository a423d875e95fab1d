//! The communication cache: seed 001's `COMMUNICATION_CACHE` over any endpoint.
//!
//! # Structure
//!
//! The peer's window is cut into *blocks* of `lines_per_way` consecutive lines. A *way*
//! holds one block: a buffer of `lines_per_way × line_bytes` bytes in which each line sits
//! at its position, and a bit per line saying whether it holds data. A block can live in
//! one *set* only, `block mod sets` (consecutive blocks go to consecutive sets, so a
//! streaming writer uses every set), and a set has `ways` ways.
//!
//! # insert
//!
//! - **hit** (the block is in its set): the line is copied into its place in the way and
//!   marked valid. Writing a line again overwrites it: it is sent once, with its last value.
//! - **miss, free way in the set**: the way is taken for the block ([`Placement`] says which
//!   free way), then as a hit.
//! - **conflict miss** (every way of the set holds a block): the way with the most valid
//!   lines is sent as ONE transfer and emptied, then taken for the new block.
//!
//! The hot path (a hit) allocates nothing and makes no system call; only sending a way
//! calls the endpoint.
//! [`CommCache::insert_all`] runs that path over many lines at once with the geometry in
//! registers, which is what a caller with a batch of items should use (about 1.7× the rate
//! of line-by-line inserts of random lines; `examples/insert_rate.rs` measures both).
//!
//! # One transfer per way
//!
//! - **contiguous** valid lines (one run, e.g. any way a streaming writer filled): one
//!   [`Endpoint::vwrite_to`] straight into the window. On `shm` the peer's CPU takes no
//!   part.
//! - **scattered** lines (a random writer's ways), by [`Transfer`]:
//!   - **push**: one message carrying the line indices and the lines (wire format in
//!     `wire.rs`), which the receiver's [`Applier`] copies into its window. The sender
//!     packs the lines (one copy), the message rings copy them twice more.
//!   - **pull** (the default where the endpoint can map peer memory, e.g. `shm`), for
//!     ways holding at least 4 KiB of lines or half the way (emptier ones are pushed): the
//!     ways live in a
//!     window the sender registers (read-only for the peer); the way's buffer is handed over with one small message naming it and its valid lines, the [`Applier`]
//!     copies those lines straight into its window (or, where it cannot map the sender's
//!     memory, `read_from`s them) and hands the buffer back. Meanwhile the way goes on with
//!     a spare buffer ([`CacheConfig::in_flight`] of them): the sender pays one small
//!     message per way instead of copying it, and the copy runs on the receiver's core —
//!     what a DMA engine did for SCIF. The price: the receiver must keep calling
//!     [`crate::Applier::next_flush`], and its CPU works.
//!
//! A block that went as a message stays on the message path until the next completed
//! [`flush`]: the message is applied whenever the receiver gets to it, so a later RMA of
//! the same lines could otherwise land first and be overwritten by the older values.
//!
//! # flush
//!
//! [`CommCache::flush`] sends every way, waits for the RMAs to complete (a fence), sends a
//! flush marker and waits for the [`Applier`]'s acknowledgement: when it returns, the
//! receiver's window holds every line inserted so far, as if each had been written by its
//! own RMA in insertion order. The endpoint pair's messages belong to the cache and its
//! applier while they are in use.
//!
//! [`Applier`]: crate::Applier
//! [`flush`]: CommCache::flush

mod config;
mod evict;
mod flush;
mod insert;
#[cfg(test)]
mod tests;

use std::time::Duration;

use accio_core::{Access, Endpoint, Window};

use crate::buf::PageBuf;
use crate::error::{Error, Result};
use crate::wire::{self, WayLayout, EVICT_HEADER};

pub use config::{CacheConfig, CacheStats, Geometry, Placement, RemoteWindow, Transfer};

/// Marks a way that holds no block.
const EMPTY: u64 = u64::MAX;
/// Marks "no way" in the block directory and "no buffer" for a way.
const NONE: u32 = u32::MAX;
/// Largest block directory (4 bytes per block of the peer window).
const MAX_BLOCKS: u64 = 1 << 26;

/// Pulling hands a buffer over and back (two messages, a wake-up of the receiver); for a
/// way with fewer bytes of lines than this (or than half the way, for small ways), packing
/// them into one message costs less (a few hot lines rewritten over and over leave ways of
/// a few hundred bytes).
const PULL_MIN: u64 = 4096;

/// Session numbers: one per cache in this process, so that a cache never mistakes a reply
/// meant for an earlier cache on the same endpoint (one dropped unflushed) for its own.
static SESSION: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// Valid line count and the lowest and highest valid line of a way, computed from its
/// bitmap when the way is sent (keeping them current on every insert cost more than
/// counting a few bitmap words once per way).
#[derive(Clone, Copy, Debug)]
struct WayMeta {
    n: usize,
    lo: usize,
    hi: usize,
}

/// Memory of the way buffers: private (push) or a window the peer reads (pull).
#[derive(Debug)]
enum Storage {
    Private(PageBuf),
    Shared(Window),
}

/// A set-associative write cache in front of a peer window (see the [module docs](self)).
pub struct CommCache<'e> {
    ep: &'e dyn Endpoint,
    remote: RemoteWindow,
    geo: Geometry,
    placement: Placement,
    pull: bool,
    checked: Option<(u32, u32)>,
    flush_timeout: Option<Duration>,
    line: usize,
    line_shift: u32,
    lpw_shift: u32,
    lpw_mask: u64,
    set_mask: usize,
    ways: usize,
    way_bytes: usize,
    /// Bitmap words per way.
    words: usize,
    storage: Storage,
    /// Start of the buffers (inside `storage`), `nbuf * way_bytes` bytes.
    base: *mut u8,
    /// Offset of `storage` in the local registered space (pull), else 0.
    storage_off: u64,
    nbuf: usize,
    free: Vec<u32>,
    out: usize,
    /// Per block of the peer window: the buffer of the way holding it, or `NONE`.
    dir: Vec<u32>,
    /// Per way: the block it holds, or `EMPTY`.
    tags: Vec<u64>,
    /// Per way: its buffer, or `NONE`.
    bufs: Vec<u32>,
    /// Per buffer: a bit per line, set when the line holds data (`words` words each).
    valid: Vec<u64>,
    /// Per set: where round-robin placement looks first.
    rr: Vec<u32>,
    /// Per block: went as a push message since the last completed flush.
    taint: Vec<u64>,
    pack: PageBuf,
    reply: Vec<u8>,
    /// Last flush posted, last flush acknowledged, last flush known complete (acknowledged,
    /// or needing no acknowledgement), and the flush that closes the last message sent.
    epoch: u64,
    acked: u64,
    done: u64,
    msg_epoch: u64,
    session: u32,
    stats: CacheStats,
}

// SAFETY: `base` points into `storage`, which the cache owns (a private mapping, or a window
// whose memory it keeps alive); every access goes through `&mut self`. The endpoint
// reference is `Sync` by the `Endpoint` trait's bounds.
unsafe impl Send for CommCache<'_> {}

impl std::fmt::Debug for CommCache<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommCache")
            .field("peer", &self.ep.peer_addr().to_string())
            .field("remote", &self.remote)
            .field("geometry", &self.geo)
            .field("placement", &self.placement)
            .field("pull", &self.pull)
            .field("checked", &self.checked)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<'e> CommCache<'e> {
    /// A cache writing into `remote` (a window of the peer of `ep`). Allocates and
    /// pre-faults all of its memory now ([`Geometry::capacity`], plus
    /// [`CacheConfig::in_flight`] spare ways when pulling, plus one way-sized message
    /// buffer), and tells the peer's [`crate::Applier`] how the lines will come.
    pub fn new(ep: &'e dyn Endpoint, remote: RemoteWindow, config: CacheConfig) -> Result<Self> {
        let geo = config.geometry;
        geo.validate()?;
        let ways_total = geo.ways * geo.sets;
        let way_bytes = geo.way_bytes();
        let words = geo.lines_per_way.div_ceil(64);
        let blocks = remote.len.div_ceil(way_bytes as u64);
        if blocks > MAX_BLOCKS {
            return Err(Error::config(
                "remote window",
                format!(
                    "{} bytes in {way_bytes}-byte ways is more than {MAX_BLOCKS} blocks; use longer ways",
                    remote.len
                ),
            ));
        }
        let pull = config.checked.is_none()
            && match config.transfer {
                Transfer::Auto => ep.capabilities().map_remote,
                Transfer::Push => false,
                Transfer::Pull => true,
            };
        let in_flight = config.in_flight.unwrap_or(ways_total);
        if pull && in_flight == 0 {
            return Err(Error::config(
                "cache buffers in flight",
                "pulling needs at least 1 spare way buffer",
            ));
        }
        let nbuf = ways_total + if pull { in_flight } else { 0 };
        let bytes = nbuf.checked_mul(way_bytes).ok_or_else(|| {
            Error::config("cache buffers in flight", format!("{nbuf} ways overflow"))
        })?;
        let (storage, storage_off) = if pull {
            let w = ep.register(bytes, Access::READ)?;
            let off = w.offset();
            (Storage::Shared(w), off)
        } else {
            (Storage::Private(PageBuf::new(bytes)?), 0)
        };
        let base = match &storage {
            Storage::Private(p) => p.as_slice().as_ptr() as *mut u8,
            Storage::Shared(w) => w.as_ptr(),
        };
        let max_msg = WayLayout::new(geo.lines_per_way, geo.line_bytes, config.checked.is_some())
            .expect("validated geometry")
            .total
            .max(EVICT_HEADER + 8 * words);
        let cache = CommCache {
            ep,
            remote,
            geo,
            placement: config.placement,
            pull,
            checked: config.checked,
            flush_timeout: config.flush_timeout,
            line: geo.line_bytes,
            line_shift: geo.line_bytes.trailing_zeros(),
            lpw_shift: geo.lines_per_way.trailing_zeros(),
            lpw_mask: geo.lines_per_way as u64 - 1,
            set_mask: geo.sets - 1,
            ways: geo.ways,
            way_bytes,
            words,
            storage,
            base,
            storage_off,
            nbuf,
            free: (0..nbuf as u32).rev().collect(),
            out: 0,
            dir: vec![NONE; blocks as usize],
            tags: vec![EMPTY; ways_total],
            bufs: vec![NONE; ways_total],
            valid: vec![0; nbuf * words],
            rr: vec![0; geo.sets],
            taint: vec![0; (blocks as usize).div_ceil(64)],
            pack: PageBuf::new(max_msg)?,
            reply: Vec::with_capacity(64),
            epoch: 0,
            acked: 0,
            done: 0,
            msg_epoch: 0,
            session: SESSION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            stats: CacheStats::default(),
        };
        // Sent after `register` returned: the peer may read the storage once it has it.
        ep.send(&wire::setup(
            pull,
            geo.line_bytes,
            geo.lines_per_way,
            storage_off,
            bytes as u64,
            cache.session,
        ))?;
        Ok(cache)
    }

    /// The geometry in use.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// The window written into.
    pub fn remote(&self) -> RemoteWindow {
        self.remote
    }

    /// Whether the receiver pulls the lines ([`Transfer::Auto`] resolved).
    pub fn pulls(&self) -> bool {
        self.pull
    }

    /// Counters so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }
}

impl Drop for CommCache<'_> {
    fn drop(&mut self) {
        if let Storage::Shared(w) = &self.storage {
            // The peer may no longer read our buffers; an unflushed receiver gets an error.
            let _ = self.ep.unregister(w.offset());
        }
    }
}
