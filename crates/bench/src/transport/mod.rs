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
#[cfg(test)]
mod mock;
mod os;
mod peer;
mod plan;
pub mod proto;

use std::time::Duration;

use accio::{Endpoint, ErrorKind, Listener};

use crate::emit;
use crate::mem::memcpy_gbps;
use accio_results::event::Event;
use accio_results::hazard::{Hazard, HazardKind};
use accio_results::model::{CeilingSource, Figure, Recorder, Unit};
use accio_results::size::format_size;

use driver::{Fail, Link};

pub use accio_results::metric::transport::{
    self as metric, BENCH, SEED_004_CONNECT_US, SEED_004_REGISTER_US,
};
pub use os::PeerCommand;
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
    /// Writing the results failed.
    #[error("recording results: {0}")]
    Record(#[from] std::io::Error),
    /// No requested backend can be measured in this build.
    #[error("no backend could be measured: {0}")]
    NothingMeasured(String),
}

/// Records a figure and reports it, as one unit of the planned work. Whether it is noisy or
/// above its ceiling is judged after the run (`accio_report::warnings`, by this bench's
/// rules), like every bench's figures.
fn record(
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    fig: Figure,
) -> Result<(), BenchError> {
    emit::figure(rec, events, fig)?;
    events(Event::Advanced(1));
    Ok(())
}

fn base_figure(metric: &str, unit: Unit, samples: Vec<f64>, backend: &str) -> Option<Figure> {
    Some(Figure::new(BENCH, metric, unit, samples)?.param("backend", backend))
}

