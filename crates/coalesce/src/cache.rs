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

use std::time::Duration;

use accio_core::{Access, Endpoint, RmaFlags, Window};

use crate::buf::{copy_line, PageBuf};
use crate::error::{Error, Result};
use crate::wire::{self, WayLayout, EVICT_HEADER, META_BYTES, WAY_HEADER};

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

/// Shape of the cache.
///
/// The default, 64-byte lines × 512 lines per way × 4 ways × 16 sets, makes 32 KiB ways (a
/// full way is a 32 KiB transfer, the middle of the 16–64 KiB range seed 001 reports in
/// section 5.5) and a 2 MiB cache, which stays in the last-level cache of current CPUs.
/// Measured on `shm` with a 2 MiB footprint and a flush after every 32768 items: uniformly
/// random 64-byte items average 20.3 KiB per transfer (each way holds ~63% of its lines by
/// then), sequential ones or every line once in random order 32 KiB. With a footprint
/// larger than the cache, uniformly random writers evict ways long before they fill (at
/// 4× the capacity, about 1/(1 − 1/4) lines per transfer): size the cache to what one
/// phase writes. `accio bench coalesce` measures the alternatives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per line: the unit of insertion and of validity, a power of two from 1 to
    /// 4096. Default 64 (a CPU cache line, as in the seed).
    pub line_bytes: usize,
    /// Lines per way (one block), a power of two from 1 to 65536. Default 512.
    pub lines_per_way: usize,
    /// Ways per set, 1 to 64. Default 4.
    pub ways: usize,
    /// Number of sets, a power of two from 1 to 65536. Default 16.
    pub sets: usize,
}

impl Default for Geometry {
    fn default() -> Self {
        Geometry {
            line_bytes: 64,
            lines_per_way: 512,
            ways: 4,
            sets: 16,
        }
    }
}

/// Largest cache accepted (all ways together).
const MAX_CACHE_BYTES: usize = 1 << 30;

impl Geometry {
    /// Bytes of one way (one block of the window).
    pub fn way_bytes(&self) -> usize {
        self.line_bytes * self.lines_per_way
    }

    /// Bytes of the whole cache.
    pub fn capacity(&self) -> usize {
        self.way_bytes() * self.ways * self.sets
    }

    /// Checks every field; the error names the first one out of range.
    pub fn validate(&self) -> Result<()> {
        let pow2 = |v: usize, what: &str, max: usize| -> Result<()> {
            if v.is_power_of_two() && v <= max {
                Ok(())
            } else {
                Err(Error::config(
                    "cache geometry",
                    format!("{what} is {v}; it must be a power of two from 1 to {max}"),
                ))
            }
        };
        pow2(self.line_bytes, "line_bytes", 4096)?;
        pow2(self.lines_per_way, "lines_per_way", 65536)?;
        pow2(self.sets, "sets", 65536)?;
        if self.ways == 0 || self.ways > 64 {
            return Err(Error::config(
                "cache geometry",
                format!("ways is {}; it must be from 1 to 64", self.ways),
            ));
        }
        let cap = self
            .way_bytes()
            .checked_mul(self.ways)
            .and_then(|b| b.checked_mul(self.sets));
        match cap {
            Some(c) if c <= MAX_CACHE_BYTES => Ok(()),
            _ => Err(Error::config(
                "cache geometry",
                format!(
                    "{} sets × {} ways × {} lines × {} bytes exceeds {} bytes",
                    self.sets, self.ways, self.lines_per_way, self.line_bytes, MAX_CACHE_BYTES
                ),
            )),
        }
    }
}

impl std::fmt::Display for Geometry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}s×{}w×{}L×{}B",
            self.sets, self.ways, self.lines_per_way, self.line_bytes
        )
    }
}

/// Which free way a missing block takes. Seed 001 (section 5.5) compared the two and found
/// no difference in message size or bandwidth; `accio bench coalesce` measures it again.
/// The same order breaks ties between equally full ways on a conflict miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Placement {
    /// The lowest-numbered free way of the set (the default).
    #[default]
    FirstFree,
    /// The next free way after the one the set placed last, cyclically.
    RoundRobin,
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Placement::FirstFree => "first-free",
            Placement::RoundRobin => "round-robin",
        })
    }
}

impl std::str::FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Placement, String> {
        match s {
            "first-free" => Ok(Placement::FirstFree),
            "round-robin" => Ok(Placement::RoundRobin),
            _ => Err(format!(
                "unknown placement {s:?} (known: first-free, round-robin)"
            )),
        }
    }
}

/// Settings of a [`CommCache`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheConfig {
    geometry: Geometry,
    placement: Placement,
    transfer: Transfer,
    /// `None`: one spare per way.
    in_flight: Option<usize>,
    checked: Option<(u32, u32)>,
    flush_timeout: Option<Duration>,
}

/// Who copies an evicted way's scattered lines into the peer window (see the
/// [module docs](self)); contiguous lines always go as one RMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Transfer {
    /// Pull where the endpoint can map peer memory ([`accio_core::Capabilities::map_remote`],
    /// e.g. `shm`), else push. The default.
    #[default]
    Auto,
    /// The sender packs them into one message.
    Push,
    /// The receiver copies them out of the sender's registered way buffers.
    Pull,
}

