//! Transport bench: what each endpoint backend costs between two processes on one node.
//!
//! For every backend and message size the bench measures
//!
//! - **`latency`** (us): one-way latency, half the ping-pong round trip. Every round trip is
//!   timed; a sample is the median of one batch of round trips, halved; the figure is the
//!   median (and min–max) of the batch samples. Its ceiling is the time of one memcpy of the
//!   message (a message moves by at least one copy), at the memcpy bandwidth measured below.
//! - **`stream_bw`** (GB/s): many sends back to back, counted at the receiver from the first
//!   message's arrival to the last's.
//! - **`rma_write_bw`** (GB/s): `write_to` from a registered, pre-faulted window into the
//!   peer's window, closed by `fence_mark` + `fence_wait`.
//! - **`memcpy`** (GB/s): single-thread copy bandwidth of the same size
//!   ([`crate::mem::memcpy_gbps`]), measured by the driver just before that size's figures so
//!   that both see the same machine conditions; every bandwidth figure carries it as its
//!   ceiling.
//!
//! and once per backend
//!
//! - **`connect`** (us): `connect()` to a listening peer, timed by the connecting process;
//! - **`register`** / **`unregister`** (us): registering a fresh window of 64 KiB .. 64 MiB
//!   (the sizes seed 004 quotes for SCIF), and withdrawing and unmapping it.
//!
//! # Two processes
//!
//! The bench process (the *driver*) listens on a fresh address of each backend
//! (`shm://accio-bench-PID-N`, `tcp://127.0.0.1:0`), starts a peer process that connects
//! to it, and drives scenarios with small control messages over that same endpoint (see
//! [`proto`]). The `accio` binary starts itself as the peer (hidden subcommand
//! `__transport-peer`, which calls [`peer_main`]). With two or more CPUs the driver and the
//! peer are pinned to different ones. The peer dies with the driver; a peer that dies early
//! ends the run with an error naming the backend and the scenario. Figures are recorded as
//! they are measured, so an interrupted run keeps them.
//!
//! ```no_run
//! use accio_results::model::Recorder;
//! use accio_bench::transport::{self, Options, PeerCommand};
//!
//! let peer = PeerCommand {
//!     program: std::env::current_exe().unwrap(),
//!     args: vec!["__transport-peer".into()],
//! };
//! let mut opts = Options::new(peer);
//! opts.backends = vec!["tcp".into()];
//! opts.quick = true;
//! let mut rec = Recorder::new(None).unwrap();
//! transport::run(&opts, &mut rec, &mut |e| eprintln!("{e:?}")).unwrap();
//! print!("{}", accio_report::text::transport::render_tables(rec.report()));
//! ```

mod driver;
mod measure;
#[cfg(test)]
mod mock;
mod os;
mod peer;
mod plan;
pub mod proto;
mod session;
#[cfg(test)]
mod tests;

use std::time::Duration;

use accio_results::size::format_size;

pub use accio_results::metric::transport::{
    self as metric, BENCH, SEED_004_CONNECT_US, SEED_004_REGISTER_US,
};
pub use measure::run;
pub use os::{pick_cpus, AffinityGuard, PeerCommand};
pub use peer::{peer_main, serve, PeerConfig};
pub use plan::{
    Plan, SetupPlan, DEFAULT_SIZES, MAX_SIZE, QUICK_REGISTER_SIZES, QUICK_SIZES, REGISTER_SIZES,
};

/// How long the driver waits for the peer process to connect and say hello.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a finished peer gets to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// Backends, by scheme name. Default: every backend this build knows
    /// ([`accio::REGISTRY`]).
    pub backends: Vec<String>,
    /// Message sizes in bytes. Default `None`: [`DEFAULT_SIZES`], or [`QUICK_SIZES`] when
    /// `quick`.
    pub sizes: Option<Vec<u64>>,
    /// Fewer sizes and samples. Default `false`.
    pub quick: bool,
    /// Samples per figure, overriding the plan's (see [`Plan::for_size`]). Default `None`.
    pub repetitions: Option<usize>,
    /// Pin the driver and the peer to different CPUs when there are two or more. Default
    /// `true`.
    pub pin: bool,
    /// How to start the peer process.
    pub peer: PeerCommand,
    /// Which figures to measure. Default: all.
    pub figures: Figures,
}

/// The figures of a transport run, to measure only some (a comparison script that
/// interleaves accio with another tool size by size wants latency and streaming, fast).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Figures {
    /// One-way latency per size.
    pub latency: bool,
    /// Streaming bandwidth per size.
    pub stream: bool,
    /// RMA write bandwidth per size.
    pub rma: bool,
    /// The ceilings per size: memcpy and the latency floor.
    pub ceilings: bool,
    /// Connection, registration and unregistration cost.
    pub setup: bool,
}

impl Default for Figures {
    fn default() -> Figures {
        Figures {
            latency: true,
            stream: true,
            rma: true,
            ceilings: true,
            setup: true,
        }
    }
}

