//! Merge bench: P producers × F buffers × S bytes into ONE file through the merging file
//! service (`accio-merge`), over shm and tcp, producers as threads and as processes, on
//! any number of directories — each figure beside the target's write ceiling (the best of
//! one stream and one per core) measured in the same run, and beside the naive alternative measured in the same run.
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
//! - **write mode** (`write_mode` parameter, identifying): `direct`, producers write their
//!   blocks into room of the output file themselves (one `pwrite` each; one copy in all,
//!   in parallel; the merger writes headers), or `copy`, into the merger's slots, which
//!   the merger thread copies into the file. Measured side by side over shm (default
//!   `--write-mode direct,copy`); tcp copies. The old figures without the parameter copied.
//!   With `direct`, `claim` says how the merger claimed the file's room ahead
//!   (`accio_merge::container::ClaimMode`): `header-pages` (tmpfs), `fallocate`
//!   (elsewhere), or `populate` (only with `ACCIO_MERGE_CLAIM`, measured slower).
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
//!   cores, the scheduler gives the merger one share among P + 1; null for runs under
//!   200 ms, which the counters' tick-by-tick updates would skew). Writing at the
//!   ceiling's rate but for 70% of the time points at CPU share; writing all the time
//!   at a lower rate points at the file system.
//! - **`producer_nice`**: the producers' CPU priority (`--producer-nice`, default 0).
//!
//! # Files and Ctrl-C
//!
//! Each target gets one private directory for the run's files
//! (`DIR/accio-bench-merge-RANDOM/`, mode 0700, made exclusively: `crate::scratch`), so no
//! other user can plant a file or a symlink where the bench writes; it is removed at the
//! end, on errors and on Ctrl-C. The cancellation flag ([`MergeBench::cancel_on`], by
//! default the Ctrl-C flag) is checked before every block a producer thread or naive writer
//! writes, between runs, and while the bench waits for producer processes, which it then
//! kills: the run ends within a block write with [`MergeBenchError::Interrupted`].
//!
//! # Defaults
//!
//! Scaled to the machine: P sweeps 1, 4, 16, 60 (the seed's worker count) and 256; S is
//! 2 MiB (the seed's buffer); F is chosen so that a run moves about 1 GiB (less where
//! memory or space is short). [`MergeBench::seed`] is the seed's exact 60 × 100 × 2 MiB.

mod guards;
mod naive;
mod procfs;
mod producer;
mod run;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

pub use accio_merge as service;

use crate::emit;
use crate::fs::FsInfo;
use accio_results::event::Event;
use accio_results::hazard::{Hazard, HazardKind};
use accio_results::model::{Recorder, Report};
use accio_results::node::probe;

