//! Merge bench: P producers × F buffers × S bytes into ONE file through the merging file
//! service (`accio-merge`), over shm and tcp, producers as threads and as processes, on
//! any number of directories — each figure beside the target's single-stream write ceiling
//! measured in the same run, and beside the naive alternative measured in the same run.
//!
//! # What is measured
//!
//! - **merge** (`metric = "merge"`): producers connect and prepare their data (an
//!   S-byte in-memory buffer, like the seed's `TMemFile`); once the merger has lent them
//!   the slots they asked for at connect (one-time setup, like creating the naive
//!   alternative's files, which is untimed too; the merger faults its whole budget in
//!   when it starts listening, before that), all start together; each
//!   writes its F blocks with `write_block` (over shm: one copy into the merger's slot,
//!   committed with a small message; over tcp: the bytes cross the socket once) and
//!   finishes; the clock stops when `Merger::close` has written the index and, on a
//!   persistent file system, synced the file. Throughput = P·F·S / that time.
//! - **naive** (`metric = "naive"`): what one does without a merger: P threads each write
//!   their F·S bytes to their own file, then the files are concatenated into one
//!   (`copy_file_range`, each part removed once appended) and, on a persistent file
//!   system, synced. Timed from the first write to the end.
//! - **ceiling**: `bench fs` on the same directory in the same run, one stream, records
//!   of S bytes: "write" on memory-backed file systems, "write+sync" on persistent ones
//!   (where the merge ends with a sync too). The fs figures are recorded as well, with
//!   `for = "merge ceiling"`.
//! - **merger peak RSS** (`merger_peak_rss_bytes` parameter): `VmHWM` of the merger's
//!   process, reset (`/proc/self/clear_refs` 5) before each run. With producer processes
//!   the merger's process is this one and nothing else runs in it; with producer threads
//!   it includes the producers (and shm slots mapped twice in one process), so compare
//!   the budget with the process figures. Shared memory (slots, rings) counts.
//! - **where the merger's time went**, for the repetition with the median throughput:
//!   `merger_writing_share` (its thread in file writes, over the timed wall time, and
//!   `merger_write_gbps`, the rate while writing), `merger_idle_share` (backing off
//!   between empty polling rounds), and from Linux schedstat `merger_on_cpu_share` and
//!   `merger_runqueue_share` (runnable but waiting for a CPU: with more producers than
//!   cores, the scheduler gives the merger one share among P + 1). Writing at the
//!   ceiling's rate but for 70% of the time points at CPU share; writing all the time
//!   at a lower rate points at the file system.
//! - **`producer_nice`**: the producers' CPU priority (`--producer-nice`, default 0).
//!
//! # Defaults
//!
//! Scaled to the machine: P sweeps 1, 4, 16, 60 (the seed's worker count) and 256; S is
//! 2 MiB (the seed's buffer); F is chosen so that a run moves about 1 GiB (less where
//! memory or space is short). [`MergeBench::seed`] is the seed's exact 60 × 100 × 2 MiB.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write as _};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub use accio_merge as service;
use accio_merge::{ContainerSink, Merger, Producer, ProducerOptions, SyncPolicy};

use crate::emit;
use crate::fs::{FsBench, FsInfo, Mode};
use accio_results::event::Event;
use accio_results::hazard::{Hazard, HazardKind};
use accio_results::model::{CeilingSource, Figure, Recorder, Report, Unit};
use accio_results::node::probe;
use accio_results::num::fmt3;
use accio_results::size::format_size;

/// Where producers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Threads of the merger's process.
    Threads,
    /// Separate processes (the `accio __merge-producer` command).
    Processes,
}

impl Placement {
    /// Name in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Threads => "threads",
            Placement::Processes => "processes",
        }
    }
}

/// How to start a producer process: a program and the arguments before the producer's own
/// (`accio __merge-producer`).
#[derive(Clone, Debug)]
pub struct ProducerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Leading arguments (the hidden subcommand).
    pub args: Vec<OsString>,
}

/// What one producer process does (its command-line arguments, see [`ProducerConfig::to_args`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerConfig {
    /// The merger's address.
    pub addr: String,
    /// Producer id.
    pub id: u32,
    /// Blocks to write.
    pub buffers: u64,
    /// Bytes per block.
    pub size: usize,
    /// CPU priority (`nice`) to run at.
    pub nice: i32,
}

impl ProducerConfig {
    /// The arguments `accio __merge-producer` parses back.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "--addr".into(),
            self.addr.clone(),
            "--id".into(),
            self.id.to_string(),
            "--buffers".into(),
            self.buffers.to_string(),
            "--size".into(),
            self.size.to_string(),
            "--nice".into(),
            self.nice.to_string(),
        ]
    }
}