impl std::fmt::Display for Transfer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transfer::Auto => "auto",
            Transfer::Push => "push",
            Transfer::Pull => "pull",
        })
    }
}

impl std::str::FromStr for Transfer {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Transfer, String> {
        match s {
            "auto" => Ok(Transfer::Auto),
            "push" => Ok(Transfer::Push),
            "pull" => Ok(Transfer::Pull),
            _ => Err(format!("unknown transfer {s:?} (known: auto, push, pull)")),
        }
    }
}

impl CacheConfig {
    /// The defaults: [`Geometry::default`], [`Placement::FirstFree`], [`Transfer::Auto`],
    /// 8 buffers in flight, unchecked, flushes that wait for the acknowledgement as long as
    /// the peer lives.
    pub fn new() -> CacheConfig {
        CacheConfig::default()
    }

    /// Sets the geometry (default [`Geometry::default`]).
    pub fn geometry(mut self, g: Geometry) -> CacheConfig {
        self.geometry = g;
        self
    }

    /// Sets the placement policy (default [`Placement::FirstFree`]).
    pub fn placement(mut self, p: Placement) -> CacheConfig {
        self.placement = p;
        self
    }

    /// Sets who copies the lines (default [`Transfer::Auto`]).
    pub fn transfer(mut self, t: Transfer) -> CacheConfig {
        self.transfer = t;
        self
    }

    /// Pull only: way buffers beyond one per way, so that handed-over ways can wait for the
    /// receiver while their ways take new blocks (at least 1). When all are out, an insert
    /// that needs one waits for the receiver to return one.
    ///
    /// Default: one per way (the cache's memory doubles). A flush hands every way over at
    /// once; with fewer spares, the inserts right after it wait for the receiver, so the
    /// two sides take turns instead of working side by side. `accio bench coalesce
    /// --backend shm --sizes 64 --pattern random --transfer pull --repetitions 11`
    /// (16x4x32K, a flush per pass), 8 spares against 64, four interleaved pairs:
    /// 63.3/64.9, 31.3/38.9, 60.1/87.0, 44.8/81.6 M items/s.
    pub fn in_flight(mut self, n: usize) -> CacheConfig {
        self.in_flight = Some(n);
        self
    }

    /// Checked mode (default off): every line travels with (`sender`, `dest`, window
    /// offset) and the [`crate::Applier`] verifies them on arrival. Every way then goes as a
    /// push message (an RMA could not be verified), which costs bandwidth: use it to find
    /// bugs.
    pub fn checked(mut self, sender: u32, dest: u32) -> CacheConfig {
        self.checked = Some((sender, dest));
        self
    }

    /// How long [`CommCache::flush`] waits for the receiver's acknowledgement (default
    /// `None`: as long as the peer lives; a dead peer fails it within a second).
    pub fn flush_timeout(mut self, t: Option<Duration>) -> CacheConfig {
        self.flush_timeout = t;
        self
    }
}

/// The peer window a cache writes into: its offset in the peer's registered space and its
/// length. The receiver announces it with [`crate::Applier::announce`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteWindow {
    /// Offset of the window in the peer's registered address space.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl RemoteWindow {
    /// Receives the window a peer [`crate::Applier`] announced, waiting at most `timeout`.
    pub fn receive(ep: &dyn Endpoint, timeout: Option<Duration>) -> Result<RemoteWindow> {
        let mut buf = Vec::with_capacity(64);
        ep.recv_timeout(&mut buf, timeout)?;
        match wire::parse(&buf).map_err(|r| Error::protocol(ep.peer_addr(), r))? {
            wire::Msg::Hello { offset, len, .. } => Ok(RemoteWindow { offset, len }),
            other => Err(Error::protocol(
                ep.peer_addr(),
                format!("expected the window announcement, got {other:?}"),
            )),
        }
    }
}

/// What a cache has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lines inserted (rewrites included).
    pub lines_in: u64,
    /// Lines sent (each cached line once per transfer of its way).
    pub lines_sent: u64,
    /// Transfers: one per way sent, whatever the path.
    pub transfers: u64,
    /// Push transfers that went as one RMA straight into the window.
    pub rma_transfers: u64,
    /// Push transfers that went as a message for the applier.
    pub message_transfers: u64,
    /// Pull transfers: ways the receiver copied from the sender's buffers.
    pub pull_transfers: u64,
    /// Bytes of line data sent.
    pub payload_bytes: u64,
    /// Bytes moved per transfer, summed: line data plus message headers, indices and
    /// metadata (push), or line data plus the hand-over message (pull).
    pub wire_bytes: u64,
    /// Ways sent because of a conflict miss.
    pub evictions: u64,
    /// Times an insert waited for the receiver to return a buffer (pull).
    pub buffer_waits: u64,
    /// Completed flushes.
    pub flushes: u64,
}

