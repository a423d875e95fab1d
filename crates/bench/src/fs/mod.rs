//! File-system bench: write, write+sync, cold read and re-read of one file per thread, on
//! any number of directories in one run, after Colfax's IOzone methodology (Vladimirov,
//! Karpusenko, Yoo, *File I/O on Intel Xeon Phi Coprocessors: RAM disks, VirtIO, NFS and
//! Lustre*, 2014: §2.3–2.5 and Table 1).
//!
//! # Modes
//!
//! Each repeat runs the selected modes in this order, each thread on its own file
//! (`PATH/accio-bench-fs.PID/tI`), in records of `record_size` bytes (Colfax: 4 MB):
//!
//! - **write**: `pwrite` the whole file into a new file (the old one is unlinked before
//!   the clock starts, so pages and blocks are fresh), then `close`;
//!   no sync, so this is page-cache speed (IOzone `-i 0`, "write" column).
//! - **write+sync**: the same with `fsync` before `close`, inside the timing (IOzone `-e`).
//! - **cold read**: evict the files from the cache ([`CacheDrop`]; the method lands in the
//!   figure's `method`), then read them. On tmpfs/ramfs there is nothing to evict: the
//!   figure is marked memory-backed.
//! - **re-read**: read the same files again, warm (IOzone's "reread" column).
//! - **overwrite** (opt-in): write over the existing files, pages present. On VMs that hand
//!   freed memory back to the host, the first touch of a page costs far more than a copy
//!   (`MACHINE_NOTES.md` trait 2), so "write" to fresh tmpfs files swings several-fold;
//!   "overwrite" is the steady-state companion.
//!
//! # Timing
//!
//! Files are opened before the clock starts (as in IOzone's throughput mode); `close` (and
//! `fsync`) are inside it. All threads are released together by a barrier; a sample is
//! total bytes / (last finish − first start) ([`aggregate_gbps`]), never the sum of
//! per-thread rates, which is IOzone's "children see" figure and overstates throughput
//! whenever threads do not overlap exactly. Each figure is the median, min and max over
//! `repeats` samples. Memory-backed paths (and page-cache modes elsewhere) carry the
//! memcpy bandwidth measured in the same run, at the same record size and thread count, as
//! their ceiling.
//!
//! ```no_run
//! use accio_bench::fs::{FsBench, Mode};
//! use accio_results::event::Event;
//! use accio_results::model::Recorder;
//!
//! let mut rec = Recorder::new(None).unwrap();
//! let outcome = FsBench::new(["/dev/shm", "/tmp"])
//!     .modes(&[Mode::Write, Mode::ReRead])
//!     .threads(&[1, 2])
//!     .file_size(32 << 20)
//!     .run(&mut rec, &mut |e| {
//!         if let Event::Step(line) = e {
//!             eprintln!("{line}");
//!         }
//!     })
//!     .unwrap();
//! assert!(outcome.failures.is_empty());
//! print!("{}", accio_report::text::fs::summary_table(rec.report()));
//! ```

mod cache;
mod io;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::{emit, mem};
use accio_results::event::Event;
use accio_results::hazard::{Hazard, HazardKind};
use accio_results::model::{CeilingSource, Figure, Recorder, Unit};
use accio_results::node::probe;
use accio_results::num::fmt3;
use accio_results::size::format_size;

pub use accio_results::metric::fs::Mode;
pub use accio_results::node::probe::{Backing, FsInfo};
pub use cache::MAX_RESIDENT;
pub use io::{aggregate_gbps, Span};

use io::{Phase, Worker};

/// Default file size per thread: 128 MiB, what Colfax used for parallel runs on RAM disks
/// because smaller files let thread start-up overhead dominate (§4.3).
pub const DEFAULT_FILE_SIZE: u64 = 128 << 20;
/// Default record size: 4 MiB, Colfax's record size for every test.
pub const DEFAULT_RECORD_SIZE: usize = 4 << 20;
/// Default number of repeats (samples per figure).
pub const DEFAULT_REPEATS: usize = 3;
/// Default io_uring queue depth.
pub const DEFAULT_IODEPTH: usize = 4;
/// Files and records must be multiples of this (O_DIRECT, page-aligned buffers).
pub const ALIGN: u64 = 4096;

