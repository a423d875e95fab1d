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

use std::fmt;
use std::str::FromStr;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use accio::{Access, Endpoint, ErrorKind, Listener, RmaFlags};
use accio_coalesce::{
    AggConfig, Aggregator, Applier, CacheConfig, CacheStats, CommCache, Deaggregator, Geometry,
    RemoteWindow,
};

use accio_results::event::Event;
use accio_results::model::{CeilingSource, Figure, Recorder, Unit};
use accio_results::size::{format_size, parse_size};

pub use accio_coalesce::{Placement, Transfer};
pub use accio_results::metric::coalesce::{self as metric, BENCH};
pub use pattern::Pattern;

use crate::emit;

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
    /// they fill. Default on; quick: off.
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

    /// The quick variant (what plain `accio bench` runs): 64-byte items, default geometry.
    pub fn quick() -> Options {
        Options {
            items: vec![64],
            geometries: vec![GeometrySpec::default_cache()],
            placements: vec![Placement::FirstFree],
            transfers: vec![Transfer::Auto],
            spill: false,
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
        if self.spill {
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
}

/// What the receiver thread is told to do next.
enum Cmd {
    /// Run an applier (checked with this node id, or not) until the cache closes.
    Apply(Option<u32>),
    /// Receive this many messages (aggregated batches or plain), then acknowledge. `fresh`:
    /// they come from a new aggregator, whose sequence numbers start again at 0.
    Count {
        messages: u64,
        aggregated: bool,
        fresh: bool,
    },
}

/// The acknowledgement the receiver sends after counting messages.
const COUNTED: &[u8] = b"counted";

/// A connected endpoint pair: this thread sends, a receiver thread owns the window.
struct Pair {
    backend: String,
    ep: Option<Box<dyn Endpoint>>,
    remote: RemoteWindow,
    ctl: Option<mpsc::Sender<Cmd>>,
    receiver: Option<JoinHandle<Result<(), String>>>,
}

impl Pair {
    fn open(backend: &str, window: u64) -> Result<Pair, Error> {
        let ep_err = |what: &str, e: accio::Error| Error::Endpoint {
            backend: backend.into(),
            what: what.into(),
            source: Box::new(e),
        };
        let addr = match backend {
            "shm" => format!(
                "shm://accio-coalesce-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ),
            "tcp" => "tcp://127.0.0.1:0".to_string(),
            other => return Err(Error::Options(format!("unknown backend {other:?}"))),
        };
        let listener = accio::listen(&addr).map_err(|e| ep_err("listening", e))?;
        let addr = listener.local_addr().to_string();
        let (ctl, rx) = mpsc::channel();
        let receiver = std::thread::Builder::new()
            .name(format!("coalesce-rx-{backend}"))
            .spawn(move || receiver_main(listener, window as usize, rx))
            .map_err(|e| Error::Receiver {
                backend: backend.into(),
                reason: format!("starting the receiver thread: {e}"),
            })?;
        let mut pair = Pair {
            backend: backend.into(),
            ep: None,
            remote: RemoteWindow { offset: 0, len: 0 },
            ctl: Some(ctl),
            receiver: Some(receiver),
        };
        let ep = match accio::connect(&addr, WAIT) {
            Ok(ep) => ep,
            Err(e) => return Err(pair.fail(ep_err("connecting", e))),
        };
        match RemoteWindow::receive(&*ep, Some(WAIT)) {
            Ok(r) => pair.remote = r,
            Err(e) => {
                pair.ep = Some(ep);
                return Err(pair.fail(pair.co_err("receiving the window", e)));
            }
        }
        pair.ep = Some(ep);
        Ok(pair)
    }

    fn ep(&self) -> &dyn Endpoint {
        &**self.ep.as_ref().expect("open pair")
    }

    fn tell(&self, cmd: Cmd) {
        // A receiver that is gone shows as an endpoint error on the next call.
        let _ = self.ctl.as_ref().expect("open pair").send(cmd);
    }

    fn ep_err(&self, what: impl Into<String>, e: accio::Error) -> Error {
        Error::Endpoint {
            backend: self.backend.clone(),
            what: what.into(),
            source: Box::new(e),
        }
    }

    fn co_err(&self, what: impl Into<String>, e: accio_coalesce::Error) -> Error {
        Error::Coalesce {
            backend: self.backend.clone(),
            what: what.into(),
            source: Box::new(e),
        }
    }

    /// Ends the pair after an error: the receiver's own error, if it has one, explains
    /// more than the sender's (a sender only sees the peer go away).
    fn fail(&mut self, e: Error) -> Error {
        match self.shutdown() {
            Err(r) => r,
            Ok(()) => e,
        }
    }

    /// Closes the channel and the endpoint, then joins the receiver.
    fn shutdown(&mut self) -> Result<(), Error> {
        self.ctl = None;
        self.ep = None;
        match self.receiver.take().map(JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(reason))) => Err(Error::Receiver {
                backend: self.backend.clone(),
                reason,
            }),
            Some(Err(_)) => Err(Error::Receiver {
                backend: self.backend.clone(),
                reason: "the receiver thread panicked".into(),
            }),
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The receiver thread: accept, register and announce the window, then serve commands
/// until the channel closes.
fn receiver_main(
    listener: Box<dyn Listener>,
    window: usize,
    rx: mpsc::Receiver<Cmd>,
) -> Result<(), String> {
    let ep = listener
        .accept(Some(WAIT))
        .map_err(|e| format!("accepting: {e}"))?;
    let win = ep
        .register(window, Access::WRITE)
        .map_err(|e| format!("registering a {window}-byte window: {e}"))?;
    Applier::new(&*ep, win.clone())
        .announce()
        .map_err(|e| format!("announcing the window: {e}"))?;
    let mut buf = Vec::new();
    // Sequence numbers continue from sample to sample of one aggregator.
    let mut de = Deaggregator::new(RECEIVER_ID);
    while let Ok(cmd) = rx.recv() {
        match cmd {
            Cmd::Apply(checked) => {
                let mut a = Applier::new(&*ep, win.clone());
                if let Some(me) = checked {
                    a = a.checked(me);
                }
                loop {
                    match a.next_flush(None) {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        // The sender went away: it reports its own error.
                        Err(e) if is_peer_gone(&e) => return Ok(()),
                        Err(e) => return Err(format!("applying cache transfers: {e}")),
                    }
                }
            }
            Cmd::Count {
                messages,
                aggregated,
                fresh,
            } => {
                if fresh {
                    de = Deaggregator::new(RECEIVER_ID);
                }
                let mut got = 0u64;
                while got < messages {
                    let r = if aggregated {
                        de.recv(&*ep, &mut buf, None).map(|b| b.count() as u64)
                    } else {
                        ep.recv(&mut buf)
                            .map(|_| 1)
                            .map_err(accio_coalesce::Error::from)
                    };
                    match r {
                        Ok(n) => got += n,
                        Err(e) if is_peer_gone(&e) => return Ok(()),
                        Err(e) => return Err(format!("receiving messages: {e}")),
                    }
                }
                if let Err(e) = ep.send(COUNTED) {
                    return Err(format!("acknowledging {got} messages: {e}"));
                }
            }
        }
    }
    Ok(())
}

fn is_peer_gone(e: &accio_coalesce::Error) -> bool {
    matches!(e, accio_coalesce::Error::Endpoint(inner) if inner.kind() == ErrorKind::PeerGone)
}

/// Payloads of items: 64 different item-sized patterns, used in turn.
struct Payloads {
    bytes: Vec<u8>,
    item: usize,
}

impl Payloads {
    fn new(item: usize) -> Payloads {
        Payloads {
            bytes: (0..item * 64).map(|i| (i * 31 + i / 7) as u8).collect(),
            item,
        }
    }

    #[inline]
    fn get(&self, i: usize) -> &[u8] {
        let at = (i & 63) * self.item;
        &self.bytes[at..at + self.item]
    }
}

/// One cache measurement's setting.
#[derive(Clone, Copy, Debug)]
struct CacheRun {
    geometry: GeometrySpec,
    placement: Placement,
    transfer: Transfer,
    checked: bool,
}

/// The samples of one figure and what the transfers looked like.
struct Outcome {
    /// Million items per second, one per measured sample.
    mops: Vec<f64>,
    /// Items per sample (for `direct`: the median sample's).
    items: usize,
    /// Transfers per sample.
    transfers: f64,
    /// Bytes handed to the endpoint per transfer.
    avg_transfer: f64,
    /// Items per line sent.
    dedup: f64,
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

/// The transfers `opts` asks for, as they resolve on a backend that can (`can_pull`) or
/// cannot map peer memory; pull where it is impossible is reported as skipped.
fn resolve_transfers(
    opts: &Options,
    can_pull: bool,
    events: &mut dyn FnMut(Event<'_>),
) -> Vec<Transfer> {
    let mut out: Vec<Transfer> = Vec::new();
    for &t in &opts.transfers {
        let t = match t {
            Transfer::Pull if !can_pull => {
                events(Event::Skipped(
                    "pull skipped (the backend cannot map peer memory)",
                ));
                continue;
            }
            Transfer::Auto if can_pull => Transfer::Pull,
            Transfer::Auto => Transfer::Push,
            t => t,
        };
        if !out.contains(&t) {
            out.push(t);
        }
    }
    if out.is_empty() {
        out.push(Transfer::Push);
    }
    out
}

/// The cache measurements of one pattern, grouped by the footprint they write (the
/// footprint decides the offsets, which each group shares with its direct baseline).
fn plan_runs(
    opts: &Options,
    pattern: Pattern,
    transfers: &[Transfer],
) -> Vec<(u64, Vec<CacheRun>)> {
    let mut groups: Vec<(u64, Vec<CacheRun>)> = Vec::new();
    let mut add = |fp: u64, run: CacheRun| match groups.iter_mut().find(|(f, _)| *f == fp) {
        Some((_, v)) => v.push(run),
        None => groups.push((fp, vec![run])),
    };
    for (gi, &geometry) in opts.geometries.iter().enumerate() {
        let fp = opts.footprint(pattern, geometry);
        for &transfer in transfers {
            for &placement in &opts.placements {
                add(
                    fp,
                    CacheRun {
                        geometry,
                        placement,
                        transfer,
                        checked: false,
                    },
                );
            }
        }
        if opts.checked && gi == 0 {
            // Checked lines always travel as messages the sender pushes.
            add(
                fp,
                CacheRun {
                    geometry,
                    placement: opts.placements[0],
                    transfer: Transfer::Push,
                    checked: true,
                },
            );
        }
    }
    if opts.spill && pattern == Pattern::Random && opts.footprint.is_none() {
        let geometry = opts.geometries[0];
        add(
            4 * geometry.capacity(),
            CacheRun {
                geometry,
                placement: opts.placements[0],
                transfer: transfers[0],
                checked: false,
            },
        );
    }
    groups
}

fn run_backend(
    opts: &Options,
    pair: &Pair,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<(), Error> {
    let backend = pair.backend.as_str();
    let ceiling = large_msg_bw(pair, opts)?;
    let large = ceiling.summary.median;
    record(rec, events, ceiling)?;
    let can_pull = pair.ep().capabilities().map_remote;
    let transfers = resolve_transfers(opts, can_pull, &mut |e| match e {
        Event::Skipped(why) => events(Event::Skipped(&format!("{backend}: {why}"))),
        e => events(e),
    });
    for &item in &opts.items {
        for &pattern in &opts.patterns {
            for (footprint, runs) in plan_runs(opts, pattern, &transfers) {
                let pass = pattern::pass_items(pattern, item, footprint);
                let cap = opts.items_per_sample.min((64usize << 20) / item);
                let passes = (cap / pass).max(1);
                let offs = pattern::offsets(pattern, item, footprint, passes, 0x5EED ^ item as u64);
                let case = Case {
                    backend,
                    pattern,
                    item,
                    footprint,
                    large_gbps: large,
                };
                let direct = direct_rma(pair, opts, &offs, item)?;
                record_pair(rec, events, &case, None, passes, &direct)?;
                for run in runs {
                    let out = cached(pair, opts, run, &offs, pass, item)?;
                    record_pair(rec, events, &case, Some(run), passes, &out)?;
                }
            }
        }
        if opts.aggregate {
            for aggregated in [false, true] {
                let f = messages(pair, opts, item, aggregated)?;
                record(rec, events, f)?;
            }
        }
        events(Event::Advanced(1));
    }
    Ok(())
}

/// What identifies a group of item figures, and the ceiling they are read against.
struct Case<'a> {
    backend: &'a str,
    pattern: Pattern,
    item: usize,
    footprint: u64,
    large_gbps: f64,
}

/// Records `item_rate` and `item_bw` of one outcome: `run` is the cache setting (`None`
/// for direct RMA). `repeated` figures get no ceiling: the cache absorbs its rewrites, so
/// its item rate counts bytes that never had to move.
fn record_pair(
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    case: &Case<'_>,
    run: Option<CacheRun>,
    passes: usize,
    out: &Outcome,
) -> Result<(), Error> {
    let item = case.item;
    let mode = match run {
        None => "direct",
        Some(r) if r.checked => "checked",
        Some(_) => "cache",
    };
    let with = |metric: &str, unit: Unit, samples: Vec<f64>| -> Figure {
        let mut f = Figure::new(BENCH, metric, unit, samples)
            .expect("measured samples")
            .param("backend", case.backend)
            .param("pattern", case.pattern.name())
            .param("item", item as u64)
            .param("mode", mode)
            .param("footprint", case.footprint)
            .param("items", out.items as u64);
        if let Some(r) = run {
            f = f
                .param("geometry", r.geometry.to_string())
                .param("placement", r.placement.to_string())
                .param("transfer", r.transfer.to_string())
                .param("passes", passes as u64);
        }
        f.param("avg_transfer_bytes", out.avg_transfer.round() as u64)
            .param("transfers", out.transfers.round() as u64)
            .param("dedup", (out.dedup * 100.0).round() / 100.0)
    };
    let method = match mode {
        "direct" => "one vwrite_to per item, closed by fence_mark + fence_wait; a sample stops \
                     after its time budget"
            .to_string(),
        m => format!(
            "CommCache::insert per item ({}), flush_async after every pass of the pattern; a \
             sample ends when the applier acknowledged the last flush (with pull, the receiver \
             copies pass k on its core while the sender inserts pass k+1)",
            if m == "checked" {
                "checked mode: every line ships and verifies sender, destination, offset"
            } else {
                "one item = one line"
            }
        ),
    };
    let mut rate = with(metric::ITEM_RATE, Unit::MopsPerSec, out.mops.clone()).method(&method);
    let bw: Vec<f64> = out.mops.iter().map(|m| m * item as f64 / 1e3).collect();
    let mut bw = with(metric::ITEM_BW, Unit::GBps, bw).method(method);
    if case.pattern != Pattern::Repeated && case.large_gbps > 0.0 {
        rate = rate.ceiling(
            format!("large-message bw / {item} B"),
            case.large_gbps * 1e3 / item as f64,
            CeilingSource::Measured,
        );
        bw = bw.ceiling("large-message bw", case.large_gbps, CeilingSource::Measured);
    }
    record(rec, events, rate)?;
    record(rec, events, bw)
}

fn record(rec: &mut Recorder, events: &mut dyn FnMut(Event<'_>), f: Figure) -> Result<(), Error> {
    Ok(emit::figure(rec, events, f)?)
}

/// The backend's large-message RMA bandwidth: `write_to` of [`LARGE_MSG`] from a
/// registered, pre-faulted local window over the whole peer window, back to back. The
/// first pass (dropped) also faults in the peer window.
fn large_msg_bw(pair: &Pair, opts: &Options) -> Result<Figure, Error> {
    let ep = pair.ep();
    let local = ep
        .register(LARGE_MSG, Access::READ)
        .map_err(|e| pair.ep_err("registering the ceiling's source window", e))?;
    local.fill(0x5a);
    let chunks = (pair.remote.len / LARGE_MSG as u64).max(1);
    // At least 32 MiB per sample, so one sample is not one transfer.
    let per_sample = chunks.max(16);
    // Cheap (a few ms each) and every ratio of the backend is read against its median:
    // at least 9 samples, so one disturbed sample cannot move it.
    let reps = opts.repetitions.max(9);
    let mut samples = Vec::new();
    for rep in 0..=reps {
        let t = Instant::now();
        for i in 0..per_sample {
            let to = pair.remote.offset + (i % chunks) * LARGE_MSG as u64;
            ep.write_to(local.offset(), LARGE_MSG, to, RmaFlags::ASYNC)
                .map_err(|e| pair.ep_err("large-message write_to", e))?;
        }
        let mark = ep.fence_mark().map_err(|e| pair.ep_err("fence_mark", e))?;
        ep.fence_wait(mark)
            .map_err(|e| pair.ep_err("fence_wait", e))?;
        let dt = t.elapsed().as_secs_f64();
        if rep > 0 {
            samples.push((per_sample * LARGE_MSG as u64) as f64 / dt / 1e9);
        }
    }
    let _ = ep.unregister(local.offset());
    Ok(
        Figure::new(BENCH, metric::LARGE_MSG_BW, Unit::GBps, samples)
            .expect("measured samples")
            .param("backend", pair.backend.as_str())
            .param("size", LARGE_MSG as u64)
            .method(format!(
                "write_to of {} from a registered local window over the {} peer window, \
                 back to back, closed by fence_mark + fence_wait",
                format_size(LARGE_MSG as u64),
                format_size(pair.remote.len)
            )),
    )
}

/// One `vwrite_to` per item, in pattern order, until the items or the time budget run out.
fn direct_rma(pair: &Pair, opts: &Options, offs: &[u64], item: usize) -> Result<Outcome, Error> {
    let ep = pair.ep();
    let payloads = Payloads::new(item);
    let mut mops = Vec::new();
    let mut counts = Vec::new();
    for rep in 0..=opts.repetitions {
        let t = Instant::now();
        let mut done = 0usize;
        for chunk in offs.chunks(1024) {
            for &off in chunk {
                ep.vwrite_to(
                    payloads.get(done),
                    pair.remote.offset + off,
                    RmaFlags::ASYNC,
                )
                .map_err(|e| pair.ep_err(format!("vwrite_to of a {item}-byte item"), e))?;
                done += 1;
            }
            if t.elapsed() >= opts.direct_budget {
                break;
            }
        }
        let mark = ep.fence_mark().map_err(|e| pair.ep_err("fence_mark", e))?;
        ep.fence_wait(mark)
            .map_err(|e| pair.ep_err("fence_wait", e))?;
        let dt = t.elapsed().as_secs_f64();
        if rep > 0 {
            mops.push(done as f64 / dt / 1e6);
            counts.push(done);
        }
    }
    counts.sort_unstable();
    let items = counts[counts.len() / 2];
    Ok(Outcome {
        mops,
        items,
        transfers: items as f64,
        avg_transfer: item as f64,
        dedup: 1.0,
    })
}

/// Every item through a [`CommCache`], flushed after every pass.
fn cached(
    pair: &Pair,
    opts: &Options,
    run: CacheRun,
    offs: &[u64],
    pass: usize,
    item: usize,
) -> Result<Outcome, Error> {
    let geometry = run.geometry.for_item(item).expect("validated options");
    let mut config = CacheConfig::new()
        .geometry(geometry)
        .placement(run.placement)
        .transfer(run.transfer)
        .flush_timeout(Some(WAIT));
    if run.checked {
        config = config.checked(SENDER_ID, RECEIVER_ID);
    }
    pair.tell(Cmd::Apply(run.checked.then_some(RECEIVER_ID)));
    let what = format!("cache {} {} {}", run.geometry, run.placement, run.transfer);
    let mut cache = CommCache::new(pair.ep(), pair.remote, config)
        .map_err(|e| pair.co_err(format!("creating {what}"), e))?;
    let payloads = Payloads::new(item);
    let mut mops = Vec::new();
    let mut total = CacheStats::default();
    for rep in 0..=opts.repetitions {
        let before = cache.stats();
        let t = Instant::now();
        let mut epoch = 0;
        for p in offs.chunks(pass) {
            cache
                .insert_all(p.iter().enumerate().map(|(i, &off)| (off, payloads.get(i))))
                .map_err(|e| pair.co_err(format!("{what}: insert"), e))?;
            epoch = cache
                .flush_async()
                .map_err(|e| pair.co_err(format!("{what}: flush"), e))?;
        }
        cache
            .wait(epoch)
            .map_err(|e| pair.co_err(format!("{what}: waiting for flush {epoch}"), e))?;
        let dt = t.elapsed().as_secs_f64();
        if rep > 0 {
            mops.push(offs.len() as f64 / dt / 1e6);
            let s = cache.stats();
            total.lines_in += s.lines_in - before.lines_in;
            total.lines_sent += s.lines_sent - before.lines_sent;
            total.transfers += s.transfers - before.transfers;
            total.wire_bytes += s.wire_bytes - before.wire_bytes;
        }
    }
    cache
        .close()
        .map_err(|e| pair.co_err(format!("{what}: close"), e))?;
    let reps = opts.repetitions as f64;
    Ok(Outcome {
        mops,
        items: offs.len(),
        transfers: total.transfers as f64 / reps,
        avg_transfer: total.avg_transfer_bytes(),
        dedup: if total.lines_sent == 0 {
            0.0
        } else {
            total.lines_in as f64 / total.lines_sent as f64
        },
    })
}

/// Messages of `item` bytes to the receiver, each its own `send` or through an
/// [`Aggregator`] with its default batches; the receiver acknowledges once it has counted
/// them all.
fn messages(pair: &Pair, opts: &Options, item: usize, aggregated: bool) -> Result<Figure, Error> {
    let ep = pair.ep();
    let payloads = Payloads::new(item);
    // Plain sends cost a system call each on tcp: fewer of them keep a sample short.
    let n = if aggregated {
        opts.items_per_sample
    } else {
        (opts.items_per_sample / 8).max(1)
    };
    let cfg = AggConfig::new(SENDER_ID);
    let mut agg =
        Aggregator::new(vec![ep], cfg).map_err(|e| pair.co_err("creating the aggregator", e))?;
    let mut ack = Vec::new();
    let mut mops = Vec::new();
    for rep in 0..=opts.repetitions {
        pair.tell(Cmd::Count {
            messages: n as u64,
            aggregated,
            fresh: rep == 0,
        });
        let t = Instant::now();
        for i in 0..n {
            if aggregated {
                agg.send(0, payloads.get(i))
                    .map_err(|e| pair.co_err("aggregator send", e))?;
            } else {
                ep.send(payloads.get(i))
                    .map_err(|e| pair.ep_err("send", e))?;
            }
        }
        if aggregated {
            agg.flush()
                .map_err(|e| pair.co_err("aggregator flush", e))?;
        }
        ep.recv_timeout(&mut ack, Some(WAIT))
            .map_err(|e| pair.ep_err("waiting for the receiver's count", e))?;
        let dt = t.elapsed().as_secs_f64();
        if ack != COUNTED {
            return Err(Error::Receiver {
                backend: pair.backend.clone(),
                reason: format!(
                    "expected the count acknowledgement, got {} bytes",
                    ack.len()
                ),
            });
        }
        if rep > 0 {
            mops.push(n as f64 / dt / 1e6);
        }
    }
    let s = agg.stats();
    let mode = if aggregated { "aggregate" } else { "send" };
    let mut f = Figure::new(BENCH, metric::MSG_RATE, Unit::MopsPerSec, mops)
        .expect("measured samples")
        .param("backend", pair.backend.as_str())
        .param("item", item as u64)
        .param("mode", mode)
        .param("items", n as u64);
    if aggregated && s.batches > 0 {
        f = f.param("avg_transfer_bytes", s.wire_bytes / s.batches);
        f = f.method(
            "Aggregator::send per message into 64 KiB per-destination batches, one flush per \
             sample; ends when the receiver counted every message",
        );
    } else {
        f = f
            .param("avg_transfer_bytes", item as u64)
            .method("one Endpoint::send per message; ends when the receiver counted every message");
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_specs_parse_print_and_map_to_lines() {
        let g: GeometrySpec = "16x4x32K".parse().unwrap();
        assert_eq!(
            g,
            GeometrySpec {
                sets: 16,
                ways: 4,
                way_bytes: 32 << 10
            }
        );
        assert_eq!(g.to_string(), "16x4x32K");
        assert_eq!(g.capacity(), 2 << 20);
        let l = g.for_item(8).unwrap();
        assert_eq!((l.line_bytes, l.lines_per_way), (8, 4096));
        assert!(g.for_item(48).is_none());
        assert!(GeometrySpec { way_bytes: 64, ..g }.for_item(128).is_none());
        assert_eq!(GeometrySpec::default_cache(), g);
    }

    #[test]
    fn bad_geometry_specs_are_clear_errors() {
        let e = |s: &str| s.parse::<GeometrySpec>().unwrap_err();
        assert!(e("16x4").contains("SETSxWAYSxWAYBYTES"), "{}", e("16x4"));
        assert!(e("ax4x32K").contains("sets \"a\""), "{}", e("ax4x32K"));
        assert!(
            e("16x4x48K").contains("not a power of two"),
            "{}",
            e("16x4x48K")
        );
        assert!(e("3x4x32K").contains("sets"), "{}", e("3x4x32K"));
        assert!(e("16x0x32K").contains("ways"), "{}", e("16x0x32K"));
    }

    #[test]
    fn options_reject_what_cannot_be_measured() {
        let mut o = Options::quick();
        o.validate().unwrap();
        o.items = vec![48];
        assert!(o
            .validate()
            .unwrap_err()
            .to_string()
            .contains("power of two"));
        o.items = vec![4096];
        o.geometries = vec!["16x4x1K".parse().unwrap()];
        assert!(o
            .validate()
            .unwrap_err()
            .to_string()
            .contains("does not fit a way"));
    }

    #[test]
    fn window_covers_every_footprint() {
        let o = Options::full();
        // streaming and spill use 4x the 2 MiB default cache.
        assert_eq!(o.window_bytes(), 8 << 20);
        let mut q = Options::quick();
        q.footprint = Some(3 << 20);
        assert_eq!(q.window_bytes(), 4 << 20);
    }

    /// The whole bench on shm with tiny settings: every figure is recorded with its
    /// parameters and ceiling, and the transfer sizes are what the patterns imply.
    #[test]
    fn quick_run_on_shm_records_every_figure() {
        let mut o = Options::quick();
        o.backends = vec!["shm".into()];
        o.patterns = vec![Pattern::Random, Pattern::Permutation, Pattern::Repeated];
        o.checked = true;
        o.repetitions = 1;
        o.items_per_sample = 1 << 16;
        o.geometries = vec!["8x4x8K".parse().unwrap()];
        o.direct_budget = Duration::from_millis(5);
        let mut rec = Recorder::new(None).unwrap();
        let mut lines = Vec::new();
        run(&o, &mut rec, &mut |e| {
            if let Event::Figure(f) = e {
                lines.push(accio_report::text::coalesce::describe(f));
            }
        })
        .unwrap();
        let r = rec.report();
        let large: Vec<_> = r.select(BENCH, metric::LARGE_MSG_BW).collect();
        assert_eq!(large.len(), 1);
        assert!(large[0].summary.median > 0.0);
        let rates: Vec<_> = r.select(BENCH, metric::ITEM_RATE).collect();
        // 3 patterns x (direct, cache, checked).
        assert_eq!(rates.len(), 9);
        let find = |p: &str, m: &str| {
            rates
                .iter()
                .find(|f| f.param_str("pattern") == p && f.param_str("mode") == m)
                .unwrap()
        };
        let perm = find("permutation", "cache");
        assert_eq!(perm.param_str("geometry"), "8x4x8K");
        assert_eq!(perm.param_str("transfer"), "pull");
        // Footprint = capacity, every slot once: every way is full at the flush and
        // leaves whole (a pulled way also costs a small notice).
        let avg = perm.params["avg_transfer_bytes"].as_u64().unwrap();
        assert!((8192..8192 + 64).contains(&avg), "{avg}");
        assert_eq!(perm.param_str("dedup"), "1.0");
        assert!(perm.ceiling.is_some());
        // Independent draws: 1 / (1 - 1/e) = 1.58 items per line sent.
        let random = find("random", "cache");
        let dedup = random.params["dedup"].as_f64().unwrap();
        assert!((1.5..1.67).contains(&dedup), "{dedup}");
        let repeated = find("repeated", "cache");
        assert!(repeated.ceiling.is_none());
        // 4096 items per pass over 512 hot slots: each line sent once per pass for ~8 items.
        let dedup = repeated.params["dedup"].as_f64().unwrap();
        assert!((7.5..8.5).contains(&dedup), "{dedup}");
        let direct = find("random", "direct");
        assert_eq!(direct.param_str("avg_transfer_bytes"), "64");
        assert!(find("random", "checked").summary.median > 0.0);
        assert_eq!(r.select(BENCH, metric::ITEM_BW).count(), 9);
        assert_eq!(r.select(BENCH, metric::MSG_RATE).count(), 2);
        assert!(
            lines.iter().any(|l| l.contains("permutation 64 cache")),
            "{lines:?}"
        );
        let table = accio_report::text::coalesce::render_tables(r);
        assert!(table.contains("large-message bandwidth"), "{table}");
        assert!(
            table.contains("shm permutation 64 B, cache 8x4x8K pull"),
            "{table}"
        );
    }
}
