//! Coalescing bench: small items into a peer window, with and without the communication
//! cache of `accio-coalesce` (seed 001's `COMMUNICATION_CACHE`), and small messages with
//! and without per-destination aggregation.
//!
//! For every backend, item size and access pattern ([`pattern`]) it measures
//!
//! - **`item_rate`** (Mop/s, million items per second) and **`item_bw`** (GB/s, item bytes
//!   per second) in three modes:
//!   - `direct`: each item is its own `vwrite_to` straight into the window (one RMA per
//!     item, the uncoalesced baseline), closed by `fence_mark` + `fence_wait`. A sample
//!     stops after a time budget, so slow backends do not take minutes; its rate is the
//!     items it wrote over its time;
//!   - `cache`: each item is [`CommCache::insert`]ed (one item is one line: the cache's
//!     line size is set to the item size and lines per way to `way bytes / item`, so a way
//!     is the same transfer size for every item size); `flush_async` after each pass of
//!     the pattern, and a sample ends when the last flush is acknowledged, i.e. when the
//!     receiver's applier confirmed that every line is in the window. Each geometry,
//!     placement and [`Transfer`] (push: the sender copies, one RMA or message per way;
//!     pull: the receiver copies on its own core) is a figure of its own;
//!   - `checked`: the same with checked mode on (every line ships sender, destination and
//!     offset; the receiver verifies each).
//!
//!   Each figure records the average transfer size (`avg_transfer_bytes`: bytes handed to
//!   the endpoint per transfer, headers included), transfers per sample and `dedup`
//!   (items inserted per line sent) as parameters.
//! - **`large_msg_bw`** (GB/s): `write_to` of 2 MiB from a registered local window into
//!   the peer window, back to back over the whole window, closed by a fence — the
//!   backend's large-message bandwidth, measured on the same endpoint pair before that
//!   backend's figures (at least 9 samples). Every `item_bw` figure carries its median as
//!   the ceiling, every `item_rate` figure the same divided by the item size — except
//!   `repeated`, whose item rate counts rewrites the cache absorbed (bytes that never had
//!   to move), so no transfer ceiling applies to it.
//! - **`msg_rate`** (Mop/s): messages of the item size to one destination, each its own
//!   `send` (`send`) or through an [`Aggregator`] (`aggregate`); a sample ends when the
//!   receiver has counted every message and acknowledged.
//!
//! Footprints (the window bytes a pattern writes) default to the cache's capacity for
//! `random`, `permutation` and `repeated` and to 4× for `streaming`; the full run adds
//! `random` over 4× the capacity, where blocks leave the cache long before they fill and
//! coalescing stops paying: under uniform random writes a way leaves with about
//! `1 / (1 − capacity / footprint)` lines, whatever the eviction policy.
//!
//! # One process
//!
//! Both ends run in this process over a real endpoint pair: the bench thread sends, a
//! receiver thread accepts, registers the window and runs the [`Applier`] (or the
//! message counter), steered by an in-process channel. Neither is pinned, so on a
//! 2-core machine the receiver's copies (scattered ways, pulls) and the `tcp` backend's
//! reader threads compete with the sender. RMA on `shm` needs no receiver CPU.
//!
//! ```no_run
//! use accio_bench::coalesce::{self, Options};
//! use accio_results::model::Recorder;
//!
//! let mut opts = Options::quick();
//! opts.backends = vec!["shm".into()];
//! let mut rec = Recorder::new(None).unwrap();
//! coalesce::run(&opts, &mut rec, &mut |e| eprintln!("{e:?}")).unwrap();
//! print!("{}", accio_report::text::coalesce::render_tables(rec.report()));
//! ```

pub mod pattern;

mod measure;
mod pair;
mod sweep;
#[cfg(test)]
mod tests;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use accio_coalesce::Geometry;
// The module docs link these.
#[cfg(doc)]
use accio_coalesce::{Aggregator, Applier, CommCache};

use accio_results::event::Event;
use accio_results::model::Recorder;
use accio_results::size::{format_size, parse_size};