impl CacheStats {
    /// Average bytes per transfer (wire bytes / transfers); 0 before the first transfer.
    pub fn avg_transfer_bytes(&self) -> f64 {
        if self.transfers == 0 {
            0.0
        } else {
            self.wire_bytes as f64 / self.transfers as f64
        }
    }
}

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

    /// Caches one line for window offset `offset` (relative to the window start, a multiple
    /// of the line size; `line` is exactly one line). May send one way (a conflict miss);
    /// if that fails the error is returned and nothing was cached.
    #[inline(always)]
    pub fn insert(&mut self, offset: u64, line: &[u8]) -> Result<()> {
        self.insert_all(std::iter::once((offset, line)))
    }

    /// Caches every `(offset, line)` of `items` in order, as [`insert`](Self::insert) of
    /// each would; on an error the lines before the failing one stay cached, the failing
    /// one and those after it are not.
    ///
    /// The way to insert many lines at once: the loop keeps the cache's geometry and tables
    /// in registers. Called line by line, each insert reloads them from the cache, and on
    /// the machines accio is measured on every such load waits behind the line stores still
    /// draining to memory: on a 2-core EPYC VM a random 64-byte insert costs about 11 ns line
    /// by line, 7 ns here, and a plain store loop 4 ns (`examples/insert_rate.rs`).
    // Inlined into the caller: the hit path is a few dozen instructions, and a call with
    // its register saves would cost as much again.
    #[inline(always)]
    pub fn insert_all<'a, I>(&mut self, items: I) -> Result<()>
    where
        I: IntoIterator<Item = (u64, &'a [u8])>,
    {
        let (line_len, window_len) = (self.line, self.remote.len);
        let (line_shift, lpw_shift, lpw_mask) = (self.line_shift, self.lpw_shift, self.lpw_mask);
        let (way_bytes, words, base) = (self.way_bytes, self.words, self.base);
        // Raw pointers, so that the loop reads the tables without reloading the vectors
        // from `self`; the tables are sized at construction and never reallocated.
        let mut dir = self.dir.as_ptr();
        let mut valid = self.valid.as_mut_ptr();
        let mut cached = 0u64;
        let mut outcome = Ok(());
        for (offset, line) in items {
            let end = offset.wrapping_add(line_len as u64);
            if line.len() != line_len
                || offset & (line_len as u64 - 1) != 0
                || end > window_len
                || end < offset
            {
                outcome = Err(self.bad_write("insert", offset, line.len()));
                break;
            }
            let li = offset >> line_shift;
            let block = (li >> lpw_shift) as usize;
            let idx = (li & lpw_mask) as usize;
            // The buffer straight from the directory: the store's address hangs off one
            // load, not two.
            // SAFETY: `offset + line_len <= window_len`, so `block` is below the number of
            // blocks of the window, which is `dir`'s length.
            let mut buf = unsafe { *dir.add(block) };
            if buf == NONE {
                match self.miss(block) {
                    Ok(b) => {
                        buf = b;
                        // `miss` wrote the tables through `&mut self`: take the pointers
                        // again rather than use ones from before those writes.
                        dir = self.dir.as_ptr();
                        valid = self.valid.as_mut_ptr();
                    }
                    Err(e) => {
                        outcome = Err(e);
                        break;
                    }
                }
            }
            let buf = buf as usize;
            // SAFETY: `buf` is the buffer of a way holding `block` (from `dir` or `miss`),
            // one of the `nbuf`; `idx < lines_per_way`, so `at + line_len` lies inside the
            // `nbuf * way_bytes` bytes at `base`, and the bitmap word inside `valid`. The
            // buffer is not in flight, so the peer does not read it now (pull protocol),
            // and `line` is caller memory, not the storage.
            unsafe {
                let at = buf * way_bytes + (idx << line_shift);
                debug_assert!(at + line_len <= self.nbuf * way_bytes);
                copy_line(base.add(at), line.as_ptr(), line_len);
                // No branch on "was it valid already": random writers make it unpredictable.
                *valid.add(buf * words + idx / 64) |= 1u64 << (idx % 64);
            }
            cached += 1;
        }
        self.stats.lines_in += cached;
        outcome
    }

    /// Caches `bytes` for window offset `offset`: a whole number of lines at a line
    /// boundary, inserted line by line. Checked whole before any line is cached.
    pub fn write(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        let line = self.line as u64;
        let end = offset.checked_add(bytes.len() as u64);
        if !offset.is_multiple_of(line)
            || !(bytes.len() as u64).is_multiple_of(line)
            || end.is_none_or(|e| e > self.remote.len)
        {
            return Err(self.bad_write("write", offset, bytes.len()));
        }
        for (i, l) in bytes.chunks_exact(self.line).enumerate() {
            self.insert(offset + i as u64 * line, l)?;
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn bad_write(&self, op: &'static str, offset: u64, len: usize) -> Error {
        let line = self.line;
        let reason = if op == "insert" && len != line {
            format!("a line is exactly {line} bytes")
        } else if !offset.is_multiple_of(line as u64) || !len.is_multiple_of(line) {
            format!(
                "writes must start on a {line}-byte line boundary and be whole lines \
                 (a partial line would overwrite the peer's bytes around it)"
            )
        } else {
            format!(
                "the peer window {:#x} of {} bytes ends before it",
                self.remote.offset, self.remote.len
            )
        };
        Error::BadWrite {
            op,
            offset,
            len,
            reason,
        }
    }

    /// `block` is not cached: take a free way of its set, or send the fullest; give the
    /// way a buffer, which is returned (and entered in the directory).
    #[cold]
    #[inline(never)]
    fn miss(&mut self, block: usize) -> Result<u32> {
        let set = block & self.set_mask;
        let first = set * self.ways;
        let start = match self.placement {
            Placement::FirstFree => 0,
            Placement::RoundRobin => self.rr[set] as usize,
        };
        let order = (0..self.ways).map(|k| first + (start + k) % self.ways);
        let chosen = match order.clone().find(|&w| self.tags[w] == EMPTY) {
            Some(w) => w,
            None => {
                // Fullest way; the first in placement order among equals.
                let mut best = (first + start, 0);
                for w in order {
                    let n = self.count(w);
                    if n > best.1 {
                        best = (w, n);
                    }
                }
                let best = best.0;
                self.evict(best)?;
                self.stats.evictions += 1;
                best
            }
        };
        let buf = self.take_buffer()?;
        self.tags[chosen] = block as u64;
        self.bufs[chosen] = buf;
        self.dir[block] = buf;
        self.rr[set] = ((chosen - first + 1) % self.ways) as u32;
        Ok(buf)
    }

    /// A free buffer, waiting for the receiver to return one if all are out.
    fn take_buffer(&mut self) -> Result<u32> {
        if self.free.is_empty() {
            self.stats.buffer_waits += 1;
        }
        loop {
            if let Some(b) = self.free.pop() {
                return Ok(b);
            }
            if self.out == 0 {
                return Err(Error::protocol(
                    self.ep.peer_addr(),
                    "no way buffer is free and none is with the receiver",
                ));
            }
            self.wait_reply()?;
        }
    }

    /// Receives one message from the applier: a returned buffer or the acknowledgement of
    /// the next flush.
    fn wait_reply(&mut self) -> Result<()> {
        self.ep.recv_timeout(&mut self.reply, self.flush_timeout)?;
        self.on_reply()
    }

    /// Handles the replies that already arrived, without waiting.
    fn drain_replies(&mut self) -> Result<()> {
        while self.ep.try_recv(&mut self.reply)?.is_ready() {
            self.on_reply()?;
        }
        Ok(())
    }

    fn on_reply(&mut self) -> Result<()> {
        let peer = self.ep.peer_addr();
        match wire::parse(&self.reply).map_err(|r| Error::protocol(peer, r))? {
            // Replies to an earlier cache on this endpoint (dropped before its flushes were
            // acknowledged) are not ours.
            wire::Msg::Free(_, s) | wire::Msg::Ack(_, s) if s != self.session => Ok(()),
            wire::Msg::Free(off, _) => {
                let rel = off.wrapping_sub(self.storage_off);
                let b = rel / self.way_bytes as u64;
                if !self.pull
                    || off < self.storage_off
                    || rel % self.way_bytes as u64 != 0
                    || b >= self.nbuf as u64
                    || self.out == 0
                {
                    return Err(Error::protocol(
                        peer,
                        format!("returned buffer {off:#x} is not one of ours in flight"),
                    ));
                }
                self.free.push(b as u32);
                self.out -= 1;
                Ok(())
            }
            wire::Msg::Ack(e, _) if e == self.acked + 1 && e <= self.epoch => {
                self.acked = e;
                self.done = self.done.max(e);
                self.stats.flushes = self.done;
                if e >= self.msg_epoch {
                    // Every message sent so far is applied: RMAs may go to tainted blocks
                    // again, and every pulled buffer is back.
                    self.taint.fill(0);
                    if self.out != 0 {
                        return Err(Error::protocol(
                            peer,
                            format!(
                                "flush {e} was acknowledged with {} way buffers not returned",
                                self.out
                            ),
                        ));
                    }
                }
                Ok(())
            }
            other => Err(Error::protocol(
                peer,
                format!(
                    "expected a returned buffer or the acknowledgement of flush {}, got {other:?}",
                    self.acked + 1
                ),
            )),
        }
    }

    /// The validity bitmap of way `way`'s buffer (empty for a way without one).
    fn bitmap(&self, way: usize) -> &[u64] {
        match self.bufs[way] {
            NONE => &[],
            b => &self.valid[b as usize * self.words..(b as usize + 1) * self.words],
        }
    }

    /// Valid lines of way `way`.
    fn count(&self, way: usize) -> usize {
        self.bitmap(way)
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum()
    }

    /// Count and extent of way `way`'s valid lines (`n == 0`: none).
    fn extent(&self, way: usize) -> WayMeta {
        let words = self.bitmap(way);
        let Some(first) = words.iter().position(|&w| w != 0) else {
            return WayMeta { n: 0, lo: 0, hi: 0 };
        };
        let last = words
            .iter()
            .rposition(|&w| w != 0)
            .expect("one word is set");
        WayMeta {
            n: words[first..=last]
                .iter()
                .map(|w| w.count_ones() as usize)
                .sum(),
            lo: first * 64 + words[first].trailing_zeros() as usize,
            hi: last * 64 + 63 - words[last].leading_zeros() as usize,
        }
    }

    fn tainted(&self, block: u64) -> bool {
        self.taint
            .get((block / 64) as usize)
            .is_some_and(|w| w & (1 << (block % 64)) != 0)
    }

    /// Sends way `way` as one transfer and frees it (tag, directory entry and buffer). On
    /// error the way is left as it was.
    fn evict(&mut self, way: usize) -> Result<()> {
        let m = self.extent(way);
        let block = self.tags[way];
        let buf = self.bufs[way] as usize;
        // Pulled buffers come back with the receiver's `FREE`; the others are free now.
        let mut handed_over = false;
        if m.n > 0 {
            let block_off = block * self.way_bytes as u64;
            let (lo, hi, n) = (m.lo, m.hi, m.n);
            let payload = (n * self.line) as u64;
            let base = buf * self.way_bytes;
            let contiguous = hi - lo + 1 == n;
            if contiguous && self.checked.is_none() && !self.tainted(block) {
                // SAFETY: lines lo..=hi of buffer `buf` lie inside the storage (see
                // `insert`); only `&self` is held while the slice lives.
                let src = unsafe {
                    std::slice::from_raw_parts(self.base.add(base + lo * self.line), n * self.line)
                };
                let to = self.remote.offset + block_off + (lo * self.line) as u64;
                self.ep.vwrite_to(src, to, RmaFlags::ASYNC)?;
                self.stats.rma_transfers += 1;
                self.stats.wire_bytes += payload;
            } else if self.pull && payload >= PULL_MIN.min(self.way_bytes as u64 / 2) {
                let words = if contiguous { 0 } else { hi / 64 - lo / 64 + 1 };
                let len = EVICT_HEADER + 8 * words;
                let w0 = buf * self.words + lo / 64;
                let bitmap = &self.valid[w0..w0 + words];
                let pack = self.pack.as_mut_slice();
                wire::evict_header(
                    pack,
                    self.storage_off + base as u64,
                    block_off,
                    lo,
                    hi,
                    n,
                    words,
                );
                for (i, w) in bitmap.iter().enumerate() {
                    let a = EVICT_HEADER + 8 * i;
                    pack[a..a + 8].copy_from_slice(&w.to_le_bytes());
                }
                self.ep.send(&self.pack.as_slice()[..len])?;
                self.msg_epoch = self.epoch + 1;
                self.taint[(block / 64) as usize] |= 1 << (block % 64);
                self.out += 1;
                handed_over = true;
                self.stats.pull_transfers += 1;
                self.stats.wire_bytes += payload + len as u64;
            } else {
                let total = self.pack_way(m, buf, block_off);
                self.ep.send(&self.pack.as_slice()[..total])?;
                self.msg_epoch = self.epoch + 1;
                self.taint[(block / 64) as usize] |= 1 << (block % 64);
                self.stats.message_transfers += 1;
                self.stats.wire_bytes += total as u64;
            }
            self.stats.transfers += 1;
            self.stats.lines_sent += n as u64;
            self.stats.payload_bytes += payload;
            let words = &mut self.valid[buf * self.words..(buf + 1) * self.words];
            words[lo / 64..=hi / 64].fill(0);
        }
        if !handed_over {
            self.free.push(buf as u32);
        }
        self.dir[block as usize] = NONE;
        self.tags[way] = EMPTY;
        self.bufs[way] = NONE;
        Ok(())
    }

    /// Packs the valid lines of buffer `buf` into the message buffer; returns the message
    /// length.
    fn pack_way(&mut self, m: WayMeta, buf: usize, block_off: u64) -> usize {
        let (n, line) = (m.n, self.line);
        let layout = WayLayout::new(n, line, self.checked.is_some()).expect("fits max message");
        let storage = self.base as *const u8;
        let pack = self.pack.as_mut_slice();
        wire::way_header(pack, self.checked.is_some(), line, n, block_off);
        // Zero the index padding so messages are deterministic.
        pack[layout.meta_at - 8..layout.meta_at].fill(0);
        let base = buf * self.way_bytes;
        let words = &self.valid[buf * self.words..(buf + 1) * self.words];
        let mut i = 0usize;
        for (wi, &word) in words.iter().enumerate().take(m.hi / 64 + 1).skip(m.lo / 64) {
            let mut bits = word;
            while bits != 0 {
                let idx = wi * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let ia = WAY_HEADER + 2 * i;
                pack[ia..ia + 2].copy_from_slice(&(idx as u16).to_le_bytes());
                if let Some((sender, dest)) = self.checked {
                    let ma = layout.meta_at + META_BYTES * i;
                    pack[ma..ma + 4].copy_from_slice(&sender.to_le_bytes());
                    pack[ma + 4..ma + 8].copy_from_slice(&dest.to_le_bytes());
                    let off = block_off + (idx * line) as u64;
                    pack[ma + 8..ma + 16].copy_from_slice(&off.to_le_bytes());
                }
                let da = layout.data_at + i * line;
                // SAFETY: line `idx` of buffer `buf` lies inside the storage (see
                // `insert`); the message buffer is separate memory of `max_msg` bytes,
                // which `layout.total` does not exceed.
                unsafe {
                    copy_line(
                        pack[da..da + line].as_mut_ptr(),
                        storage.add(base + idx * line),
                        line,
                    )
                };
                i += 1;
            }
        }
        debug_assert_eq!(i, n, "valid bits and count agree");
        layout.total
    }

    /// Sends every cached line and waits until the receiver's [`crate::Applier`] has
    /// applied all of them (see the [module docs](self)). Ways are emptied and freed.
    pub fn flush(&mut self) -> Result<()> {
        let epoch = self.flush_async()?;
        self.wait(epoch)
    }

    /// Sends every cached line and the flush marker without waiting for the receiver;
    /// returns the flush's number for [`wait`](CommCache::wait). Inserts can go on at once
    /// (with a pulling cache they wait for buffers as the receiver returns them), so the
    /// receiver's copying overlaps the next batch of inserts.
    pub fn flush_async(&mut self) -> Result<u64> {
        for way in 0..self.tags.len() {
            if self.tags[way] != EMPTY {
                self.evict(way)?;
            }
        }
        self.rr.fill(0);
        let mark = self.ep.fence_mark()?;
        self.ep.fence_wait(mark)?;
        let e = self.epoch + 1;
        self.ep
            .send(&wire::epoch_msg(wire::FLUSH, e, self.session))?;
        self.epoch = e;
        if self.msg_epoch < e && self.done == e - 1 {
            // Only RMAs since the last complete flush, and the fence saw them land: done
            // without waiting for the acknowledgement (it is consumed later).
            self.done = e;
            self.stats.flushes = e;
        }
        // Acknowledgements nobody waits for must not pile up in the applier's way.
        self.drain_replies()?;
        Ok(e)
    }

    /// Waits until flush `epoch` (from [`flush_async`](CommCache::flush_async)) was
    /// acknowledged: every line inserted before it is in the peer window.
    pub fn wait(&mut self, epoch: u64) -> Result<()> {
        if epoch > self.epoch {
            return Err(Error::config(
                "flush number",
                format!("flush {epoch} was not started (last: {})", self.epoch),
            ));
        }
        while self.done < epoch {
            self.wait_reply()?;
        }
        Ok(())
    }

    /// Flushes, then tells the applier that no more data will come (its
    /// [`crate::Applier::next_flush`] returns `None`). Returns the final counters.
    pub fn close(mut self) -> Result<CacheStats> {
        self.flush()?;
        // Consume every acknowledgement, also those a flush did not need to wait for, so
        // that nothing of this cache is left for the next one on the endpoint.
        while self.acked < self.epoch {
            self.wait_reply()?;
        }
        self.ep.send(&wire::bye())?;
        Ok(self.stats)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{pair, Rng, WAIT};
    use crate::Applier;

    /// Serves a `len`-byte window on `rx` until the cache closes (after `delay`, to make
    /// late application visible); returns the window's bytes.
    fn serve(
        rx: Box<dyn Endpoint>,
        len: usize,
        delay: Duration,
    ) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let w = rx.register(len, Access::WRITE).unwrap();
            let mut a = Applier::new(&*rx, w);
            a.announce().unwrap();
            std::thread::sleep(delay);
            while a.next_flush(Some(WAIT)).unwrap().is_some() {}
            let mut out = vec![0u8; len];
            a.window().read_at(0, &mut out).unwrap();
            out
        })
    }

    fn small() -> Geometry {
        Geometry {
            line_bytes: 8,
            lines_per_way: 4,
            ways: 2,
            sets: 1,
        }
    }

    #[test]
    fn push_and_pull_on_both_backends_equal_writing_every_line_directly() {
        for backend in ["shm", "tcp"] {
            for transfer in [Transfer::Push, Transfer::Pull] {
                let (tx, rx) = pair(backend);
                let len = 3 << 10;
                let server = serve(rx, len, Duration::ZERO);
                let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
                let g = Geometry {
                    line_bytes: 16,
                    lines_per_way: 16,
                    ways: 2,
                    sets: 4,
                };
                let cfg = CacheConfig::new()
                    .geometry(g)
                    .transfer(transfer)
                    .in_flight(2);
                let mut cache = CommCache::new(&*tx, remote, cfg).unwrap();
                assert_eq!(cache.pulls(), transfer == Transfer::Pull);
                let mut model = vec![0u8; len];
                let mut rng = Rng(0x1234_5678 ^ len as u64);
                for i in 0..6000u64 {
                    // Random lines, with streaming runs now and then.
                    let off = if i % 500 < 100 {
                        (i * 16) % len as u64
                    } else {
                        rng.below(len as u64 / 16) * 16
                    };
                    let line = [(i % 251) as u8 + 1; 16];
                    cache.insert(off, &line).unwrap();
                    model[off as usize..off as usize + 16].copy_from_slice(&line);
                    // Short passes leave ways from a few lines to full: every path runs.
                    if i % 150 == 149 {
                        cache.flush_async().unwrap();
                    }
                }
                let stats = cache.close().unwrap();
                let got = server.join().unwrap();
                assert!(got == model, "{backend} {transfer}: window differs");
                let what = format!("{backend} {transfer}: {stats:?}");
                assert!(
                    stats.rma_transfers > 0 && stats.message_transfers > 0,
                    "{what}"
                );
                assert_eq!(
                    stats.pull_transfers > 0,
                    transfer == Transfer::Pull,
                    "{what}"
                );
                assert_eq!(stats.lines_in, 6000);
            }
        }
    }

    /// Regression: a block sent as a message (applied whenever the receiver gets to it)
    /// and then rewritten whole must not go as an RMA in the same epoch: the RMA would land
    /// first and the older message would overwrite it.
    #[test]
    fn insert_all_keeps_the_lines_before_a_bad_one_and_none_after() {
        let (tx, rx) = pair("shm");
        let server = serve(rx, 4096, Duration::ZERO);
        let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
        let mut cache = CommCache::new(&*tx, remote, CacheConfig::new().geometry(small())).unwrap();
        let lines = [[1u8; 8], [2; 8], [3; 8], [4; 8]];
        // The third offset is not on a line boundary.
        let offsets = [0u64, 64, 130, 192];
        let err = cache
            .insert_all(offsets.iter().zip(&lines).map(|(&o, l)| (o, &l[..])))
            .unwrap_err();
        assert!(matches!(err, Error::BadWrite { offset: 130, .. }), "{err}");
        assert_eq!(cache.stats().lines_in, 2);
        cache.close().unwrap();
        let got = server.join().unwrap();
        assert_eq!(&got[..8], &[1; 8]);
        assert_eq!(&got[64..72], &[2; 8]);
        assert!(
            got[128..200].iter().all(|&b| b == 0),
            "a line after the bad one arrived"
        );
    }

    #[test]
    fn rma_after_message_to_the_same_block_keeps_the_newer_lines() {
        let (tx, rx) = pair("shm");
        // The receiver applies nothing for a while: messages are late, RMAs are not.
        let server = serve(rx, 4096, Duration::from_millis(200));
        let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
        let g = Geometry { ways: 1, ..small() };
        let cfg = CacheConfig::new().geometry(g).transfer(Transfer::Push);
        let mut cache = CommCache::new(&*tx, remote, cfg).unwrap();
        // Block 0, lines 0 and 2 (scattered) ...
        cache.insert(0, &[1; 8]).unwrap();
        cache.insert(16, &[1; 8]).unwrap();
        // ... evicted by block 1: goes as a message.
        cache.insert(32, &[9; 8]).unwrap();
        // Block 0 rewritten whole (contiguous), evicted again by block 1.
        cache.write(0, &[2; 32]).unwrap();
        cache.insert(40, &[9; 8]).unwrap();
        let stats = cache.close().unwrap();
        let got = server.join().unwrap();
        assert_eq!(
            &got[..32],
            &[2; 32],
            "the newer lines of block 0 were overwritten"
        );
        assert_eq!(&got[32..48], &[9; 16]);
        // Block 0 went twice as a message (the second time because of the first); block 1
        // twice as an RMA (one line, then two contiguous ones at the close).
        assert_eq!((stats.message_transfers, stats.rma_transfers), (2, 2));
    }

    #[test]
    fn placement_decides_which_of_two_equally_full_ways_is_sent() {
        for (placement, second) in [(Placement::FirstFree, 2usize), (Placement::RoundRobin, 1)] {
            let (tx, rx) = pair("shm");
            let server = std::thread::spawn(move || {
                let w = rx.register(4096, Access::READ_WRITE).unwrap();
                let mut a = Applier::new(&*rx, w);
                a.announce().unwrap();
                while a.next_flush(Some(WAIT)).unwrap().is_some() {}
            });
            let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
            let cfg = CacheConfig::new()
                .geometry(small())
                .placement(placement)
                .transfer(Transfer::Push);
            let mut cache = CommCache::new(&*tx, remote, cfg).unwrap();
            // Blocks 0 and 1 take ways 0 and 1; block 2 evicts way 0 under both policies
            // (the round-robin pointer is back at 0). Block 3 then evicts way 0 again
            // (block 2) under first-free, way 1 (block 1) under round-robin.
            for block in 0..4u8 {
                cache
                    .insert(u64::from(block) * 32, &[block + 1; 8])
                    .unwrap();
            }
            assert_eq!(cache.stats().evictions, 2);
            // Evicted ways went as RMAs: they are in the window before any flush.
            let mut peek = vec![0u8; 128];
            tx.map_remote(remote.offset, 128)
                .unwrap()
                .read_at(0, &mut peek)
                .unwrap();
            let firsts: Vec<u8> = (0..4).map(|b| peek[b * 32]).collect();
            let mut want = vec![1u8, 0, 0, 0];
            want[second] = second as u8 + 1;
            assert_eq!(firsts, want, "{placement}");
            cache.close().unwrap();
            server.join().unwrap();
        }
    }

    #[test]
    fn flush_async_overlaps_passes_and_wait_returns_once_acknowledged() {
        let (tx, rx) = pair("shm");
        // The cache's capacity: no evictions, dense ways at each flush. The applier starts
        // late, so the second pass finds the one spare buffer gone and must wait for a
        // returned one (a prompt applier could return them all in time).
        let len = 32 << 10;
        let server = serve(rx, len, Duration::from_millis(300));
        let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
        let g = Geometry {
            line_bytes: 64,
            lines_per_way: 32,
            ways: 2,
            sets: 8,
        };
        let cfg = CacheConfig::new()
            .geometry(g)
            .transfer(Transfer::Pull)
            .in_flight(1);
        let mut cache = CommCache::new(&*tx, remote, cfg).unwrap();
        let mut rng = Rng(77);
        let mut model = vec![0u8; len];
        let mut last = 0;
        for pass in 1..=5u8 {
            for _ in 0..1024 {
                let off = rng.below(len as u64 / 64) * 64;
                cache.insert(off, &[pass; 64]).unwrap();
                model[off as usize..off as usize + 64].fill(pass);
            }
            last = cache.flush_async().unwrap();
        }
        assert_eq!(last, 5);
        cache.wait(last).unwrap();
        let s = cache.stats();
        assert_eq!(s.flushes, 5);
        assert!(
            s.pull_transfers >= 5 * 16,
            "every pass hands its 16 ways over: {s:?}"
        );
        assert!(
            s.buffer_waits > 0,
            "one spare buffer must have run out: {s:?}"
        );
        let e = cache.wait(6).unwrap_err().to_string();
        assert!(e.contains("flush 6 was not started"), "{e}");
        cache.close().unwrap();
        assert!(server.join().unwrap() == model);
    }

    /// Regression: a flush that needs no acknowledgement (only RMAs) leaves it unread; a
    /// cache dropped after that left it to the next cache on the endpoint, which took it
    /// for the acknowledgement of its own flush ("expected ... flush 1, got Ack(33)").
    #[test]
    fn a_new_cache_ignores_acknowledgements_meant_for_a_dropped_one() {
        let (tx, rx) = pair("shm");
        let server = std::thread::spawn(move || {
            let w = rx.register(4096, Access::READ_WRITE).unwrap();
            let mut a = Applier::new(&*rx, w);
            a.announce().unwrap();
            // Slow: every flush is acknowledged 100 ms after the previous one.
            loop {
                std::thread::sleep(Duration::from_millis(100));
                if a.next_flush(Some(WAIT)).unwrap().is_none() {
                    break;
                }
            }
        });
        let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
        let cfg = CacheConfig::new()
            .geometry(small())
            .transfer(Transfer::Push);
        let mut first = CommCache::new(&*tx, remote, cfg.clone()).unwrap();
        for k in 0..3u64 {
            first.write(k * 32, &[7; 32]).unwrap(); // whole ways: RMAs only
            first.flush().unwrap();
        }
        drop(first); // three acknowledgements still on their way
        let mut second = CommCache::new(&*tx, remote, cfg).unwrap();
        second.insert(128, &[5; 8]).unwrap();
        second.insert(144, &[5; 8]).unwrap(); // scattered: a message the applier copies
        second.flush().unwrap();
        let mut peek = [0u8; 24];
        tx.map_remote(remote.offset + 128, 24)
            .unwrap()
            .read_at(0, &mut peek)
            .unwrap();
        assert_eq!(
            peek,
            [[5u8; 8], [0; 8], [5; 8]].concat()[..],
            "flush returned early"
        );
        second.close().unwrap();
        server.join().unwrap();
    }

    #[test]
    fn a_window_too_large_for_the_block_directory_is_refused() {
        let (tx, _rx) = pair("shm");
        let remote = RemoteWindow {
            offset: 1 << 20,
            len: 1 << 50,
        };
        let e = CommCache::new(&*tx, remote, CacheConfig::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("use longer ways"), "{e}");
    }

    #[test]
    fn default_geometry_makes_32_kib_ways_and_a_2_mib_cache() {
        let g = Geometry::default();
        assert_eq!(g.way_bytes(), 32 << 10);
        assert_eq!(g.capacity(), 2 << 20);
        g.validate().unwrap();
        assert_eq!(g.to_string(), "16s×4w×512L×64B");
    }

    #[test]
    fn bad_geometries_name_the_field() {
        let bad = |g: Geometry, what: &str| {
            let e = g.validate().unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        };
        let d = Geometry::default();
        bad(
            Geometry {
                line_bytes: 48,
                ..d
            },
            "line_bytes is 48",
        );
        bad(
            Geometry {
                lines_per_way: 0,
                ..d
            },
            "lines_per_way is 0",
        );
        bad(Geometry { ways: 0, ..d }, "ways is 0");
        bad(Geometry { sets: 3, ..d }, "sets is 3");
        bad(
            Geometry {
                sets: 65536,
                ways: 64,
                ..d
            },
            "exceeds",
        );
    }

    #[test]
    fn placement_names_round_trip() {
        for p in [Placement::FirstFree, Placement::RoundRobin] {
            assert_eq!(p.to_string().parse::<Placement>().unwrap(), p);
        }
        assert!("lru"
            .parse::<Placement>()
            .unwrap_err()
            .contains("first-free"));
    }
}