/// Min–max spread (relative to the median) above which a figure is called noisy.
const NOISY: f64 = 0.25;

/// Measurement hazards of one path, reported as one warning each after the path.
#[derive(Default)]
struct Hazards {
    /// `mode xN spread%` of noisy figures, with the figure's key.
    noisy: Vec<(String, String)>,
    /// `mode xN ratio%` of figures above their ceiling, with the figure's key.
    above: Vec<(String, String)>,
}

/// How records are submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// One `pwrite`/`pread` per record, synchronously (fio's `psync`).
    Psync,
    /// io_uring with up to `iodepth` records in flight per thread.
    IoUring,
}

impl Engine {
    /// Name in JSON and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Psync => "psync",
            Engine::IoUring => "io_uring",
        }
    }
}

/// How the page cache is emptied before a cold read (see the `cache` module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheDrop {
    /// `drop_caches` where writable (root), else `posix_fadvise`; O_DIRECT when pages stay.
    Auto,
    /// sync, then `echo 3 > /proc/sys/vm/drop_caches` (root only).
    DropCaches,
    /// `fsync` + `posix_fadvise(POSIX_FADV_DONTNEED)` per file.
    Fadvise,
    /// No drop: read with O_DIRECT.
    Direct,
}

/// Why a path (or the whole run) could not be measured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    /// The path is unusable: missing, not a directory, read-only, not writable.
    #[error("{}: {reason}", path.display())]
    BadPath {
        /// The path as given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The planned files do not fit (checked with statvfs before starting).
    #[error(
        "{}: not enough space: {files} file(s) of {} need {}, only {} available ({source_of})",
        path.display(), accio_results::size::human_bytes(*file_size), accio_results::size::human_bytes(*needed),
        accio_results::size::human_bytes(*available)
    )]
    NoSpace {
        /// The path as given.
        path: PathBuf,
        /// Files planned at once (the largest thread count).
        files: usize,
        /// Bytes per file.
        file_size: u64,
        /// Bytes needed, with a margin for metadata.
        needed: u64,
        /// Bytes available.
        available: u64,
        /// Where `available` comes from (statvfs, MemAvailable).
        source_of: String,
    },
    /// A system call failed; `what` names the operation and the file.
    #[error("{what}: {source}")]
    Io {
        /// Operation and file, e.g. `writing /x/t0 at offset 4194304`.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The parameters make no sense.
    #[error("invalid parameters: {0}")]
    Config(String),
    /// Ctrl-C (or the cancellation flag); test files were removed.
    #[error("interrupted; test files removed")]
    Interrupted,
    /// The JSON result file could not be written.
    #[error("{0}")]
    Record(std::io::Error),
}

impl FsError {
    pub(crate) fn io(what: String, source: std::io::Error) -> FsError {
        FsError::Io { what, source }
    }
}

impl From<probe::ProbeError> for FsError {
    fn from(e: probe::ProbeError) -> FsError {
        match e {
            probe::ProbeError::BadPath { path, reason } => FsError::BadPath { path, reason },
            probe::ProbeError::Io { what, source } => FsError::Io { what, source },
            other => FsError::Config(other.to_string()),
        }
    }
}

/// A path that could not be measured (the others still were).
#[derive(Debug)]
pub struct PathFailure {
    /// The path as given.
    pub path: PathBuf,
    /// Why.
    pub error: FsError,
}

impl std::fmt::Display for PathFailure {
    /// One line naming the path and the cause (the path once, even where the error names
    /// it too); mid-run I/O errors add that the test files were removed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let msg = self.error.to_string();
        let path = self.path.display().to_string();
        if !msg.starts_with(&path) {
            write!(f, "{path}: ")?;
        }
        f.write_str(&msg)?;
        if matches!(self.error, FsError::Io { .. }) {
            f.write_str(" (test files removed)")?;
        }
        Ok(())
    }
}

/// What a run did besides the figures it recorded.
#[derive(Debug, Default)]
pub struct FsOutcome {
    /// Paths measured completely.
    pub measured: Vec<PathBuf>,
    /// Paths rejected up front or abandoned on an error, in order.
    pub failures: Vec<PathFailure>,
}