pub use accio_coalesce::{Placement, Transfer};
pub use accio_results::metric::coalesce::{self as metric, BENCH};
pub use pattern::Pattern;

use pair::Pair;
use sweep::run_backend;

/// Size of one transfer of the large-message ceiling: the transport bench's largest
/// default size, well past the size where RMA bandwidth stops growing.
pub const LARGE_MSG: usize = 2 << 20;
/// Sender id of the cache and the aggregator in checked mode.
const SENDER_ID: u32 = 1;
/// Receiver id (the destination index the sender uses).
const RECEIVER_ID: u32 = 0;
/// Longest wait for the receiver's connect, announce or acknowledgement.
const WAIT: Duration = Duration::from_secs(30);

/// A cache shape independent of the item size: `sets × ways × way bytes`, written
/// `16x4x32K`. Lines are as large as the items, so `lines per way = way bytes / item`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GeometrySpec {
    /// Number of sets (a power of two).
    pub sets: usize,
    /// Ways per set.
    pub ways: usize,
    /// Bytes per way: the largest transfer the cache makes (a power of two).
    pub way_bytes: usize,
}

impl GeometrySpec {
    /// The cache's default geometry ([`Geometry::default`]) as a spec.
    pub fn default_cache() -> GeometrySpec {
        let g = Geometry::default();
        GeometrySpec {
            sets: g.sets,
            ways: g.ways,
            way_bytes: g.way_bytes(),
        }
    }

    /// Bytes the cache holds.
    pub fn capacity(&self) -> u64 {
        (self.sets * self.ways * self.way_bytes) as u64
    }

    /// The cache geometry for `item`-byte lines; `None` when a way holds less than one
    /// item or the sizes are not powers of two.
    pub fn for_item(&self, item: usize) -> Option<Geometry> {
        if !item.is_power_of_two() || !self.way_bytes.is_power_of_two() || self.way_bytes < item {
            return None;
        }
        Some(Geometry {
            line_bytes: item,
            lines_per_way: self.way_bytes / item,
            ways: self.ways,
            sets: self.sets,
        })
    }
}

impl fmt::Display for GeometrySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}x{}x{}",
            self.sets,
            self.ways,
            format_size(self.way_bytes as u64)
        )
    }
}

impl FromStr for GeometrySpec {
    type Err = String;
    fn from_str(s: &str) -> Result<GeometrySpec, String> {
        let parts: Vec<&str> = s.split(['x', 'X']).collect();
        let [sets, ways, way] = parts[..] else {
            return Err(format!(
                "geometry {s:?} is not SETSxWAYSxWAYBYTES (e.g. 16x4x32K)"
            ));
        };
        let num = |v: &str, what: &str| -> Result<usize, String> {
            v.trim()
                .parse::<usize>()
                .map_err(|_| format!("geometry {s:?}: {what} {v:?} is not a number"))
        };
        let spec = GeometrySpec {
            sets: num(sets, "sets")?,
            ways: num(ways, "ways")?,
            way_bytes: parse_size(way).map_err(|e| format!("geometry {s:?}: {e}"))? as usize,
        };
        if !spec.way_bytes.is_power_of_two() {
            return Err(format!(
                "geometry {s:?}: way bytes {} is not a power of two",
                spec.way_bytes
            ));
        }
        // Validate the rest with the cache's own rules (8-byte lines: the smallest item).
        spec.for_item(8.min(spec.way_bytes))
            .expect("power-of-two way")
            .validate()
            .map_err(|e| format!("geometry {s:?}: {e}"))?;
        Ok(spec)
    }
}

