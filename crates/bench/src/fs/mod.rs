//! File-system bench: write, write+sync, cold read and re-read of one file per thread, on
//! any number of directories in one run, after Colfax's IOzone methodology (Vladimirov,
//! Karpusenko, Yoo, *File I/O on Intel Xeon Phi Coprocessors: RAM disks, VirtIO, NFS and
//! Lustre*, 2014: §2.3–2.5 and Table 1).
//!
//! # Modes
//!
//! Each repeat runs the selected modes in this order, each thread on its own file
//! (`PATH/accio-bench-fs-RANDOM/tI`, a private directory: `crate::scratch`), in records of `record_size` bytes (Colfax: 4 MB):
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
mod crew;
mod io;
mod run;
mod workdir;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use crate::mem;
use accio_results::node::probe;

pub use accio_results::metric::fs::Mode;
pub use accio_results::node::probe::{Backing, FsInfo};
pub use cache::MAX_RESIDENT;
pub use io::{aggregate_gbps, Span};

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
}