/// Runs the bench: every backend in turn, and for each message size the memcpy ceiling
/// right before that size's figures (so ceiling and figure see the same machine conditions,
/// which on a shared 2-core VM swing by 2x within seconds). Figures are recorded in `rec` as
/// they are measured and reported through `events`.
///
/// With a [`crate::cancel::SigintGuard`] installed, the first Ctrl-C ends the run after the
/// current figure (a second one kills as usual). While it runs, the calling thread is pinned
/// to one CPU; that is restored on return. A
/// backend this build cannot listen on is skipped with a warning.
pub fn run(
    opts: &Options,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<(), BenchError> {
    let sizes = opts.effective_sizes()?;
    let backends = opts.effective_backends()?;
    let reg = if opts.quick {
        QUICK_REGISTER_SIZES.len()
    } else {
        REGISTER_SIZES.len()
    };
    // Per backend: four figures per size (memcpy, latency, stream, RMA), the connection,
    // and registration and unregistration per registration size.
    events(Event::Started {
        bench: BENCH,
        total: (backends.len() * (sizes.len() * 4 + 1 + reg * 2)) as u64,
    });
    let mut cpus = if opts.pin { os::pick_cpus() } else { None };
    let _affinity = match cpus.map(|(d, _)| os::AffinityGuard::pin(d)).transpose() {
        Ok(g) => g,
        Err(e) => {
            let w = format!("could not pin the driver to a cpu ({e}); running unpinned");
            emit::hazard(rec, events, Hazard::new(HazardKind::Caution, BENCH, w))?;
            cpus = None;
            None
        }
    };
    let mut skipped = Vec::new();
    let mut measured = 0;
    for backend in &backends {
        let mut session = match Session::open(backend, opts, cpus)? {
            Ok(s) => s,
            Err(why) => {
                events(Event::Skipped(&why));
                rec.hazard(Hazard::new(HazardKind::NotMeasured, BENCH, why.clone()))?;
                skipped.push(why);
                continue;
            }
        };
        events(Event::Step(&format!(
            "{backend}: peer process {}{}",
            session.peer_pid,
            match cpus {
                Some((d, p)) => format!(", driver on cpu {d}, peer on cpu {p}"),
                None => ", not pinned".into(),
            }
        )));
        let cx = Context {
            opts,
            sizes: &sizes,
            cpus,
        };
        // After a failure the protocol state is unknown: no polite Quit, the peer is killed
        // and reaped when the session drops.
        measure_backend(&mut session, &cx, rec, events)?;
        session.close()?;
        measured += 1;
    }
    if measured == 0 {
        return Err(BenchError::NothingMeasured(skipped.join("; ")));
    }
    events(Event::Done);
    Ok(())
}

fn check_interrupt(backend: &str, scenario: &str) -> Result<(), BenchError> {
    if crate::cancel::interrupted() {
        Err(BenchError::Interrupted {
            backend: backend.into(),
            scenario: scenario.into(),
        })
    } else {
        Ok(())
    }
}

/// Measures the single-thread memcpy bandwidth of `size`-byte copies, records it, and
/// returns its median (GB/s). The peer is idle meanwhile (blocked in `recv` on its own core).
fn measure_memcpy(
    cx: &Context<'_>,
    backend: &str,
    size: u64,
    plan: &Plan,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<Option<f64>, BenchError> {
    let samples = memcpy_gbps(size as usize, plan.memcpy_samples, plan.memcpy_batch);
    let Some(fig) = base_figure(metric::MEMCPY, Unit::GBps, samples, backend) else {
        return Ok(None);
    };
    let fig = fig.param("size", size).param("threads", 1).method(format!(
        "accio::copy_bytes between page-aligned, pre-faulted buffers, 1 thread ({}), \
         {} batches of ~{} ms, measured just before the {backend} figures of this size",
        match cx.cpus {
            Some((d, _)) => format!("driver's thread, pinned to cpu {d}"),
            None => "driver's thread, not pinned".into(),
        },
        plan.memcpy_samples,
        plan.memcpy_batch.as_millis()
    ));
    let median = fig.summary.median;
    record(rec, events, fig)?;
    Ok(Some(median))
}

/// A connected backend: the listener, the endpoint to the peer, and the peer process (none
/// when the peer is a thread, in tests).
struct Session {
    backend: String,
    listener: Box<dyn Listener>,
    ep: Box<dyn Endpoint>,
    child: Option<os::PeerProcess>,
    peer_pid: u64,
}

/// Distinguishes shm names of successive sessions of one process.
static SESSION_SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Session {
    /// Listens, starts the peer and waits for its hello. The inner `Err` is a reason to skip
    /// the backend (it cannot listen in this build).
    fn open(
        backend: &str,
        opts: &Options,
        cpus: Option<(usize, usize)>,
    ) -> Result<Result<Session, String>, BenchError> {
        let pid = std::process::id();
        let addr = match backend {
            "shm" => {
                let n = SESSION_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                format!("shm://accio-bench-{pid}-{n}")
            }
            _ => format!("{backend}://127.0.0.1:0"),
        };
        let ctx = |source| BenchError::Endpoint {
            backend: backend.into(),
            scenario: "startup".into(),
            source: Box::new(source),
        };
        let listener = match accio::listen(&addr) {
            Ok(l) => l,
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                return Ok(Err(format!("backend {backend}: {e}")))
            }
            Err(e) => return Err(ctx(e)),
        };
        let cfg = PeerConfig {
            addr: listener.local_addr().to_string(),
            cpu: cpus.map(|c| c.1),
            parent: Some(pid),
        };
        let mut child = os::PeerProcess::spawn(&opts.peer, &cfg.to_args()).map_err(|source| {
            BenchError::Spawn {
                backend: backend.into(),
                program: opts.peer.program.display().to_string(),
                source,
            }
        })?;
        let ep = accept_peer(&*listener, &mut child, backend, &cfg.addr)?;
        let mut s = Session {
            backend: backend.into(),
            listener,
            ep,
            child: Some(child),
            peer_pid: 0,
        };
        s.peer_pid = driver::hello(&*s.ep, STARTUP_TIMEOUT).map_err(|f| s.fail("startup", f))?;
        Ok(Ok(s))
    }

    /// Turns a scenario failure into an error that says whether the peer died.
    fn fail(&mut self, scenario: &str, f: Fail) -> BenchError {
        let (backend, scenario) = (self.backend.clone(), scenario.to_string());
        if crate::cancel::interrupted() {
            return BenchError::Interrupted { backend, scenario };
        }
        let dead = self.child.as_mut().and_then(|c| {
            // A peer that died is noticed by the driver a moment before it can be reaped.
            c.exit_status(Duration::from_millis(500))
                .map(|s| (c.pid(), os::describe_exit(s)))
        });
        match (f, dead) {
            (Fail::Peer { text, .. }, _) => BenchError::PeerFailed {
                backend,
                scenario,
                text,
            },
            (Fail::Accio(e), Some((pid, status))) => BenchError::PeerDied {
                backend,
                scenario,
                pid,
                status,
                cause: Some(e.to_string()),
            },
            (Fail::Accio(source), None) => BenchError::Endpoint {
                backend,
                scenario,
                source: Box::new(source),
            },
        }
    }

    /// Tells the peer to quit and reaps it.
    fn close(mut self) -> Result<(), BenchError> {
        if let Err(f) = driver::quit(&*self.ep) {
            return Err(self.fail("shutdown", f));
        }
        if let Some(child) = self.child.take() {
            let pid = child.pid();
            match child.finish(EXIT_GRACE) {
                Some(s) if s.success() => {}
                status => {
                    return Err(BenchError::PeerDied {
                        backend: self.backend.clone(),
                        scenario: "shutdown".into(),
                        pid,
                        status: status.map_or("could not be reaped".into(), os::describe_exit),
                        cause: None,
                    })
                }
            }
        }
        Ok(())
    }
}

/// Accepts the peer's first connection, noticing a peer that exits before connecting.
fn accept_peer(
    listener: &dyn Listener,
    child: &mut os::PeerProcess,
    backend: &str,
    addr: &str,
) -> Result<Box<dyn Endpoint>, BenchError> {
    let deadline = std::time::Instant::now() + STARTUP_TIMEOUT;
    loop {
        match listener.accept(Some(Duration::from_millis(100))) {
            Ok(ep) => return Ok(ep),
            Err(e) if e.kind() == ErrorKind::Timeout => {}
            Err(source) => {
                return Err(BenchError::Endpoint {
                    backend: backend.into(),
                    scenario: format!("startup (accepting the peer on {addr})"),
                    source: Box::new(source),
                })
            }
        }
        check_interrupt(backend, "startup")?;
        if let Some(s) = child.exit_status(Duration::ZERO) {
            return Err(BenchError::PeerDied {
                backend: backend.into(),
                scenario: format!("startup, before connecting to {addr}"),
                pid: child.pid(),
                status: os::describe_exit(s),
                cause: None,
            });
        }
        if std::time::Instant::now() >= deadline {
            return Err(BenchError::Endpoint {
                backend: backend.into(),
                scenario: "startup".into(),
                source: Box::new(accio::Error::Timeout {
                    op: "accept",
                    resource: format!("{addr} (waiting for peer pid {})", child.pid()),
                    after: STARTUP_TIMEOUT,
                }),
            });
        }
    }
}

/// What every backend is measured with.
struct Context<'a> {
    opts: &'a Options,
    sizes: &'a [u64],
    cpus: Option<(usize, usize)>,
}