/// What to measure. [`Options::full`] and [`Options::quick`] are the two presets.
#[derive(Clone, Debug)]
pub struct Options {
    /// Backends, by scheme name. Default: every backend this build knows.
    pub backends: Vec<String>,
    /// Access patterns. Default: all four.
    pub patterns: Vec<Pattern>,
    /// Item sizes in bytes (powers of two, 8 to 4096). Default 8, 64, 256; quick: 64.
    pub items: Vec<usize>,
    /// Cache geometries. Default: the cache's default (16x4x32K), 64x4x8K and 4x4x128K —
    /// the same 2 MiB in smaller and larger ways; quick: the default only.
    pub geometries: Vec<GeometrySpec>,
    /// Placement policies. Default: first-free and round-robin; quick: first-free.
    pub placements: Vec<Placement>,
    /// Who copies evicted ways ([`Transfer`]). Default: push and pull (pull is skipped on
    /// backends that cannot map peer memory); quick: auto (pull on `shm`, push on `tcp`).
    pub transfers: Vec<Transfer>,
    /// Bytes of window the patterns write. Default `None`: the cache capacity for
    /// `random` and `repeated` (the data fits the cache), 4× the capacity for `streaming`
    /// (ways leave on conflict misses during the pass).
    pub footprint: Option<u64>,
    /// Also run `random` over 4× the default geometry's capacity, where ways leave before
    /// they fill. Default on, quick too.
    pub spill: bool,
    /// Also measure checked mode (default geometry and first placement). Default on;
    /// quick: off.
    pub checked: bool,
    /// Also measure per-destination aggregation of messages. Default on.
    pub aggregate: bool,
    /// Measured samples per figure (one more is run first and dropped). Default 5;
    /// quick: 3.
    pub repetitions: usize,
    /// Items per cache sample (rounded to whole passes, capped at 64 MiB of items).
    /// Default 1 Mi; quick: 256 Ki.
    pub items_per_sample: usize,
    /// Time budget of one direct sample. Default 100 ms; quick: 50 ms.
    pub direct_budget: Duration,
}

impl Options {
    /// The full bench.
    pub fn full() -> Options {
        let d = GeometrySpec::default_cache();
        Options {
            backends: accio::schemes().iter().map(|s| s.to_string()).collect(),
            patterns: Pattern::ALL.to_vec(),
            items: vec![8, 64, 256],
            geometries: vec![
                d,
                GeometrySpec {
                    sets: d.sets * 4,
                    way_bytes: d.way_bytes / 4,
                    ..d
                },
                GeometrySpec {
                    sets: (d.sets / 4).max(1),
                    way_bytes: d.way_bytes * 4,
                    ..d
                },
            ],
            placements: vec![Placement::FirstFree, Placement::RoundRobin],
            transfers: vec![Transfer::Push, Transfer::Pull],
            footprint: None,
            spill: true,
            checked: true,
            aggregate: true,
            repetitions: 5,
            items_per_sample: 1 << 20,
            direct_budget: Duration::from_millis(100),
        }
    }

    /// The quick variant (what plain `accio bench` runs): 64-byte items, default geometry,
    /// and the random pattern also over 4 times the cache (so the rate is seen against the
    /// footprint, and a cache slower than direct writes shows).
    pub fn quick() -> Options {
        Options {
            items: vec![64],
            geometries: vec![GeometrySpec::default_cache()],
            placements: vec![Placement::FirstFree],
            transfers: vec![Transfer::Auto],
            spill: true,
            checked: false,
            repetitions: 3,
            items_per_sample: 1 << 18,
            direct_budget: Duration::from_millis(50),
            ..Options::full()
        }
    }