impl Figures {
    /// Only the named figures, from a comma-separated list of `latency`, `stream`, `rma`,
    /// `ceilings`, `setup`.
    pub fn only(list: &str) -> Result<Figures, BenchError> {
        let mut f = Figures {
            latency: false,
            stream: false,
            rma: false,
            ceilings: false,
            setup: false,
        };
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "latency" => f.latency = true,
                "stream" => f.stream = true,
                "rma" => f.rma = true,
                "ceilings" => f.ceilings = true,
                "setup" => f.setup = true,
                other => {
                    return Err(BenchError::Options(format!(
                        "unknown figure {other:?} (known: latency, stream, rma, ceilings, setup)"
                    )))
                }
            }
        }
        if f == Figures::only_none() {
            return Err(BenchError::Options("no figure to measure".into()));
        }
        Ok(f)
    }

    fn only_none() -> Figures {
        Figures {
            latency: false,
            stream: false,
            rma: false,
            ceilings: false,
            setup: false,
        }
    }
}

impl Options {
    /// The defaults, starting peers with `peer`.
    pub fn new(peer: PeerCommand) -> Options {
        Options {
            backends: accio::schemes().iter().map(|s| s.to_string()).collect(),
            sizes: None,
            quick: false,
            repetitions: None,
            pin: true,
            peer,
            figures: Figures::default(),
        }
    }

    /// The sizes to measure: the given ones (duplicates removed, order kept) or the
    /// defaults. Fails for 0 bytes and for more than [`MAX_SIZE`].
    pub fn effective_sizes(&self) -> Result<Vec<u64>, BenchError> {
        let given = self.sizes.as_deref().unwrap_or(if self.quick {
            QUICK_SIZES
        } else {
            DEFAULT_SIZES
        });
        let mut v: Vec<u64> = Vec::with_capacity(given.len());
        for &s in given {
            if s == 0 {
                return Err(BenchError::Options(
                    "message size 0 cannot be measured: sizes start at 1 byte".into(),
                ));
            }
            if s > MAX_SIZE {
                return Err(BenchError::Options(format!(
                    "message size {} is above the bench's limit of {}",
                    format_size(s),
                    format_size(MAX_SIZE)
                )));
            }
            if !v.contains(&s) {
                v.push(s);
            }
        }
        Ok(v)
    }

    /// The backends to measure (duplicates removed); fails for names this build does not
    /// know.
    pub fn effective_backends(&self) -> Result<Vec<String>, BenchError> {
        let mut v: Vec<String> = Vec::new();
        for b in &self.backends {
            if accio::backend(b).is_none() {
                return Err(BenchError::Options(format!(
                    "unknown backend {b:?} (known: {})",
                    accio::schemes().join(", ")
                )));
            }
            if !v.contains(b) {
                v.push(b.clone());
            }
        }
        if v.is_empty() {
            return Err(BenchError::Options("no backend to measure".into()));
        }
        Ok(v)
    }
}

/// Why the transport bench failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The options cannot be measured.
    #[error("{0}")]
    Options(String),
    /// An endpoint call failed in a scenario.
    #[error("{backend} {scenario}: {source}")]
    Endpoint {
        /// Backend name.
        backend: String,
        /// The scenario, e.g. `stream_bw 2M`.
        scenario: String,
        /// The endpoint's error (boxed: it is large, and errors are rare).
        #[source]
        source: Box<accio::Error>,
    },
    /// The peer process died.
    #[error("the {backend} peer process (pid {pid}) {status} during {scenario}{}",
            cause.as_ref().map(|c| format!(" (the driver saw: {c})")).unwrap_or_default())]
    PeerDied {
        /// Backend name.
        backend: String,
        /// The scenario it died in.
        scenario: String,
        /// Its pid.
        pid: u32,
        /// How it ended.
        status: String,
        /// The error that revealed it, if any.
        cause: Option<String>,
    },
    /// The peer reported a failure.
    #[error("{backend} {scenario}: the peer failed: {text}")]
    PeerFailed {
        /// Backend name.
        backend: String,
        /// The scenario.
        scenario: String,
        /// The peer's error message.
        text: String,
    },
    /// The peer process could not be started.
    #[error("starting the {backend} peer process {program}: {source}")]
    Spawn {
        /// Backend name.
        backend: String,
        /// The program.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Ctrl-C.
    #[error("interrupted during {backend} {scenario}; figures measured so far were kept")]
    Interrupted {
        /// Backend name (or `memcpy`).
        backend: String,
        /// The scenario.
        scenario: String,
    },
    /// The latency floor (a loopback socket) could not be measured.
    #[error("measuring the latency floor over a loopback socket: {0}")]
    Floor(std::io::Error),
    /// Writing the results failed.
    #[error("recording results: {0}")]
    Record(#[from] std::io::Error),
    /// No requested backend can be measured in this build.
    #[error("no backend could be measured: {0}")]
    NothingMeasured(String),
}