impl Context<'_> {
    fn pinning(&self) -> String {
        match self.cpus {
            Some((d, p)) => format!("driver on cpu {d}, peer on cpu {p}"),
            None => "processes not pinned".into(),
        }
    }

    /// Attaches the memcpy ceiling (`memcpy`, GB/s) of `size` to a bandwidth figure.
    fn bw_ceiling(&self, fig: Figure, size: u64, memcpy: Option<f64>) -> Figure {
        match memcpy {
            Some(c) => fig.ceiling(
                format!("memcpy {}, 1 thread", format_size(size)),
                c,
                CeilingSource::Measured,
            ),
            None => fig,
        }
    }

    /// Attaches "one memcpy of `size`" (in us, at `memcpy` GB/s) to a latency figure.
    fn latency_ceiling(&self, fig: Figure, size: u64, memcpy: Option<f64>) -> Figure {
        match memcpy {
            Some(gbps) if gbps > 0.0 => fig.ceiling(
                format!("one memcpy of {}, 1 thread", format_size(size)),
                size as f64 / (gbps * 1e3),
                CeilingSource::Measured,
            ),
            _ => fig,
        }
    }
}

/// Handles a scenario's outcome: a figure is recorded; an operation the backend does not
/// support skips the figure with a warning; anything else ends the run.
fn outcome<T>(
    session: &mut Session,
    scenario: &str,
    r: Result<T, Fail>,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<Option<T>, BenchError> {
    let unsupported = match &r {
        Err(Fail::Accio(e)) => e.kind() == ErrorKind::Unsupported,
        Err(Fail::Peer { unsupported, .. }) => *unsupported,
        Ok(_) => false,
    };
    match r {
        Ok(v) => Ok(Some(v)),
        Err(f) if unsupported => {
            let text = match f {
                Fail::Accio(e) => e.to_string(),
                Fail::Peer { text, .. } => text,
            };
            let why = format!("{} {scenario}: {text}", session.backend);
            events(Event::Skipped(&why));
            rec.hazard(Hazard::new(HazardKind::NotMeasured, BENCH, why))?;
            Ok(None)
        }
        Err(f) => Err(session.fail(scenario, f)),
    }
}

fn measure_backend(
    s: &mut Session,
    cx: &Context<'_>,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<(), BenchError> {
    let backend = s.backend.clone();
    let b = backend.as_str();
    let pin = cx.pinning();
    for &size in cx.sizes {
        let plan = Plan::for_size(size, cx.opts.quick, cx.opts.repetitions);
        let z = format_size(size);
        let n = size as usize;

        check_interrupt(b, &format!("memcpy {z}"))?;
        let memcpy = measure_memcpy(cx, b, size, &plan, rec, events)?;

        let scenario = format!("latency {z}");
        check_interrupt(b, &scenario)?;
        let r = driver::latency(&link(s), n, &plan);
        if let Some(m) = outcome(s, &scenario, r, rec, events)? {
            if let Some(fig) = base_figure(metric::LATENCY, Unit::Micros, m.samples, b) {
                let fig = fig.param("size", size).method(format!(
                    "ping-pong of {size}-byte messages, {pin}; {} warm-up round trips, then \
                     {} batches of {} round trips (~{} ms), each round trip timed alone; \
                     sample = median round trip of a batch / 2",
                    plan.lat_warmup,
                    plan.lat_batches,
                    m.per_sample,
                    plan.lat_batch_time.as_millis()
                ));
                record(rec, events, cx.latency_ceiling(fig, size, memcpy))?;
            }
        }

        let scenario = format!("stream_bw {z}");
        check_interrupt(b, &scenario)?;
        let r = driver::stream(&link(s), n, &plan);
        if let Some(m) = outcome(s, &scenario, r, rec, events)? {
            if let Some(fig) = base_figure(metric::STREAM_BW, Unit::GBps, m.samples, b) {
                let fig = fig.param("size", size).method(format!(
                    "{} back-to-back send()s of {size} bytes per pass (~{} ms), {pin}; a pass \
                     lasts from the sender's first send to the receiver's last completed recv \
                     (CLOCK_MONOTONIC, shared by both processes); {} passes after a \
                     {}-message warm-up",
                    m.per_sample,
                    plan.pass_time.as_millis(),
                    plan.passes,
                    plan.warmup_msgs
                ));
                record(rec, events, cx.bw_ceiling(fig, size, memcpy))?;
            }
        }

        let scenario = format!("rma_write_bw {z}");
        check_interrupt(b, &scenario)?;
        let r = driver::rma_write(&link(s), n, &plan);
        if let Some(m) = outcome(s, &scenario, r, rec, events)? {
            if let Some(fig) = base_figure(metric::RMA_WRITE_BW, Unit::GBps, m.samples, b) {
                let fig = fig.param("size", size).method(format!(
                    "{} write_to(ASYNC) of {size} bytes per pass (~{} ms) from a pre-faulted \
                     registered window into one peer window, then fence_mark + fence_wait, \
                     timed at the initiator until the fence completes, {pin}; {} passes \
                     after a {}-write warm-up",
                    m.per_sample,
                    plan.pass_time.as_millis(),
                    plan.passes,
                    plan.warmup_msgs
                ));
                record(rec, events, cx.bw_ceiling(fig, size, memcpy))?;
            }
        }
    }

    let setup = SetupPlan::new(cx.opts.quick, cx.opts.repetitions);
    check_interrupt(b, "connect")?;
    let r = driver::connect(&link(s), setup.connects);
    if let Some(samples) = outcome(s, "connect", r, rec, events)? {
        if let Some(fig) = base_figure(metric::CONNECT, Unit::Micros, samples, b) {
            let fig = fig.method(format!(
                "connect() to a listening peer, timed by the connecting process, {} \
                 connections one at a time (each accepted before the next)",
                setup.connects
            ));
            record(rec, events, fig)?;
        }
    }

    for &size in &setup.register_sizes {
        let scenario = format!("register {}", format_size(size));
        check_interrupt(b, &scenario)?;
        let r = driver::register(
            &*s.ep,
            size as usize,
            setup.register_min,
            setup.register_max,
            setup.register_budget,
        );
        if let Some((reg, unreg)) = outcome(s, &scenario, r, rec, events)? {
            let n = reg.len();
            if let Some(fig) = base_figure(metric::REGISTER, Unit::Micros, reg, b) {
                let fig = fig.param("size", size).method(format!(
                    "register({size}, READ_WRITE): fresh zeroed memory mapped and exposed to \
                     the peer; {n} iterations, each cold (no warm-up)"
                ));
                record(rec, events, fig)?;
            }
            if let Some(fig) = base_figure(metric::UNREGISTER, Unit::Micros, unreg, b) {
                let fig = fig.param("size", size).method(format!(
                    "unregister() of a {size}-byte window plus dropping its last handle \
                     (unmaps the memory); {n} iterations"
                ));
                record(rec, events, fig)?;
            }
        }
    }
    Ok(())
}

fn link(s: &Session) -> Link<'_> {
    Link {
        ep: &*s.ep,
        listener: &*s.listener,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options::new(PeerCommand {
            program: "/nonexistent".into(),
            args: vec![],
        })
    }

    #[test]
    fn option_defaults() {
        let o = opts();
        assert_eq!(o.backends, vec!["shm", "tcp"]);
        assert!(o.pin && !o.quick && o.repetitions.is_none());
        assert_eq!(o.effective_sizes().unwrap(), DEFAULT_SIZES);
        let q = Options { quick: true, ..o };
        assert_eq!(
            q.effective_sizes().unwrap(),
            vec![8, 4096, 512 << 10, 2 << 20]
        );
    }

    #[test]
    fn sizes_and_backends_are_validated() {
        let mut o = opts();
        o.sizes = Some(vec![8, 8, 4096]);
        assert_eq!(o.effective_sizes().unwrap(), vec![8, 4096]);
        o.sizes = Some(vec![0]);
        assert!(o
            .effective_sizes()
            .unwrap_err()
            .to_string()
            .contains("size 0"));
        o.sizes = Some(vec![2 << 30]);
        assert!(o
            .effective_sizes()
            .unwrap_err()
            .to_string()
            .contains("2G is above the bench's limit of 1G"));
        o.backends = vec!["tcp".into(), "tcp".into()];
        assert_eq!(o.effective_backends().unwrap(), vec!["tcp"]);
        o.backends = vec!["ib".into()];
        assert_eq!(
            o.effective_backends().unwrap_err().to_string(),
            "unknown backend \"ib\" (known: shm, tcp)"
        );
    }

    #[test]
    fn peer_died_error_names_backend_and_scenario() {
        let e = BenchError::PeerDied {
            backend: "shm".into(),
            scenario: "stream_bw 2M".into(),
            pid: 7,
            status: "was killed by signal 9 (SIGKILL)".into(),
            cause: Some("peer shm://x is gone: hang-up".into()),
        };
        assert_eq!(
            e.to_string(),
            "the shm peer process (pid 7) was killed by signal 9 (SIGKILL) during stream_bw 2M \
             (the driver saw: peer shm://x is gone: hang-up)"
        );
    }

    /// The whole driver/peer protocol over an in-process endpoint pair: every scenario
    /// yields figures with the right metric, parameters and ceilings.
    #[test]
    fn all_scenarios_run_against_an_in_process_peer() {
        let (listener, connector) = mock::listener("mock://bench");
        let parent = connector.connect();
        let peer_ep = listener.accept(None).unwrap();
        let c2 = connector.clone();
        let peer = std::thread::spawn(move || serve(&*peer_ep, &move || Ok(c2.connect())));
        let mut s = Session {
            backend: "mock".into(),
            listener: Box::new(listener),
            ep: parent,
            child: None,
            peer_pid: 0,
        };
        s.peer_pid = driver::hello(&*s.ep, Duration::from_secs(5)).unwrap();
        assert_eq!(s.peer_pid, u64::from(std::process::id()));

        let mut o = opts();
        o.quick = true;
        o.repetitions = Some(3);
        let sizes = [8u64, 5000];
        let cx = Context {
            opts: &o,
            sizes: &sizes,
            cpus: None,
        };
        let mut rec = Recorder::new(None).unwrap();
        let mut lines = Vec::new();
        measure_backend(&mut s, &cx, &mut rec, &mut |e| {
            if let Event::Figure(f) = e {
                lines.push(accio_report::text::transport::describe(f));
            }
        })
        .unwrap();
        s.close().unwrap();
        peer.join().unwrap().unwrap();

        let r = rec.report();
        for m in [metric::LATENCY, metric::STREAM_BW, metric::RMA_WRITE_BW] {
            let got: Vec<u64> = r
                .select(BENCH, m)
                .map(|f| f.params["size"].as_u64().unwrap())
                .collect();
            assert_eq!(got, sizes, "{m}");
            for f in r.select(BENCH, m) {
                assert_eq!(f.param_str("backend"), "mock");
                assert_eq!(f.summary.n, 3);
                assert!(f.summary.min > 0.0 && f.method.is_some());
                assert!(f.ceiling.as_ref().unwrap().ratio.is_some());
            }
        }
        // Each size's memcpy ceiling is measured beside that size's figures and attached.
        let memcpy: Vec<&Figure> = r.select(BENCH, metric::MEMCPY).collect();
        assert_eq!(memcpy.len(), 2);
        assert_eq!(memcpy[1].param_str("backend"), "mock");
        let gbps = memcpy[1].summary.median;
        let stream = r.select(BENCH, metric::STREAM_BW).nth(1).unwrap();
        let c = stream.ceiling.as_ref().unwrap();
        assert_eq!((c.name.as_str(), c.value), ("memcpy 5000, 1 thread", gbps));
        // Latency ceiling: one 5000-byte copy at that bandwidth.
        let lat = r.select(BENCH, metric::LATENCY).nth(1).unwrap();
        let c = lat.ceiling.as_ref().unwrap();
        assert!((c.value - 5000.0 / (gbps * 1e3)).abs() < 1e-9);
        assert_eq!(c.name, "one memcpy of 5000, 1 thread");
        assert_eq!(
            r.select(BENCH, metric::CONNECT).next().unwrap().summary.n,
            10
        );
        let reg: Vec<u64> = r
            .select(BENCH, metric::REGISTER)
            .map(|f| f.params["size"].as_u64().unwrap())
            .collect();
        assert_eq!(reg, QUICK_REGISTER_SIZES);
        assert_eq!(r.select(BENCH, metric::UNREGISTER).count(), 3);
        assert!(lines
            .iter()
            .any(|l| l.starts_with("mock rma_write_bw 5000: ")));
        let table = accio_report::text::transport::render_tables(r);
        assert!(table.contains("mock: median") && table.contains("mock connect:"));
    }

    #[test]
    fn a_peer_that_stops_answering_is_reported_with_the_scenario() {
        let (listener, connector) = mock::listener("mock://dies");
        let parent = connector.connect();
        let peer_ep = listener.accept(None).unwrap();
        let mut s = Session {
            backend: "mock".into(),
            listener: Box::new(listener),
            ep: parent,
            child: None,
            peer_pid: 0,
        };
        drop(peer_ep);
        let r = driver::stream(&link(&s), 64, &Plan::for_size(64, true, Some(1)));
        assert!(r.is_err());
        let e = s.fail("stream_bw 64", r.unwrap_err());
        let text = e.to_string();
        assert!(
            text.starts_with("mock stream_bw 64: peer shm://mock-dies is gone"),
            "{text}"
        );
    }
}