    /// Checks the options; the error names the first bad value.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |s: String| Err(Error::Options(s));
        if self.backends.is_empty() || self.patterns.is_empty() || self.items.is_empty() {
            return bad("no backend, pattern or item size to measure".into());
        }
        if self.geometries.is_empty() || self.placements.is_empty() || self.transfers.is_empty() {
            return bad("no cache geometry, placement or transfer to measure".into());
        }
        for &i in &self.items {
            if !(8..=4096).contains(&i) || !i.is_power_of_two() {
                return bad(format!(
                    "item size {i}: items must be a power of two from 8 to 4096 bytes (an item \
                     is one cache line)"
                ));
            }
            for g in &self.geometries {
                if g.for_item(i).is_none() {
                    return bad(format!("geometry {g}: a {i}-byte item does not fit a way"));
                }
            }
        }
        if let Some(f) = self.footprint {
            let largest = *self.items.iter().max().expect("not empty") as u64;
            if f < largest || f > 1 << 30 {
                return bad(format!(
                    "footprint {f} bytes: it must hold one {largest}-byte item and be at most 1 GiB"
                ));
            }
        }
        if self.repetitions == 0 || self.items_per_sample == 0 {
            return bad("repetitions and items per sample must be at least 1".into());
        }
        Ok(())
    }

    /// The footprint `pattern` writes with geometry `g`.
    fn footprint(&self, pattern: Pattern, g: GeometrySpec) -> u64 {
        self.footprint.unwrap_or(match pattern {
            Pattern::Streaming => 4 * g.capacity(),
            _ => g.capacity(),
        })
    }

    /// The largest footprint any measurement uses: the window's size.
    fn window_bytes(&self) -> u64 {
        let mut w = LARGE_MSG as u64 * 2;
        for &g in &self.geometries {
            for &p in &self.patterns {
                w = w.max(self.footprint(p, g));
            }
        }
        // The spill run uses the default footprint rule only; a fixed footprint has none.
        if self.spill && self.footprint.is_none() {
            w = w.max(4 * self.geometries[0].capacity());
        }
        w.div_ceil(LARGE_MSG as u64) * LARGE_MSG as u64
    }
}

/// Why the bench could not run or finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Options that cannot be measured.
    #[error("invalid coalesce bench options: {0}")]
    Options(String),
    /// An endpoint call of the bench itself failed.
    #[error("{backend}: {what}: {source}")]
    Endpoint {
        /// The backend.
        backend: String,
        /// What the bench was doing.
        what: String,
        /// The endpoint's error (boxed: errors stay small on the success path).
        #[source]
        source: Box<accio::Error>,
    },
    /// The cache or the aggregator failed.
    #[error("{backend}: {what}: {source}")]
    Coalesce {
        /// The backend.
        backend: String,
        /// What the bench was doing.
        what: String,
        /// The coalescing layer's error (boxed, as above).
        #[source]
        source: Box<accio_coalesce::Error>,
    },
    /// The receiver thread failed (its own error, which usually explains the sender's).
    #[error("{backend}: the receiving side failed: {reason}")]
    Receiver {
        /// The backend.
        backend: String,
        /// The receiver's error.
        reason: String,
    },
    /// The results file could not be written.
    #[error("recording results: {0}")]
    Record(#[from] std::io::Error),
    /// Ctrl-C (or [`crate::cancel::INTERRUPTED`]) ended the run between two measurements.
    #[error("interrupted")]
    Interrupted,
}

/// Ends the run with [`Error::Interrupted`] once Ctrl-C arrived; called between
/// measurements, where both sides of the pair are idle and it shuts down cleanly.
pub(super) fn check_interrupted() -> Result<(), Error> {
    if crate::cancel::interrupted() {
        return Err(Error::Interrupted);
    }
    Ok(())
}

/// Runs the bench: for every backend the ceiling, then every pattern and item size in
/// every mode, and the aggregation figures. Figures are recorded as they are measured;
/// `events` gets every figure, and one unit of work per backend and item size.
pub fn run(
    opts: &Options,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<(), Error> {
    opts.validate()?;
    events(Event::Started {
        bench: BENCH,
        total: (opts.backends.len() * opts.items.len()) as u64,
    });
    let window = opts.window_bytes();
    for backend in &opts.backends {
        events(Event::Step(&format!(
            "{backend}: connecting a pair with a {} window",
            format_size(window)
        )));
        let mut pair = Pair::open(backend, window)?;
        let r = run_backend(opts, &pair, rec, events);
        let closed = pair.shutdown();
        match (r, closed) {
            (Err(e), Err(rx)) => {
                events(Event::Skipped(&format!("{backend}: {e}")));
                return Err(rx);
            }
            (Err(e), Ok(())) => return Err(e),
            (Ok(()), closed) => closed?,
        }
    }
    events(Event::Done);
    Ok(())
}
