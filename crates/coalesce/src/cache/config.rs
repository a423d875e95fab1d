//! The cache's settings and counters: [`Geometry`], [`Placement`], [`Transfer`],
//! [`CacheConfig`], the [`RemoteWindow`] written into, and [`CacheStats`].

use std::time::Duration;

use accio_core::Endpoint;

use crate::error::{Error, Result};
use crate::wire;

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

/// Settings of a [`CommCache`](super::CommCache).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheConfig {
    pub(super) geometry: Geometry,
    pub(super) placement: Placement,
    pub(super) transfer: Transfer,
    /// `None`: one spare per way.
    pub(super) in_flight: Option<usize>,
    pub(super) checked: Option<(u32, u32)>,
    pub(super) flush_timeout: Option<Duration>,
}

/// Who copies an evicted way's scattered lines into the peer window (see the
/// [module docs](super)); contiguous lines always go as one RMA.
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
    /// --backend shm --sizes 64 --pattern random --transfer pull --reps 11`
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

    /// How long [`CommCache::flush`](super::CommCache::flush) waits for the receiver's
    /// acknowledgement (default `None`: as long as the peer lives; a dead peer fails it
    /// within a second).
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