/// Why the bench could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MergeBenchError {
    /// The parameters make no sense.
    #[error("invalid parameters: {0}")]
    Config(String),
    /// The merging file service failed.
    #[error("{what}: {source}")]
    Merge {
        /// What was being measured.
        what: String,
        /// The error.
        #[source]
        source: accio_merge::MergeError,
    },
    /// A system call, a producer process or a file failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The JSON result file could not be written.
    #[error("{0}")]
    Record(std::io::Error),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> MergeBenchError {
    let what = what.into();
    move |source| MergeBenchError::Io { what, source }
}

/// Configuration and entry point of the merge bench (a builder; see module docs).
#[derive(Clone, Debug)]
pub struct MergeBench {
    targets: Vec<PathBuf>,
    backends: Vec<String>,
    placements: Vec<Placement>,
    producers: Vec<usize>,
    buffer_bytes: usize,
    buffers: Option<u64>,
    run_bytes: u64,
    repeats: usize,
    budget: usize,
    sync_persistent: bool,
    naive: bool,
    ceilings: bool,
    producer_nice: i32,
    command: Option<ProducerCommand>,
}

impl MergeBench {
    /// The full bench on `targets` (directories), with the defaults of the module docs.
    pub fn new<I, P>(targets: I) -> MergeBench
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        MergeBench {
            targets: targets
                .into_iter()
                .map(|p| p.as_ref().to_path_buf())
                .collect(),
            backends: vec!["shm".into(), "tcp".into()],
            placements: vec![Placement::Threads, Placement::Processes],
            producers: vec![1, 4, 16, 60, 256],
            buffer_bytes: 2 << 20,
            buffers: None,
            run_bytes: 1 << 30,
            repeats: 3,
            budget: accio_merge::merger::DEFAULT_BUDGET,
            sync_persistent: true,
            naive: true,
            ceilings: true,
            producer_nice: 0,
            command: None,
        }
    }

    /// The quick variant (plain `accio bench`): 1 and 16 producers, 128 MiB per run, one
    /// sample each.
    pub fn quick<I, P>(targets: I) -> MergeBench
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        MergeBench {
            producers: vec![1, 16],
            run_bytes: 128 << 20,
            repeats: 1,
            ..MergeBench::new(targets)
        }
    }

    /// The seed's figure: 60 producers × 100 buffers × 2 MiB (12 GiB per run).
    pub fn seed<I, P>(targets: I) -> MergeBench
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        MergeBench {
            producers: vec![60],
            buffers: Some(100),
            repeats: 1,
            ..MergeBench::new(targets)
        }
    }

    /// Backends (default shm, tcp).
    pub fn backends(mut self, b: &[String]) -> Self {
        self.backends = b.to_vec();
        self
    }

    /// Producer placements (default threads and processes; processes need
    /// [`MergeBench::producer_command`]).
    pub fn placements(mut self, p: &[Placement]) -> Self {
        self.placements = p.to_vec();
        self
    }

    /// Producer counts to sweep.
    pub fn producers(mut self, p: &[usize]) -> Self {
        let mut v = p.to_vec();
        v.sort_unstable();
        v.dedup();
        self.producers = v;
        self
    }

    /// Bytes per buffer, S (default 2 MiB; the merger's slot size).
    pub fn buffer_bytes(mut self, s: usize) -> Self {
        self.buffer_bytes = s;
        self
    }

    /// Buffers per producer, F (default: whatever makes a run move about
    /// [`MergeBench::run_bytes`]).
    pub fn buffers(mut self, f: Option<u64>) -> Self {
        self.buffers = f;
        self
    }

    /// CPU priority (`nice`, 0–19) of every producer thread or process (default 0, the
    /// merger's). With more producers than cores, the scheduler shares the CPUs out
    /// evenly, so the merger thread gets one share among P + 1; a high nice value models
    /// the seed's layout, where producers ran on the coprocessor and never took the
    /// merger's CPU. On a machine with a core to spare it changes nothing.
    pub fn producer_nice(mut self, nice: i32) -> Self {
        self.producer_nice = nice;
        self
    }

    /// Target bytes per run when F is automatic (default 1 GiB).
    pub fn run_bytes(mut self, n: u64) -> Self {
        self.run_bytes = n;
        self
    }

    /// Samples per figure (default 3).
    pub fn repeats(mut self, n: usize) -> Self {
        self.repeats = n;
        self
    }

    /// The merger's memory budget (default 256 MiB).
    pub fn budget(mut self, bytes: usize) -> Self {
        self.budget = bytes;
        self
    }

    /// Sync at close on persistent file systems (default on; never on memory-backed ones).
    pub fn sync_persistent(mut self, on: bool) -> Self {
        self.sync_persistent = on;
        self
    }

    /// Measure the naive alternative (default on).
    pub fn naive(mut self, on: bool) -> Self {
        self.naive = on;
        self
    }

    /// Measure the fs ceilings (default on).
    pub fn ceilings(mut self, on: bool) -> Self {
        self.ceilings = on;
        self
    }

    /// How to start producer processes.
    pub fn producer_command(mut self, c: ProducerCommand) -> Self {
        self.command = Some(c);
        self
    }

    fn slot_bytes(&self) -> usize {
        self.buffer_bytes.div_ceil(4096) * 4096
    }

    fn buffers_for(&self, p: usize, info: &FsInfo) -> u64 {
        if let Some(f) = self.buffers {
            return f.max(1);
        }
        let mut bytes = self.run_bytes;
        // Leave room: the naive alternative needs parts + output, tmpfs needs RAM.
        let avail = match (info.free, info.memory_backed()) {
            (Some(f), false) => f,
            (Some(f), true) => f.min(probe::mem_available().unwrap_or(f)),
            (None, _) => probe::mem_available().unwrap_or(bytes * 4),
        };
        bytes = bytes.min(avail / 4);
        (bytes / (p as u64 * self.buffer_bytes as u64)).max(1)
    }

    fn validate(&self) -> Result<(), MergeBenchError> {
        let bad = |s: &str| Err(MergeBenchError::Config(s.into()));
        if self.targets.is_empty() {
            return bad("no target directories");
        }
        if self.producers.is_empty() || self.producers[0] == 0 {
            return bad("producer counts must be at least 1");
        }
        if self.buffer_bytes == 0 || self.repeats == 0 {
            return bad("buffer size and repeats must be at least 1");
        }
        if self.budget < self.slot_bytes() {
            return bad("the budget must hold at least one buffer");
        }
        for b in &self.backends {
            if !["shm", "tcp"].contains(&b.as_str()) {
                return Err(MergeBenchError::Config(format!(
                    "unknown backend {b:?} (known: shm, tcp)"
                )));
            }
        }
        Ok(())
    }

    /// Runs the bench, pushing figures to `rec` as they are complete. A target that
    /// cannot be used is reported (log and warning) and skipped.
    pub fn run(
        &self,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), MergeBenchError> {
        self.validate()?;
        events(Event::Started {
            bench: "merge",
            total: (self.targets.len() * self.producers.len()) as u64,
        });
        let placements: Vec<Placement> = self
            .placements
            .iter()
            .copied()
            .filter(|p| *p == Placement::Threads || self.command.is_some())
            .collect();
        for target in &self.targets {
            let info = match probe::probe(target) {
                Ok(i) if !i.read_only => i,
                Ok(_) => {
                    let w = format!("merge: {} is read-only; skipped", target.display());
                    warn(rec, events, HazardKind::NotMeasured, w)?;
                    events(Event::Advanced(self.producers.len() as u64));
                    continue;
                }
                Err(e) => {
                    let w = format!("merge: {}: {e}; skipped", target.display());
                    warn(rec, events, HazardKind::NotMeasured, w)?;
                    events(Event::Advanced(self.producers.len() as u64));
                    continue;
                }
            };
            let sync = self.sync_persistent && !info.memory_backed();
            events(Event::Step(&format!(
                "merge {}: {} ({}-backed){}",
                target.display(),
                info.fs_type,
                info.backing.name(),
                if sync { ", synced at close" } else { "" }
            )));
            let ceiling = if self.ceilings {
                self.ceiling(&info, sync, rec, events)?
            } else {
                None
            };
            for &p in &self.producers {
                let f = self.buffers_for(p, &info);
                let total = p as u64 * f * self.buffer_bytes as u64;
                let room = match info.free {
                    Some(free) => free,
                    None => probe::mem_available().unwrap_or(u64::MAX),
                };
                if total + total / 16 + (64 << 20) > room {
                    warn(
                        rec,
                        events,
                        HazardKind::NotMeasured,
                        format!(
                            "merge {}: {p} x {f} x {} = {} does not fit ({} free); skipped",
                            target.display(),
                            format_size(self.buffer_bytes as u64),
                            accio_results::size::human_bytes(total),
                            accio_results::size::human_bytes(room)
                        ),
                    )?;
                    events(Event::Advanced(1));
                    continue;
                }
                let naive = if self.naive {
                    self.measure_naive(&info, p, f, sync, ceiling.as_ref(), rec, events)?
                } else {
                    None
                };
                for backend in &self.backends {
                    for &pl in &placements {
                        self.measure_merge(
                            &info,
                            backend,
                            pl,
                            p,
                            f,
                            sync,
                            ceiling.as_ref(),
                            naive,
                            rec,
                            events,
                        )?;
                    }
                }
                events(Event::Advanced(1));
            }
        }
        events(Event::Done);
        Ok(())
    }

    /// The single-stream ceiling of `info.path`, from `bench fs` in this run.
    fn ceiling(
        &self,
        info: &FsInfo,
        sync: bool,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Option<(String, f64)>, MergeBenchError> {
        let mode = if sync { Mode::WriteSync } else { Mode::Write };
        let record = if self.buffer_bytes.is_multiple_of(4096) {
            self.buffer_bytes
        } else {
            4 << 20
        };
        let size = (self.run_bytes.min(1 << 30) / record as u64).max(1) * record as u64;
        let mut tmp = Recorder::new(None).map_err(MergeBenchError::Record)?;
        let fsb = FsBench::new([&info.path])
            .modes(&[mode])
            .threads(&[1])
            .file_size(size)
            .record_size(record)
            .repeats(self.repeats.max(1))
            .ceilings(false);
        let out = fsb
            .run(&mut tmp, &mut |e| match e {
                // The ceiling is a step of this bench, not a bench of its own.
                Event::Started { .. } | Event::Advanced(_) | Event::Done => {}
                e => events(e),
            })
            .map_err(|e| MergeBenchError::Io {
                what: format!("measuring the fs ceiling of {}", info.path.display()),
                source: std::io::Error::other(e.to_string()),
            })?;
        for f in &out.failures {
            warn(
                rec,
                events,
                HazardKind::NotMeasured,
                format!("merge: ceiling of {}: {f}", info.path.display()),
            )?;
        }
        let mut found = None;
        for fig in &tmp.report().figures {
            if fig.bench == "fs" && fig.metric == mode.name() {
                found = Some((
                    format!(
                        "fs {} 1 stream, {} records, same path, same run",
                        mode.name(),
                        format_size(record as u64)
                    ),
                    fig.summary.median,
                ));
            }
            rec.push(fig.clone().param("for", "merge ceiling"))
                .map_err(MergeBenchError::Record)?;
        }
        Ok(found)
    }

    #[allow(clippy::too_many_arguments)]
    fn figure(
        &self,
        metric: &str,
        info: &FsInfo,
        p: usize,
        f: u64,
        sync: bool,
        samples: Vec<f64>,
        ceiling: Option<&(String, f64)>,
    ) -> Option<Figure> {
        let total = p as u64 * f * self.buffer_bytes as u64;
        let mut fig = Figure::new("merge", metric, Unit::GBps, samples)?
            .param("path", info.path.display().to_string())
            .param("fs_type", info.fs_type.clone())
            .param("memory_backed", info.memory_backed())
            .param("producers", p)
            .param("buffers", f)
            .param("buffer_bytes", self.buffer_bytes as u64)
            .param("bytes", total)
            .param("sync", sync);
        if let Some((name, v)) = ceiling {
            fig = fig.ceiling(name.clone(), *v, CeilingSource::Measured);
        }
        Some(fig)
    }

    #[allow(clippy::too_many_arguments)]
    fn measure_naive(
        &self,
        info: &FsInfo,
        p: usize,
        f: u64,
        sync: bool,
        ceiling: Option<&(String, f64)>,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Option<f64>, MergeBenchError> {
        let mut samples = Vec::new();
        let src = source_buffer(self.buffer_bytes, 0);
        for _ in 0..self.repeats {
            samples.push(naive_once(&info.path, p, f, &src, sync)?);
        }
        let Some(fig) = self.figure("naive", info, p, f, sync, samples, ceiling) else {
            return Ok(None);
        };
        let fig = fig.param("placement", "threads").method(
            "each producer thread pwrites its buffers to its own file; then copy_file_range \
             concatenates the files into one (each part removed once appended)",
        );
        let median = fig.summary.median;
        emit::figure(rec, events, fig).map_err(MergeBenchError::Record)?;
        Ok(Some(median))
    }

    #[allow(clippy::too_many_arguments)]
    fn measure_merge(
        &self,
        info: &FsInfo,
        backend: &str,
        placement: Placement,
        p: usize,
        f: u64,
        sync: bool,
        ceiling: Option<&(String, f64)>,
        naive: Option<f64>,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), MergeBenchError> {
        let mut samples = Vec::new();
        let mut rss = 0u64;
        let mut stats = None;
        let (mut writing, mut idle, mut sched) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..self.repeats {
            let r = self.merge_once(&info.path, backend, placement, p, f, sync)?;
            samples.push(r.gbps);
            writing.push(r.writing);
            idle.push(r.idle);
            sched.push(r.sched);
            rss = rss.max(r.peak_rss);
            stats = Some(r.stats);
        }
        // Where the merger thread's time went, for the run with the median throughput.
        let mid = accio_results::stats::median_index(&samples).expect("at least one repeat");
        let (writing, idle, sched) = (writing[mid], idle[mid], sched[mid]);
        let write_gbps = samples[mid] / writing.max(f64::MIN_POSITIVE);
        let Some(mut fig) = self.figure("merge", info, p, f, sync, samples, ceiling) else {
            return Ok(());
        };
        let stats = stats.expect("at least one repeat");
        let mut method = format!(
            "producers connect, prepare an S-byte buffer and get their first slots (untimed), \
             start together, write_block F times ({}), finish; timed until Merger::close \
             returned (index written{})",
            if backend == "shm" {
                "one copy into the merger's shared slot, commit by message"
            } else {
                "vwrite_to over the socket, commit by message"
            },
            if sync { ", file fsynced" } else { "" }
        );
        if self.producer_nice != 0 {
            method += &format!("; producers at nice {}", self.producer_nice);
        }
        fig = fig
            .param("backend", backend)
            .param("placement", placement.name())
            .param("budget_bytes", self.budget as u64)
            .param("slot_bytes", self.slot_bytes() as u64)
            .param("merger_peak_rss_bytes", rss)
            .param("peak_slots", stats.peak_slots)
            .param("slot_moves", stats.moves)
            .param("merger_writing_share", writing)
            .param("merger_idle_share", idle)
            .param("merger_write_gbps", write_gbps)
            .param("producer_nice", self.producer_nice)
            .param(
                "merger_on_cpu_share",
                sched.map_or(Value::Null, |s| s.0.into()),
            )
            .param(
                "merger_runqueue_share",
                sched.map_or(Value::Null, |s| s.1.into()),
            )
            .param("naive_gbps", naive.map_or(Value::Null, Value::from))
            .method(method);
        let detail = format!(
            "merge {}: {backend} {}, {p} producer(s): merger peak RSS {}; merger thread \
             writing {:.0}% of the time (at {} GB/s), idle {:.0}%{}",
            info.path.display(),
            placement.name(),
            accio_results::size::human_bytes(rss),
            writing * 100.0,
            fmt3(write_gbps),
            idle * 100.0,
            sched.map_or(String::new(), |(on, wait)| format!(
                ", on a CPU {:.0}%, waiting for one {:.0}%",
                on * 100.0,
                wait * 100.0
            ))
        );
        let key = fig.key();
        emit::figure(rec, events, fig).map_err(MergeBenchError::Record)?;
        events(Event::Step(&detail));
        // The merger's promise, checkable where it runs alone in its process.
        if placement == Placement::Processes && !rss_within_budget(rss, self.budget as u64) {
            let w = Hazard {
                figures: vec![key],
                ..Hazard::new(
                    HazardKind::Caution,
                    "merge",
                    format!(
                        "merge {}: the merger's peak RSS, {}, is above its budget of {} + 64 MiB \
                     ({backend}, {p} producer processes)",
                        info.path.display(),
                        accio_results::size::human_bytes(rss),
                        accio_results::size::human_bytes(self.budget as u64)
                    ),
                )
            };
            emit::hazard(rec, events, w).map_err(MergeBenchError::Record)?;
        }
        Ok(())
    }

    fn merge_once(
        &self,
        dir: &Path,
        backend: &str,
        placement: Placement,
        p: usize,
        f: u64,
        sync: bool,
    ) -> Result<RunResult, MergeBenchError> {
        let path = dir.join(format!("accio-bench-merge.{}.accio", std::process::id()));
        let _cleanup = RemoveOnDrop(path.clone());
        let merr = |what: &str| {
            let what = what.to_string();
            move |source| MergeBenchError::Merge { what, source }
        };
        let sink = ContainerSink::create(&path, Default::default())
            .map_err(merr("creating the output"))?;
        let addr = match backend {
            "shm" => format!("shm://accio-bench-merge-{}", std::process::id()),
            _ => "tcp://127.0.0.1:0".to_string(),
        };
        let problems = Arc::new(Mutex::new(Vec::new()));
        let pr = problems.clone();
        let merger = Merger::builder()
            .budget(self.budget)
            .slot_bytes(self.slot_bytes())
            .sync(if sync {
                SyncPolicy::OnClose
            } else {
                SyncPolicy::Never
            })
            .on_event(move |e| {
                if !matches!(
                    e,
                    accio_merge::Event::Connected { .. } | accio_merge::Event::Finished { .. }
                ) {
                    pr.lock().expect("events").push(e.to_string());
                }
            })
            .listen(&addr, Box::new(sink))
            .map_err(merr("starting the merger"))?;
        let addr = merger.addr().to_string();
        reset_peak_rss();
        let (t0, before, spawned) = match placement {
            Placement::Threads => {
                let src = Arc::new(source_buffer(self.buffer_bytes, 1));
                let go = Arc::new(Barrier::new(p + 1));
                let handles: Vec<_> = (0..p)
                    .map(|i| {
                        let (addr, go, src) = (addr.clone(), go.clone(), src.clone());
                        let nice = self.producer_nice;
                        std::thread::spawn(move || -> accio_merge::Result<()> {
                            set_nice(nice).map_err(|e| {
                                accio_merge::MergeError::Config(format!("producer {i}: {e}"))
                            })?;
                            let prod = Producer::connect_with(
                                &addr,
                                ProducerOptions {
                                    id: Some(i as u32),
                                    timeout: Duration::from_secs(60),
                                },
                            );
                            go.wait();
                            let mut prod = prod?;
                            for _ in 0..f {
                                prod.write_block(&src)?;
                            }
                            prod.finish().map(|_| ())
                        })
                    })
                    .collect();
                wait_warm(&merger, p);
                let before = (merger.stats(), merger_sched());
                go.wait();
                let t0 = Instant::now();
                for h in handles {
                    h.join()
                        .map_err(|_| MergeBenchError::Config("a producer thread panicked".into()))?
                        .map_err(merr("a producer thread"))?;
                }
                (t0, before, Vec::new())
            }
            Placement::Processes => {
                let cmd = self.command.as_ref().expect("filtered in run");
                let mut kids = Vec::with_capacity(p);
                for i in 0..p {
                    let cfg = ProducerConfig {
                        addr: addr.clone(),
                        id: i as u32,
                        buffers: f,
                        size: self.buffer_bytes,
                        nice: self.producer_nice,
                    };
                    let child = Command::new(&cmd.program)
                        .args(&cmd.args)
                        .args(cfg.to_args())
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .spawn()
                        .map_err(io_err(format!(
                            "starting producer process {}",
                            cmd.program.display()
                        )))?;
                    kids.push(Kid(child));
                }
                for (i, k) in kids.iter_mut().enumerate() {
                    let out = k.0.stdout.as_mut().expect("piped");
                    let mut line = String::new();
                    BufReader::new(out)
                        .read_line(&mut line)
                        .map_err(io_err(format!("reading producer process {i}")))?;
                    if line.trim() != "ready" {
                        return Err(MergeBenchError::Io {
                            what: format!("producer process {i}"),
                            source: std::io::Error::other(format!(
                                "did not start (said {:?}; see its error above)",
                                line.trim()
                            )),
                        });
                    }
                }
                wait_warm(&merger, p);
                let before = (merger.stats(), merger_sched());
                let t0 = Instant::now();
                for k in &mut kids {
                    // Best effort: a producer that died is reported by its exit status.
                    let _ = k.0.stdin.as_mut().expect("piped").write_all(b"go\n");
                }
                for (i, k) in kids.iter_mut().enumerate() {
                    let st =
                        k.0.wait()
                            .map_err(io_err(format!("waiting for producer {i}")))?;
                    if !st.success() {
                        return Err(MergeBenchError::Io {
                            what: format!("producer process {i}"),
                            source: std::io::Error::other(format!("exited with {st}")),
                        });
                    }
                }
                (t0, before, kids)
            }
        };
        drop(spawned);
        // The progress thread's scheduler counters while the producers ran (it is gone
        // once close returns).
        let (before, sched_before) = before;
        let sched = merger_sched()
            .zip(sched_before)
            .map(|((run, wait), (run0, wait0))| {
                let ns = t0.elapsed().as_nanos() as f64;
                (
                    run.saturating_sub(run0) as f64 / ns,
                    wait.saturating_sub(wait0) as f64 / ns,
                )
            });
        let summary = merger.close().map_err(merr("closing the merger"))?;
        let secs = t0.elapsed().as_secs_f64();
        let peak_rss = peak_rss();
        let want = p as u64 * f;
        if summary.sink.blocks != want
            || summary.sink.payload_bytes != want * self.buffer_bytes as u64
        {
            return Err(MergeBenchError::Io {
                what: format!("merge into {}", path.display()),
                source: std::io::Error::other(format!(
                    "wrote {} blocks / {} bytes, expected {want} / {}; events: {:?}",
                    summary.sink.blocks,
                    summary.sink.payload_bytes,
                    want * self.buffer_bytes as u64,
                    problems.lock().expect("events")
                )),
            });
        }
        let (end, ns) = (summary.stats, secs * 1e9);
        Ok(RunResult {
            gbps: summary.sink.payload_bytes as f64 / secs / 1e9,
            peak_rss,
            stats: summary.stats,
            writing: end.sink_write_ns.saturating_sub(before.sink_write_ns) as f64 / ns,
            idle: end.idle_ns.saturating_sub(before.idle_ns) as f64 / ns,
            sched,
        })
    }
}

/// Waits (at most 30 s) until `p` producers are connected and the merger has registered
/// the slots they asked for at connect time, so that the clock measures the merge and not
/// the one-time setup (fresh slot memory is zeroed by the kernel at registration).
fn wait_warm(merger: &Merger, p: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = (usize::MAX, 0usize);
    let mut steady = 0;
    while Instant::now() < deadline {
        let s = merger.stats();
        // Registration is done when the slot count stops moving with everyone connected.
        if s.active == p && (s.slots, s.active) == last {
            steady += 1;
            if steady >= 5 {
                return;
            }
        } else {
            steady = 0;
        }
        last = (s.slots, s.active);
        std::thread::sleep(Duration::from_millis(2));
    }
}

struct RunResult {
    gbps: f64,
    peak_rss: u64,
    stats: accio_merge::MergerStats,
    /// Shares of the timed wall time the merger thread spent in file writes and idle.
    writing: f64,
    idle: f64,
    /// Shares of the time until the producers finished that the merger thread was on a
    /// CPU, and runnable but waiting for one (Linux schedstat; `None` elsewhere).
    sched: Option<(f64, f64)>,
}

/// A producer process, killed if the bench stops early.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An S-byte buffer with a pattern, every page touched (fresh memory is slow to touch).
fn source_buffer(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// One naive run: P files written in parallel, then concatenated; GB/s.
fn naive_once(
    dir: &Path,
    p: usize,
    f: u64,
    src: &[u8],
    sync: bool,
) -> Result<f64, MergeBenchError> {
    let base = dir.join(format!("accio-bench-merge-naive.{}", std::process::id()));
    let parts: Vec<PathBuf> = (0..p)
        .map(|i| base.with_extension(format!("part{i}")))
        .collect();
    let out = base.with_extension("out");
    let _cleanup: Vec<RemoveOnDrop> = parts
        .iter()
        .chain(std::iter::once(&out))
        .map(|p| RemoveOnDrop(p.clone()))
        .collect();
    let start = Barrier::new(p + 1);
    let t0 = std::thread::scope(|s| -> Result<Instant, MergeBenchError> {
        let handles: Vec<_> = parts
            .iter()
            .map(|part| {
                let start = &start;
                s.spawn(move || -> Result<(), MergeBenchError> {
                    let file = std::fs::File::create(part)
                        .map_err(io_err(format!("creating {}", part.display())))?;
                    start.wait();
                    use std::os::unix::fs::FileExt;
                    for i in 0..f {
                        file.write_all_at(src, i * src.len() as u64)
                            .map_err(io_err(format!("writing {}", part.display())))?;
                    }
                    Ok(())
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        for h in handles {
            h.join()
                .map_err(|_| MergeBenchError::Config("a naive writer panicked".into()))??;
        }
        Ok(t0)
    })?;
    let dst = std::fs::File::create(&out).map_err(io_err(format!("creating {}", out.display())))?;
    let mut at: i64 = 0;
    for part in &parts {
        let srcf =
            std::fs::File::open(part).map_err(io_err(format!("opening {}", part.display())))?;
        let len = srcf.metadata().map_err(io_err("fstat"))?.len() as i64;
        let mut from: i64 = 0;
        while from < len {
            // SAFETY: both descriptors are open files; the offsets are our own locals.
            let n = unsafe {
                libc::copy_file_range(
                    srcf.as_raw_fd(),
                    &mut from,
                    dst.as_raw_fd(),
                    &mut at,
                    (len - from) as usize,
                    0,
                )
            };
            if n <= 0 {
                return Err(MergeBenchError::Io {
                    what: format!("concatenating {} into {}", part.display(), out.display()),
                    source: std::io::Error::last_os_error(),
                });
            }
        }
        drop(srcf);
        std::fs::remove_file(part).map_err(io_err(format!("removing {}", part.display())))?;
    }
    if sync {
        dst.sync_all()
            .map_err(io_err(format!("syncing {}", out.display())))?;
    }
    drop(dst);
    let secs = t0.elapsed().as_secs_f64();
    Ok(p as f64 * f as f64 * src.len() as f64 / secs / 1e9)
}

/// Resets this process's peak RSS (`VmHWM`) to its current RSS.
fn reset_peak_rss() {
    // Best effort: without it the peak covers the whole process lifetime (an overestimate).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The merger progress thread's scheduler counters, `/proc/self/task/TID/schedstat`:
/// nanoseconds on a CPU and nanoseconds runnable but waiting for one.
fn merger_sched() -> Option<(u64, u64)> {
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let dir = entry.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != "accio-merge" {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("schedstat")).ok()?;
        let mut v = stat.split_whitespace().map(|x| x.parse::<u64>().ok());
        return Some((v.next()??, v.next()??));
    }
    None
}

/// Sets the calling thread's CPU priority (on Linux `setpriority` on a thread id applies to
/// that thread only); 0 leaves it alone.
fn set_nice(nice: i32) -> std::io::Result<()> {
    if nice == 0 {
        return Ok(());
    }
    // SAFETY: plain system calls with no pointers.
    let rc = unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice)
    };
    if rc == 0 {
        Ok(())
    } else {
        let e = std::io::Error::last_os_error();
        Err(std::io::Error::new(
            e.kind(),
            format!("setting nice {nice}: {e}"),
        ))
    }
}

/// The merger's memory promise: its peak RSS stays within its slot budget plus 64 MiB
/// (rings, sink buffers, the program itself), whatever the number of producers.
fn rss_within_budget(rss: u64, budget: u64) -> bool {
    rss <= budget + (64 << 20)
}

/// This process's peak RSS in bytes (`VmHWM`), 0 where unreadable.
fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn warn(
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    kind: HazardKind,
    w: String,
) -> Result<(), MergeBenchError> {
    emit::hazard(rec, events, Hazard::new(kind, "merge", w)).map_err(MergeBenchError::Record)
}

/// The body of a producer process: connect, prepare the buffer, say `ready`, wait for a
/// line on stdin, write the blocks, finish, say `done`.
pub fn producer_main(cfg: &ProducerConfig) -> accio_merge::Result<()> {
    let mut p = Producer::connect_with(
        &cfg.addr,
        ProducerOptions {
            id: Some(cfg.id),
            timeout: Duration::from_secs(60),
        },
    )?;
    let src = source_buffer(cfg.size, cfg.id as u8);
    set_nice(cfg.nice).map_err(|e| accio_merge::MergeError::Config(e.to_string()))?;
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    for _ in 0..cfg.buffers {
        p.write_block(&src)?;
    }
    let s = p.finish()?;
    println!("done {} {}", s.blocks, s.bytes);
    Ok(())
}

/// Ratios the issue asks for, from one report: shm vs tcp at equal parameters, and the
/// merger's RSS against its budget. One line each.
pub fn checks(report: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let mut by_key: BTreeMap<(String, String, String), BTreeMap<String, f64>> = BTreeMap::new();
    for f in report.select("merge", "merge") {
        let key = (
            f.param_str("path"),
            f.param_str("placement"),
            f.param_str("producers"),
        );
        by_key
            .entry(key)
            .or_default()
            .insert(f.param_str("backend"), f.summary.median);
        let rss = f.param_u64("merger_peak_rss_bytes").unwrap_or(0);
        let budget = f.param_u64("budget_bytes").unwrap_or(0);
        if f.param_str("placement") == "processes" {
            let ok = rss_within_budget(rss, budget);
            out.push(format!(
                "merger peak RSS {} MiB {} budget {} MiB + 64 MiB ({} {}, {} producers, {})",
                rss >> 20,
                if ok { "<=" } else { "EXCEEDS" },
                budget >> 20,
                f.param_str("backend"),
                f.param_str("placement"),
                f.param_str("producers"),
                f.param_str("path")
            ));
        }
    }
    for ((path, pl, p), m) in by_key {
        if let (Some(s), Some(t)) = (m.get("shm"), m.get("tcp")) {
            out.push(format!(
                "shm/tcp = {:.2}x ({pl}, {p} producers, {path})",
                s / t
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_and_naive_figures_carry_the_fs_ceiling_of_the_same_run() {
        let dir = std::env::temp_dir().join(format!("accio-bench-merge-t-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut rec = Recorder::new(None).unwrap();
        MergeBench::quick([&dir])
            .producers(&[2])
            .buffer_bytes(256 << 10)
            .run_bytes(4 << 20)
            .budget(4 << 20)
            .placements(&[Placement::Threads])
            .run(&mut rec, &mut |_| {})
            .unwrap();
        let r = rec.report();
        let ceil = r
            .select("fs", "write+sync")
            .next()
            .or_else(|| r.select("fs", "write").next())
            .expect("ceiling measured")
            .summary
            .median;
        let merges: Vec<_> = r.select("merge", "merge").collect();
        assert_eq!(merges.len(), 2, "shm and tcp");
        for f in &merges {
            assert_eq!(f.ceiling.as_ref().unwrap().value, ceil);
            assert_eq!(f.param_str("bytes"), (2u64 * 8 * (256 << 10)).to_string());
            assert!(f.params["merger_peak_rss_bytes"].as_u64().unwrap() > 0);
            assert!(f.summary.median > 0.0);
            // Where the merger's time went: shares of the wall time, and the write rate.
            let writing = f.params["merger_writing_share"].as_f64().unwrap();
            assert!(writing > 0.0 && writing <= 1.0, "{writing}");
            let idle = f.params["merger_idle_share"].as_f64().unwrap();
            // An idle sleep under way when the clock starts counts whole: up to 0.5 ms,
            // more on a loaded machine, which shows in a run of a few ms like this one.
            assert!(idle >= 0.0 && writing + idle <= 1.25, "{writing} + {idle}");
            assert!(f.params["merger_write_gbps"].as_f64().unwrap() >= f.summary.min);
            if let Some(on_cpu) = f.params["merger_on_cpu_share"].as_f64() {
                assert!(on_cpu > 0.0 && on_cpu <= 1.05, "{on_cpu}");
            }
        }
        assert_eq!(r.select("merge", "naive").count(), 1);
        let t = accio_report::text::merge::render_table(r);
        assert!(
            t.contains("shm") && t.contains("tcp") && t.contains("merger writing"),
            "{t}"
        );
        assert!(checks(r).iter().any(|l| l.starts_with("shm/tcp = ")));
        // Every output and part file was removed.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir(&dir).unwrap();
    }
}