/// Configuration and entry point of the file-system bench (a builder; see module docs).
#[derive(Clone, Debug)]
pub struct FsBench {
    paths: Vec<PathBuf>,
    modes: Vec<Mode>,
    threads: Vec<usize>,
    file_size: u64,
    record_size: usize,
    repeats: usize,
    direct: bool,
    engine: Engine,
    iodepth: usize,
    cache_drop: CacheDrop,
    check_space: bool,
    ceilings: bool,
    cancel: &'static AtomicBool,
}

impl FsBench {
    /// A bench of `paths` (directories to create test files in) with the defaults below.
    pub fn new<I, P>(paths: I) -> FsBench
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        FsBench {
            paths: paths
                .into_iter()
                .map(|p| p.as_ref().to_path_buf())
                .collect(),
            modes: Mode::DEFAULT.to_vec(),
            threads: mem::default_threads(),
            file_size: DEFAULT_FILE_SIZE,
            record_size: DEFAULT_RECORD_SIZE,
            repeats: DEFAULT_REPEATS,
            direct: false,
            engine: Engine::Psync,
            iodepth: DEFAULT_IODEPTH,
            cache_drop: CacheDrop::Auto,
            check_space: true,
            ceilings: true,
            cancel: &crate::cancel::INTERRUPTED,
        }
    }

    /// Modes to measure (default: [`Mode::DEFAULT`]); always run in [`Mode::ALL`] order.
    pub fn modes(mut self, modes: &[Mode]) -> FsBench {
        self.modes = Mode::ALL
            .into_iter()
            .filter(|m| modes.contains(m))
            .collect();
        self
    }

    /// Thread counts (default: 1, 2, 4, ... up to and including the number of CPUs).
    pub fn threads(mut self, threads: &[usize]) -> FsBench {
        let mut t = threads.to_vec();
        t.sort_unstable();
        t.dedup();
        self.threads = t;
        self
    }

    /// Bytes per file, i.e. per thread (default [`DEFAULT_FILE_SIZE`]).
    pub fn file_size(mut self, bytes: u64) -> FsBench {
        self.file_size = bytes;
        self
    }

    /// Bytes per `write`/`read` call (default [`DEFAULT_RECORD_SIZE`]).
    pub fn record_size(mut self, bytes: usize) -> FsBench {
        self.record_size = bytes;
        self
    }

    /// Samples per figure (default [`DEFAULT_REPEATS`]; fewer than 3 gives a warning).
    pub fn repeats(mut self, n: usize) -> FsBench {
        self.repeats = n;
        self
    }

    /// Open every file with O_DIRECT (default off).
    pub fn direct(mut self, on: bool) -> FsBench {
        self.direct = on;
        self
    }

    /// I/O engine (default [`Engine::Psync`]).
    pub fn engine(mut self, engine: Engine) -> FsBench {
        self.engine = engine;
        self
    }

    /// Records in flight per thread with io_uring (default [`DEFAULT_IODEPTH`]).
    pub fn iodepth(mut self, depth: usize) -> FsBench {
        self.iodepth = depth;
        self
    }

    /// Cache-drop method before cold reads (default [`CacheDrop::Auto`]).
    pub fn cache_drop(mut self, how: CacheDrop) -> FsBench {
        self.cache_drop = how;
        self
    }

    /// Refuse paths without room for the planned files (default on). Turning it off lets a
    /// full file system fail mid-run with ENOSPC instead, which tests use.
    pub fn check_space(mut self, on: bool) -> FsBench {
        self.check_space = on;
        self
    }

    /// Measure memcpy ceilings in the same run (default on).
    pub fn ceilings(mut self, on: bool) -> FsBench {
        self.ceilings = on;
        self
    }

    /// Flag that stops the run between records (default: [`crate::cancel::INTERRUPTED`],
    /// set by the handler of [`crate::cancel::SigintGuard`]).
    pub fn cancel_on(mut self, flag: &'static AtomicBool) -> FsBench {
        self.cancel = flag;
        self
    }

    fn record(&self) -> usize {
        (self.record_size as u64).min(self.file_size) as usize
    }

    fn validate(&self) -> Result<(), FsError> {
        let bad = |s: String| Err(FsError::Config(s));
        if self.paths.is_empty() {
            return bad("no directories given".into());
        }
        if self.modes.is_empty() {
            return bad("no modes selected".into());
        }
        if self.threads.is_empty() || self.threads[0] == 0 {
            return bad("thread counts must be at least 1".into());
        }
        if self.repeats == 0 {
            return bad("repeats must be at least 1".into());
        }
        for (what, v) in [
            ("file size", self.file_size),
            ("record size", self.record_size as u64),
        ] {
            if v == 0 || v % ALIGN != 0 {
                return bad(format!(
                    "{what} {v} is not a positive multiple of 4 KiB (O_DIRECT and \
                     page-aligned buffers need that)"
                ));
            }
        }
        if self.engine == Engine::IoUring && self.record_size as u64 > u32::MAX as u64 {
            return bad("record size must be below 4 GiB for io_uring".into());
        }
        Ok(())
    }

    /// Checks `info` for writability and room for the largest thread count's files.
    fn check_usable(&self, info: &FsInfo) -> Result<(), FsError> {
        let bad = |reason: String| FsError::BadPath {
            path: info.path.clone(),
            reason,
        };
        if info.read_only {
            return Err(bad(format!(
                "is on a read-only file system ({} mounted ro at {})",
                info.fs_type,
                info.mount_point
                    .as_deref()
                    .map_or("?".into(), |p| p.display().to_string())
            )));
        }
        probe::writable(&info.path).map_err(|e| bad(format!("is not writable: {e}")))?;
        if !self.check_space {
            return Ok(());
        }
        let files = *self.threads.last().expect("validated");
        let total = files as u64 * self.file_size;
        // Margin for metadata (extent trees, journal): 1/64 plus 1 MiB per file.
        let needed = total + total / 64 + files as u64 * (1 << 20);
        let (available, source_of) = match (info.free, info.memory_backed()) {
            (Some(free), false) => (free, "statvfs".to_string()),
            (Some(free), true) => match probe::mem_available() {
                Some(m) if m < free => (m, "MemAvailable: tmpfs pages need RAM".to_string()),
                _ => (free, "statvfs".to_string()),
            },
            (None, _) => match probe::mem_available() {
                Some(m) => (
                    m,
                    format!("MemAvailable: {} has no size limit", info.fs_type),
                ),
                None => return Ok(()),
            },
        };
        if needed > available {
            return Err(FsError::NoSpace {
                path: info.path.clone(),
                files,
                file_size: self.file_size,
                needed,
                available,
                source_of,
            });
        }
        Ok(())
    }

    /// Runs the bench: checks every path first (reporting unusable ones through `log` and
    /// as warnings), measures memcpy ceilings, then measures each usable path, pushing
    /// figures to `rec` as they are complete. A failing path is recorded in
    /// [`FsOutcome::failures`] and the run goes on; only cancellation, bad parameters and
    /// an unwritable result file end it with an error. Test files are removed in every
    /// case.
    pub fn run(
        &self,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<FsOutcome, FsError> {
        self.validate()?;
        let mut out = FsOutcome::default();
        if self.repeats < 3 {
            caution(
                rec,
                events,
                format!(
                    "fs: {} repeat(s): min and max say little below 3",
                    self.repeats
                ),
            )?;
        }
        let mut usable = Vec::new();
        for path in &self.paths {
            match probe::probe(path)
                .map_err(FsError::from)
                .and_then(|i| self.check_usable(&i).map(|()| i))
            {
                Ok(info) => usable.push(info),
                Err(e) => fail(rec, events, &mut out, path, e)?,
            }
        }
        if usable.is_empty() {
            return Ok(out);
        }
        let units = self.repeats as u64 * self.threads.iter().sum::<usize>() as u64;
        events(Event::Started {
            bench: "fs",
            total: usable.len() as u64 * units,
        });
        let ceilings = if self.ceilings {
            self.measure_ceilings(rec, events)?
        } else {
            BTreeMap::new()
        };
        for info in &usable {
            if self.cancel.load(Ordering::SeqCst) {
                return Err(FsError::Interrupted);
            }
            events(Event::Step(&describe(info)));
            match self.measure_path(info, &ceilings, rec, events) {
                Ok(()) => out.measured.push(info.path.clone()),
                Err(FsError::Interrupted) => return Err(FsError::Interrupted),
                Err(e @ FsError::Record(_)) => return Err(e),
                Err(e) => fail(rec, events, &mut out, &info.path, e)?,
            }
        }
        events(Event::Done);
        Ok(out)
    }

    /// memcpy bandwidth at the record size for every thread count (median of 7 batches of
    /// 30 ms), pushed as `mem`/`memcpy` figures and returned by thread count.
    fn measure_ceilings(
        &self,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<BTreeMap<usize, f64>, FsError> {
        let mut map = BTreeMap::new();
        let size = self.record();
        for &n in &self.threads {
            let samples = mem::memcpy_threads_gbps(size, n, 7, Duration::from_millis(30))
                .map_err(|e| FsError::io("measuring the memcpy ceiling".into(), e))?;
            let Some(fig) = Figure::new("mem", "memcpy", Unit::GBps, samples) else {
                continue;
            };
            let fig = fig
                .param("size", size as u64)
                .param("threads", n)
                .method("accio::copy_bytes between page-aligned pre-faulted buffers, one pair per thread; ceiling for bench fs");
            map.insert(n, fig.summary.median);
            emit::figure(rec, events, fig).map_err(FsError::Record)?;
        }
        Ok(map)
    }

    /// Measures every thread count on one path; removes the test directory afterwards.
    fn measure_path(
        &self,
        info: &FsInfo,
        ceilings: &BTreeMap<usize, f64>,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), FsError> {
        if info.memory_backed()
            && self
                .modes
                .iter()
                .any(|m| matches!(m, Mode::Write | Mode::WriteSync))
        {
            caution(
                rec,
                events,
                format!(
                    "fs {}: write and write+sync go to fresh {} pages; on VMs that return freed \
                     memory to the host the first touch of a page is slow (0.3-1.5 GB/s on our \
                     CI machine), so these figures can swing several-fold between runs; add \
                     'overwrite' to --modes for the same files with their pages present",
                    info.path.display(),
                    info.fs_type
                ),
            )?;
        }
        let work = WorkDir::create(&info.path)?;
        let mut hz = Hazards::default();
        for &n in &self.threads {
            let h = self.measure_threads(info, &work, n, ceilings, rec, events)?;
            hz.noisy.extend(h.noisy);
            hz.above.extend(h.above);
            work.remove_files()?;
        }
        work.remove()?;
        let p = info.path.display();
        let items = |v: &[(String, String)]| -> (String, Vec<String>) {
            let text: Vec<&str> = v.iter().map(|(t, _)| t.as_str()).collect();
            (text.join(", "), v.iter().map(|(_, k)| k.clone()).collect())
        };
        if !hz.noisy.is_empty() {
            let (list, figures) = items(&hz.noisy);
            let w = format!(
                "fs {p}: noisy figures (min-max spread over {:.0}% of the median): {list}; use \
                 more --repeats, larger --file-size or a quieter machine",
                NOISY * 100.0,
            );
            let h = Hazard {
                figures,
                ..Hazard::new(HazardKind::Noisy, "fs", w)
            };
            emit::hazard(rec, events, h).map_err(FsError::Record)?;
        }
        if !hz.above.is_empty() {
            let (list, figures) = items(&hz.above);
            let w = format!(
                "fs {p}: above the memcpy ceiling: {list}; the ceiling (a short in-cache copy) \
                 was measured low on a busy machine, or the file system avoided a copy",
            );
            let h = Hazard {
                figures,
                ..Hazard::new(HazardKind::AboveCeiling, "fs", w)
            };
            emit::hazard(rec, events, h).map_err(FsError::Record)?;
        }
        Ok(())
    }

    /// All repeats of all modes with `n` threads on one path; returns the hazards seen.
    fn measure_threads(
        &self,
        info: &FsInfo,
        work: &WorkDir,
        n: usize,
        ceilings: &BTreeMap<usize, f64>,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Hazards, FsError> {
        let mut hazards = Hazards::default();
        let files: Vec<PathBuf> = (0..n).map(|i| work.dir.join(format!("t{i}"))).collect();
        let workers = files
            .iter()
            .map(|f| {
                Worker::new(
                    f.clone(),
                    self.file_size,
                    self.record(),
                    self.engine,
                    self.iodepth,
                    self.cancel,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ctl = Control {
            barrier: Barrier::new(n + 1),
            phase: Mutex::new(Phase::Exit),
            results: Mutex::new((0..n).map(|_| None).collect()),
            direct: self.direct,
        };
        let mut samples: BTreeMap<Mode, Vec<f64>> = BTreeMap::new();
        let mut drop_methods: Vec<String> = Vec::new();
        let mut resident_max: Option<f64> = None;
        std::thread::scope(|s| -> Result<(), FsError> {
            for (i, w) in workers.into_iter().enumerate() {
                let ctl = &ctl;
                s.spawn(move || worker_loop(ctl, i, w));
            }
            // Sends Exit to the workers however this closure ends.
            let crew = Crew { ctl: &ctl };
            let mut have_files = false;
            for r in 0..self.repeats {
                let mut line = Vec::new();
                let mut cold_was_direct = false;
                for &mode in &self.modes {
                    if self.cancel.load(Ordering::SeqCst) {
                        return Err(FsError::Interrupted);
                    }
                    if !have_files
                        && matches!(mode, Mode::ColdRead | Mode::ReRead | Mode::Overwrite)
                    {
                        // These modes need the files: lay them out, untimed.
                        crew.step(Phase::Write {
                            fresh: true,
                            sync: true,
                        })?;
                    }
                    let phase = match mode {
                        Mode::Write => Phase::Write {
                            fresh: true,
                            sync: false,
                        },
                        Mode::WriteSync => Phase::Write {
                            fresh: true,
                            sync: true,
                        },
                        Mode::Overwrite => Phase::Write {
                            fresh: false,
                            sync: false,
                        },
                        Mode::ColdRead | Mode::ReRead => {
                            if mode == Mode::ColdRead {
                                let d = cache::drop_cache(
                                    info,
                                    &work.dir,
                                    &files,
                                    self.file_size,
                                    self.cache_drop,
                                    self.direct,
                                )?;
                                if let Some(x) = d.resident {
                                    resident_max = Some(resident_max.unwrap_or(0.0).max(x));
                                }
                                if !drop_methods.contains(&d.method) {
                                    drop_methods.push(d.method);
                                }
                                cold_was_direct = d.direct && !self.direct;
                                Phase::Read { direct: d.direct }
                            } else {
                                if cold_was_direct {
                                    // The cold read bypassed the cache: warm it, untimed.
                                    crew.step(Phase::Read { direct: false })?;
                                }
                                Phase::Read { direct: false }
                            }
                        }
                    };
                    let spans = crew.step(phase)?;
                    have_files = true;
                    let moved: u64 = spans.iter().map(|s| s.bytes).sum();
                    if moved != n as u64 * self.file_size {
                        return Err(FsError::io(
                            format!("{} in {}", mode.name(), work.dir.display()),
                            std::io::Error::other(format!(
                                "moved {moved} bytes, expected {}",
                                n as u64 * self.file_size
                            )),
                        ));
                    }
                    if let Some(g) = aggregate_gbps(&spans) {
                        samples.entry(mode).or_default().push(g);
                        line.push(format!("{} {}", mode.label(), fmt3(g)));
                    }
                }
                events(Event::Step(&format!(
                    "fs {}: {n} thread(s), repeat {}/{}: {} GB/s",
                    info.path.display(),
                    r + 1,
                    self.repeats,
                    line.join(", ")
                )));
                events(Event::Advanced(n as u64));
            }
            Ok(())
        })?;
        for mode in &self.modes {
            let Some(s) = samples.remove(mode) else {
                continue;
            };
            let method = match mode {
                Mode::ColdRead => drop_methods.join(" | "),
                m => self.method_of(*m, info),
            };
            let Some(mut fig) = self.figure(*mode, info, n, s) else {
                continue;
            };
            fig = fig.method(method);
            if *mode == Mode::ColdRead {
                if let Some(x) = resident_max {
                    fig = fig.param("resident_after_drop", x);
                }
            }
            let ceiling = ceilings.get(&n).copied();
            if let Some(c) = ceiling.filter(|_| self.has_memcpy_ceiling(*mode, info)) {
                fig = fig.ceiling(
                    format!(
                        "memcpy {}, {n} thread{}",
                        format_size(self.record() as u64),
                        if n == 1 { "" } else { "s" }
                    ),
                    c,
                    CeilingSource::Measured,
                );
            }
            let what = format!("{} x{n}", mode.label());
            if fig.summary.spread() > NOISY {
                hazards.noisy.push((
                    format!("{what} {:.0}%", fig.summary.spread() * 100.0),
                    fig.key(),
                ));
            }
            if let Some(r) = fig.ceiling.as_ref().and_then(|c| c.ratio) {
                if r > 1.05 {
                    hazards
                        .above
                        .push((format!("{what} {:.0}%", r * 100.0), fig.key()));
                }
            }
            emit::figure(rec, events, fig).map_err(FsError::Record)?;
        }
        Ok(hazards)
    }

    /// Whether memcpy bounds `mode` on `info`: always on memory-backed file systems (every
    /// mode is a copy between user buffers and RAM pages), and for the page-cache modes
    /// elsewhere. write+sync and cold read on a device or network are bounded by that
    /// device or network, which this bench does not measure, so they get no ceiling.
    fn has_memcpy_ceiling(&self, mode: Mode, info: &FsInfo) -> bool {
        info.memory_backed()
            || (!self.direct && matches!(mode, Mode::Write | Mode::Overwrite | Mode::ReRead))
    }

    fn method_of(&self, mode: Mode, info: &FsInfo) -> String {
        let rec = format_size(self.record() as u64);
        let call = if matches!(mode, Mode::ColdRead | Mode::ReRead) {
            "pread"
        } else {
            "pwrite"
        };
        let engine = match self.engine {
            Engine::Psync => format!("{call} of {rec} records (psync)"),
            Engine::IoUring => format!(
                "io_uring {call}s, {} x {rec} records in flight",
                self.iodepth
            ),
        };
        let direct = if self.direct { ", O_DIRECT" } else { "" };
        match mode {
            Mode::Write => {
                format!("{engine}{direct} into new files (old ones unlinked, untimed); close timed, no fsync")
            }
            Mode::WriteSync => {
                format!("{engine}{direct} into new files (old ones unlinked, untimed); fsync and close timed")
            }
            Mode::Overwrite => {
                format!(
                    "{engine}{direct} over existing files (pages present); close timed, no fsync"
                )
            }
            Mode::ReRead if self.direct => {
                format!("{engine}, O_DIRECT: not cached, same path as the cold read")
            }
            Mode::ReRead if info.memory_backed() => format!("{engine}; memory-backed"),
            Mode::ReRead => format!("{engine}; pages cached by the previous read"),
            Mode::ColdRead => String::new(),
        }
    }

    /// A figure with every identifying parameter and the path's properties.
    fn figure(&self, mode: Mode, info: &FsInfo, n: usize, samples: Vec<f64>) -> Option<Figure> {
        let opt_str = |s: Option<String>| s.map_or(Value::Null, Value::from);
        let mut f = Figure::new("fs", mode.name(), Unit::GBps, samples)?
            .param("path", info.path.display().to_string())
            .param("threads", n)
            .param("file_size", self.file_size)
            .param("record_size", self.record() as u64)
            .param("bytes", n as u64 * self.file_size)
            .param("engine", self.engine.name())
            .param("direct", self.direct)
            .param("fs_type", info.fs_type.clone())
            .param("backing", info.backing.name())
            .param("memory_backed", info.memory_backed())
            .param("persistent", info.backing.persistent())
            .param("shared", info.backing.shared())
            .param("root_to_mount", info.root_to_mount())
            .param(
                "mount_point",
                opt_str(info.mount_point.as_ref().map(|p| p.display().to_string())),
            )
            .param("mount_source", opt_str(info.mount_source.clone()))
            .param("mount_options", opt_str(info.mount_options.clone()))
            .param("capacity_bytes", info.capacity)
            .param("free_bytes", info.free);
        if self.engine == Engine::IoUring {
            f = f.param("iodepth", self.iodepth);
        }
        Some(f)
    }
}

/// One line describing a path, for progress output.
fn describe(info: &FsInfo) -> String {
    let space = match (info.capacity, info.free) {
        (Some(c), Some(f)) => format!(
            "{} ({} free)",
            accio_results::size::human_bytes(c),
            accio_results::size::human_bytes(f)
        ),
        _ => "no size limit (RAM)".into(),
    };
    format!(
        "fs {}: {} ({}-backed), {space}, mounted at {} from {} ({})",
        info.path.display(),
        info.fs_type,
        info.backing.name(),
        info.mount_point
            .as_deref()
            .map_or("?".into(), |p| p.display().to_string()),
        info.mount_source.as_deref().unwrap_or("?"),
        info.mount_options.as_deref().unwrap_or("?"),
    )
}

fn caution(
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    w: String,
) -> Result<(), FsError> {
    emit::hazard(rec, events, Hazard::new(HazardKind::Caution, "fs", w)).map_err(FsError::Record)
}

fn fail(
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    out: &mut FsOutcome,
    path: &Path,
    error: FsError,
) -> Result<(), FsError> {
    let failure = PathFailure {
        path: path.to_path_buf(),
        error,
    };
    events(Event::Skipped(&failure.to_string()));
    let h = Hazard::new(
        HazardKind::NotMeasured,
        "fs",
        format!("fs: not measured: {failure}"),
    );
    rec.hazard(h).map_err(FsError::Record)?;
    out.failures.push(failure);
    Ok(())
}

/// The directory holding one run's test files; removed on drop (early return, error,
/// panic, Ctrl-C), and explicitly at the end so removal errors are reported.
struct WorkDir {
    dir: PathBuf,
}

impl WorkDir {
    fn create(parent: &Path) -> Result<WorkDir, FsError> {
        let dir = parent.join(format!("accio-bench-fs.{}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => Ok(WorkDir { dir }),
            Err(e) => Err(FsError::BadPath {
                path: parent.to_path_buf(),
                reason: format!("cannot create the test directory {}: {e}", dir.display()),
            }),
        }
    }

    fn remove_files(&self) -> Result<(), FsError> {
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| FsError::io(format!("listing {}", self.dir.display()), e))?;
        for e in entries.flatten() {
            std::fs::remove_file(e.path())
                .map_err(|err| FsError::io(format!("removing {}", e.path().display()), err))?;
        }
        Ok(())
    }

    fn remove(self) -> Result<(), FsError> {
        let r = std::fs::remove_dir_all(&self.dir)
            .map_err(|e| FsError::io(format!("removing {}", self.dir.display()), e));
        std::mem::forget(self);
        r
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        // Best effort: the error path that got us here is what the caller reports.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// State shared between the coordinating thread and the workers.
struct Control {
    barrier: Barrier,
    phase: Mutex<Phase>,
    results: Mutex<Vec<Option<Result<Span, FsError>>>>,
    direct: bool,
}

/// Three barriers per step: the phase is published (workers open their files, untimed),
/// everyone is ready (the clock starts in every worker), everyone is done.
fn worker_loop(ctl: &Control, i: usize, mut w: Worker) {
    loop {
        ctl.barrier.wait();
        let phase = *ctl.phase.lock().expect("phase lock");
        if phase == Phase::Exit {
            return;
        }
        let opened = w.open(phase, ctl.direct);
        ctl.barrier.wait();
        let r = opened.and_then(|f| w.run(f, phase));
        ctl.results.lock().expect("results lock")[i] = Some(r);
        ctl.barrier.wait();
    }
}

/// The coordinator's handle on the workers; tells them to exit when dropped.
struct Crew<'a> {
    ctl: &'a Control,
}

impl Crew<'_> {
    /// Runs one phase on every worker; the spans, or the most telling error.
    fn step(&self, phase: Phase) -> Result<Vec<Span>, FsError> {
        *self.ctl.phase.lock().expect("phase lock") = phase;
        self.ctl.barrier.wait();
        self.ctl.barrier.wait();
        self.ctl.barrier.wait();
        let results: Vec<_> = self
            .ctl
            .results
            .lock()
            .expect("results lock")
            .iter_mut()
            .map(|r| r.take().expect("every worker reported"))
            .collect();
        let mut spans = Vec::with_capacity(results.len());
        let mut error = None;
        for r in results {
            match r {
                Ok(s) => spans.push(s),
                // A real failure says more than the Interrupted of its siblings.
                Err(e) => {
                    if error.is_none() || matches!(error, Some(FsError::Interrupted)) {
                        error = Some(e);
                    }
                }
            }
        }
        error.map_or(Ok(spans), Err)
    }
}

impl Drop for Crew<'_> {
    fn drop(&mut self) {
        *self.ctl.phase.lock().unwrap_or_else(|p| p.into_inner()) = Phase::Exit;
        self.ctl.barrier.wait();
    }
}