pub use producer::{producer_main, ProducerCommand, ProducerConfig};

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
    /// Ctrl-C (or the cancellation flag, [`MergeBench::cancel_on`]); the run's files were
    /// removed.
    #[error("interrupted; test files removed")]
    Interrupted,
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
    modes: Vec<accio_merge::WriteMode>,
    command: Option<ProducerCommand>,
    cancel: &'static AtomicBool,
    device: Option<u32>,
    keep: Option<PathBuf>,
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
            modes: vec![accio_merge::WriteMode::Direct, accio_merge::WriteMode::Copy],
            command: None,
            cancel: &crate::cancel::INTERRUPTED,
            device: None,
            keep: None,
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

    /// Blocks from the memory of GPU `gpu` (`Producer::write_device`), or from host memory
    /// (`None`, the default). Each producer, thread or process, allocates its block in
    /// device memory and fills it with its pattern (processes each have their own CUDA
    /// context, threads share their process's); the naive alternative (which writes from
    /// host memory) is not measured, and every merged file is verified whole, each block's
    /// bytes against what its producer put in device memory, before it is removed; the
    /// figures carry `source = device:N`.
    pub fn device(mut self, gpu: Option<u32>) -> Self {
        self.device = gpu;
        self
    }

    /// Keeps the last merged file at `path` (for `accio verify` and friends) instead of
    /// removing it; refused if something is there already.
    pub fn keep(mut self, path: Option<PathBuf>) -> Self {
        self.keep = path;
        self
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

    /// How block bytes reach the file (default direct and copy, side by side). Over tcp
    /// only copy works: direct is skipped there, auto measures copy.
    pub fn write_modes(mut self, m: &[accio_merge::WriteMode]) -> Self {
        let mut v = Vec::new();
        for x in m {
            if !v.contains(x) {
                v.push(*x);
            }
        }
        self.modes = v;
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

    /// Flag that stops the run within a block write (default:
    /// [`crate::cancel::INTERRUPTED`], set by the handler of
    /// [`crate::cancel::SigintGuard`]): producer threads and naive writers check it before
    /// each block, the bench between runs and while it waits for producer processes (which
    /// it then kills); the run ends with [`MergeBenchError::Interrupted`] and its files
    /// removed.
    pub fn cancel_on(mut self, flag: &'static AtomicBool) -> Self {
        self.cancel = flag;
        self
    }

    /// How to start producer processes.
    pub fn producer_command(mut self, c: ProducerCommand) -> Self {
        self.command = Some(c);
        self
    }

    /// [`MergeBenchError::Interrupted`] once the cancellation flag is set.
    fn check_cancel(&self) -> Result<(), MergeBenchError> {
        if self.cancel.load(Ordering::SeqCst) {
            Err(MergeBenchError::Interrupted)
        } else {
            Ok(())
        }
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
        if self.modes.is_empty() {
            return bad("no write mode");
        }
        if self.buffer_bytes == 0 || self.repeats == 0 {
            return bad("buffer size and repeats must be at least 1");
        }
        if self.budget < self.slot_bytes() {
            return bad("the budget must hold at least one buffer");
        }
        if let Some(k) = &self.keep {
            if k.symlink_metadata().is_ok() {
                return Err(MergeBenchError::Config(format!(
                    "--keep {}: something is there already; refusing to replace it",
                    k.display()
                )));
            }
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
}

/// The merger's memory promise: its peak RSS stays within its slot budget plus 64 MiB
/// (rings, sink buffers, the program itself), whatever the number of producers.
fn rss_within_budget(rss: u64, budget: u64) -> bool {
    rss <= budget + (64 << 20)
}

fn warn(
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    kind: HazardKind,
    w: String,
) -> Result<(), MergeBenchError> {
    emit::hazard(rec, events, Hazard::new(kind, "merge", w)).map_err(MergeBenchError::Record)
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
        // Figures of older reports carry no write mode: they copied.
        let mode = match f.param_str("write_mode").as_str() {
            "direct" => "direct",
            _ => "copy",
        };
        by_key.entry(key).or_default().insert(
            format!("{}/{mode}", f.param_str("backend")),
            f.summary.median,
        );
        let rss = f.param_u64("merger_peak_rss_bytes").unwrap_or(0);
        let budget = f.param_u64("budget_bytes").unwrap_or(0);
        if f.param_str("placement") == "processes" {
            let ok = rss_within_budget(rss, budget);
            out.push(format!(
                "merger peak RSS {} MiB {} budget {} MiB + 64 MiB ({} {} {}, {} producers, {})",
                rss >> 20,
                if ok { "<=" } else { "EXCEEDS" },
                budget >> 20,
                f.param_str("backend"),
                mode,
                f.param_str("placement"),
                f.param_str("producers"),
                f.param_str("path")
            ));
        }
    }
    for ((path, pl, p), m) in by_key {
        let shm = m.get("shm/direct").or(m.get("shm/copy"));
        if let (Some(s), Some(t)) = (shm, m.get("tcp/copy")) {
            out.push(format!(
                "shm/tcp = {:.2}x ({pl}, {p} producers, {path})",
                s / t
            ));
        }
        if let (Some(d), Some(c)) = (m.get("shm/direct"), m.get("shm/copy")) {
            out.push(format!(
                "shm direct/copy = {:.2}x ({pl}, {p} producers, {path})",
                d / c
            ));
        }
    }
    out
}
