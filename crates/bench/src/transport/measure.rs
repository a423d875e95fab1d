//! The run loop over backends and sizes, and the measuring of each scenario (memcpy
//! ceiling, latency, stream and RMA bandwidth, connect, register) into figures.

use std::time::Duration;

use accio::ErrorKind;

use crate::emit;
use crate::floors;
use crate::mem::{copy_gbps, memcpy_gbps};
use crate::CEILING_RETRIES;
use accio_results::event::Event;
use accio_results::hazard::{Hazard, HazardKind};
use accio_results::model::{CeilingSource, Figure, Recorder, Unit};
use accio_results::num::fmt_small;
use accio_results::size::format_size;

use super::driver::{self, Fail, Link};
use super::session::Session;
use super::{
    metric, os, BenchError, Options, Plan, SetupPlan, BENCH, QUICK_REGISTER_SIZES, REGISTER_SIZES,
};

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
    // Per backend: up to five figures per size (memcpy, latency floor, latency, stream,
    // RMA), the connection, and registration and unregistration per registration size.
    let f = opts.figures;
    let per_size = [
        f.ceilings,
        f.ceilings && f.latency,
        f.latency,
        f.stream,
        f.rma,
    ]
    .into_iter()
    .filter(|&b| b)
    .count();
    let setup = if f.setup { 1 + reg * 2 } else { 0 };
    events(Event::Started {
        bench: BENCH,
        total: (backends.len() * (sizes.len() * per_size + setup)) as u64,
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

pub(super) fn check_interrupt(backend: &str, scenario: &str) -> Result<(), BenchError> {
    if crate::cancel::interrupted() {
        Err(BenchError::Interrupted {
            backend: backend.into(),
            scenario: scenario.into(),
        })
    } else {
        Ok(())
    }
}

/// Batches of a latency floor (twice as many when it is measured again).
const FLOOR_SAMPLES: usize = 5;

/// A latency floor: what it is and its fastest batch, us.
pub(super) struct Floor {
    name: &'static str,
    us: f64,
}

/// Measures the latency floor between the driver's and the peer's cores
/// ([`crate::floors`]) with `samples` batches, not yet recorded, just before the latency
/// figure of `size`, in the same phase of the machine (a floor taken once per backend read
/// 0.21 us in a slow phase and 0.05 us in a fast one of the same run): a raw loopback
/// socket hop for tcp, a cache line's hop for the others (shared memory). The peer process
/// is idle meanwhile (blocked in `recv`).
fn floor_figure(
    cx: &Context<'_>,
    backend: &str,
    size: u64,
    samples: usize,
) -> Result<Option<(Figure, Floor)>, BenchError> {
    let batch = if cx.opts.quick {
        Duration::from_millis(10)
    } else {
        Duration::from_millis(20)
    };
    let (name, values, how) = if backend == "tcp" {
        let v = floors::loopback_socket_one_way_us(cx.cpus, samples, batch)
            .map_err(BenchError::Floor)?;
        (
            "polled socket hop",
            v,
            "8 bytes back and forth over a loopback TCP connection (TCP_NODELAY), one write and \
             non-blocking reads polled for up to 50 us, then a blocking one, per hop, no \
             framing, between two threads",
        )
    } else {
        let v = floors::cacheline_one_way_us(cx.cpus, samples, batch);
        (
            "cache-line hop",
            v,
            "one 64-byte line bouncing between two spinning threads",
        )
    };
    let Some(fig) = base_figure(metric::LATENCY_FLOOR, Unit::Micros, values, backend) else {
        return Ok(None);
    };
    let fig = fig.param("size", size).method(format!(
        "{how} ({}), measured just before the latency of this size (and again after it, the \
         faster kept, when the latency passed the floor); {samples} batches of ~{} ms; \
         sample = mean round trip / 2",
        cx.pinning(),
        batch.as_millis()
    ));
    // A floor is the least a hop takes: the fastest batch, so that a slow phase of the
    // machine while the floor was measured does not lift it above the figures it bounds.
    let us = fig.summary.min;
    Ok(Some((fig, Floor { name, us })))
}

/// The single-thread memcpy bandwidth of `size`-byte copies (`samples` batches), not yet
/// recorded. The peer is idle meanwhile (blocked in `recv` on its own core).
fn memcpy_figure(
    cx: &Context<'_>,
    backend: &str,
    size: u64,
    plan: &Plan,
    samples: usize,
) -> Option<Figure> {
    // One copy at best, in either kind of stores the transports use: cached, or
    // non-temporal (shm streams large payloads so when the cores are far apart).
    let cached = memcpy_gbps(size as usize, samples, plan.memcpy_batch);
    let streaming = copy_gbps(size as usize, samples, plan.memcpy_batch, true);
    let values = cached
        .iter()
        .zip(&streaming)
        .map(|(c, s)| c.max(*s))
        .collect();
    let fig = base_figure(metric::MEMCPY, Unit::GBps, values, backend)?;
    Some(fig.param("size", size).param("threads", 1).method(format!(
        "the better per batch of accio::copy_bytes (cached stores) and \
         accio::copy_streaming (non-temporal stores), between page-aligned, pre-faulted \
         buffers, 1 thread ({}), \
         {samples} batches of ~{} ms, measured just before the {backend} figures of this size \
         (and again after them, the better kept, when a figure passed it)",
        match cx.cpus {
            Some((d, _)) => format!("driver's thread, pinned to cpu {d}"),
            None => "driver's thread, not pinned".into(),
        },
        plan.memcpy_batch.as_millis()
    )))
}
/// What every backend is measured with.
pub(super) struct Context<'a> {
    pub(super) opts: &'a Options,
    pub(super) sizes: &'a [u64],
    pub(super) cpus: Option<(usize, usize)>,
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

    /// Attaches the latency floor of `size`-byte messages to a latency figure: the hop
    /// between the two cores (`floor`, us) plus one copy of the message (at `memcpy` GB/s):
    /// no message of that size can arrive sooner.
    fn latency_ceiling(
        &self,
        fig: Figure,
        size: u64,
        floor: Option<&Floor>,
        memcpy: Option<f64>,
    ) -> Figure {
        match (floor, memcpy) {
            (Some(f), Some(gbps)) if gbps > 0.0 => fig.ceiling(
                format!(
                    "{} {} us + one memcpy of {}",
                    f.name,
                    fmt_small(f.us),
                    format_size(size)
                ),
                f.us + size as f64 / (gbps * 1e3),
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

/// [`outcome`] of a figure that may not have been asked for (`None`: not measured).
fn outcome_if<T>(
    session: &mut Session,
    scenario: &str,
    r: Option<Result<T, Fail>>,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<Option<T>, BenchError> {
    match r {
        Some(r) => outcome(session, scenario, r, rec, events),
        None => Ok(None),
    }
}

pub(super) fn measure_backend(
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

        let want = cx.opts.figures;
        check_interrupt(b, &format!("memcpy {z}"))?;
        let mut memcpy_fig = if want.ceilings {
            memcpy_figure(cx, b, size, &plan, plan.memcpy_samples)
        } else {
            None
        };
        // This size's figures, recorded once their ceilings are settled (below).
        let mut latency: Option<Figure> = None;
        let mut bandwidths: Vec<Figure> = Vec::new();

        check_interrupt(b, &format!("latency floor {z}"))?;
        let mut floor = if want.ceilings && want.latency {
            floor_figure(cx, b, size, FLOOR_SAMPLES)?
        } else {
            None
        };
        let scenario = format!("latency {z}");
        check_interrupt(b, &scenario)?;
        let r = want.latency.then(|| driver::latency(&link(s), n, &plan));
        if let Some(m) = outcome_if(s, &scenario, r, rec, events)? {
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
                latency = Some(fig);
            }
        }

        let scenario = format!("stream_bw {z}");
        check_interrupt(b, &scenario)?;
        let r = want.stream.then(|| driver::stream(&link(s), n, &plan));
        if let Some(m) = outcome_if(s, &scenario, r, rec, events)? {
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
                bandwidths.push(fig);
            }
        }

        let scenario = format!("rma_write_bw {z}");
        check_interrupt(b, &scenario)?;
        let r = want.rma.then(|| driver::rma_write(&link(s), n, &plan));
        if let Some(m) = outcome_if(s, &scenario, r, rec, events)? {
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
                bandwidths.push(fig);
            }
        }

        // A bandwidth past its memcpy ceiling beyond the noise means the ceiling was
        // measured in a slower phase of the machine than the figure (docs/CEILINGS.md):
        // measure it again, with twice the batches, and keep the better, up to
        // `CEILING_RETRIES` times (CI saw memcpy 4K at 65.9 GB/s after one retry beside an
        // RMA write of 74-79, where it reads 83-110 in other runs).
        let median = |f: &Option<Figure>| f.as_ref().map(|m| m.summary.median);
        let passed = |c: Option<f64>| {
            bandwidths
                .iter()
                .any(|f| cx.bw_ceiling(f.clone(), size, c).beyond_ceiling())
        };
        for _ in 0..CEILING_RETRIES {
            if !(want.ceilings && passed(median(&memcpy_fig))) {
                break;
            }
            check_interrupt(b, &format!("memcpy {z}, again"))?;
            let again = memcpy_figure(cx, b, size, &plan, plan.memcpy_samples * 2);
            if median(&again) > median(&memcpy_fig) {
                memcpy_fig = again;
            }
        }
        let memcpy = median(&memcpy_fig);
        if let Some(fig) = memcpy_fig {
            record(rec, events, fig)?;
        }
        // The same for a latency below its floor: the floor met a slower phase than the
        // latency (the tcp hop here is 4.3 us in one phase and 6.5 in another).
        let below = |fl: &Option<(Figure, Floor)>| match (&latency, fl) {
            (Some(fig), Some((_, f))) => cx
                .latency_ceiling(fig.clone(), size, Some(f), memcpy)
                .beyond_ceiling(),
            _ => false,
        };
        for _ in 0..CEILING_RETRIES {
            if !below(&floor) {
                break;
            }
            check_interrupt(b, &format!("latency floor {z}, again"))?;
            let again = floor_figure(cx, b, size, FLOOR_SAMPLES * 2)?;
            let us = |fl: &Option<(Figure, Floor)>| fl.as_ref().map_or(f64::MAX, |(_, f)| f.us);
            if us(&again) < us(&floor) {
                floor = again;
            }
        }
        let floor = match floor {
            Some((fig, f)) => {
                record(rec, events, fig)?;
                Some(f)
            }
            None => None,
        };
        if let Some(fig) = latency {
            let fig = cx.latency_ceiling(fig, size, floor.as_ref(), memcpy);
            record(rec, events, fig)?;
        }
        for fig in bandwidths {
            record(rec, events, cx.bw_ceiling(fig, size, memcpy))?;
        }
    }

    if !cx.opts.figures.setup {
        return Ok(());
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

pub(super) fn link(s: &Session) -> Link<'_> {
    Link {
        ep: &*s.ep,
        listener: &*s.listener,
    }
}
