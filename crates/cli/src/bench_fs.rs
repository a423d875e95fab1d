//! `accio bench fs` and `accio bench mem`.
//!
//! Thin: parse flags, build an [`FsBench`] / [`MemBench`], print progress lines on stderr,
//! tables on stdout, and turn unusable paths into a non-zero exit after the others were
//! measured. The methodology lives in `accio_bench::fs` and `accio_bench::mem`.

use std::path::PathBuf;

use accio_bench::fs::{self, CacheDrop, Engine, FsBench, Mode};
use accio_bench::mem::{self, MemBench};
use accio_results::event::Event;
use accio_results::model::Recorder;
use accio_results::size::parse_size;
use anyhow::Context;

use crate::common::{self, CommonArgs};

/// `--engine` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum EngineArg {
    /// One pwrite/pread per record (fio's psync).
    Psync,
    /// io_uring with --iodepth records in flight per thread.
    #[value(name = "io_uring", alias = "io-uring")]
    IoUring,
}

/// `--drop` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum DropArg {
    /// drop_caches when root, else posix_fadvise; O_DIRECT if pages stay cached.
    Auto,
    /// sync, then echo 3 > /proc/sys/vm/drop_caches (root).
    DropCaches,
    /// fsync + posix_fadvise(POSIX_FADV_DONTNEED) on each file.
    Fadvise,
    /// No drop: read with O_DIRECT.
    Direct,
}

/// Arguments of `accio bench fs`.
#[derive(clap::Args, Debug)]
pub struct FsArgs {
    /// Directories to measure, each on some file system. Test files go into a private
    /// directory PATH/accio-bench-fs-RANDOM/ (mode 0700) and are removed afterwards, also
    /// on errors and Ctrl-C.
    #[arg(value_name = "PATH", required = true)]
    paths: Vec<PathBuf>,
    /// Modes, comma-separated: write, write+sync, cold-read, re-read, and the opt-in
    /// overwrite (same files, pages present) [default: the first four].
    #[arg(long, value_delimiter = ',', value_parser = Mode::parse)]
    modes: Option<Vec<Mode>>,
    /// Thread counts, comma-separated; one file per thread [default: 1,2,4,... up to the
    /// number of CPUs; with --quick: 1 and the number of CPUs].
    #[arg(long, value_delimiter = ',')]
    threads: Option<Vec<usize>>,
    /// Bytes per file, i.e. per thread (K/M/G suffixes) [default: 128M; with --quick: 32M].
    #[arg(long, value_parser = parse_size)]
    file_size: Option<u64>,
    /// Bytes per read/write call [default: 4M, as in Colfax's IOzone runs].
    #[arg(long, value_parser = parse_size)]
    record_size: Option<u64>,
    /// Samples per figure; each figure quotes median, min and max [default: 3].
    #[arg(long = "reps", aliases = ["repetitions", "repeats", "samples"], value_name = "N")]
    repeats: Option<usize>,
    /// Open every file with O_DIRECT (bypasses the page cache in every mode).
    #[arg(long)]
    direct: bool,
    /// I/O engine.
    #[arg(long, value_enum, default_value_t = EngineArg::Psync)]
    engine: EngineArg,
    /// Records in flight per thread with --engine io_uring.
    #[arg(long, default_value_t = fs::DEFAULT_IODEPTH)]
    iodepth: usize,
    /// How to empty the page cache before cold reads (the method used is recorded).
    #[arg(long = "drop", value_enum, default_value_t = DropArg::Auto)]
    cache_drop: DropArg,
    /// Fewer sizes and repetitions: a rough picture in a fraction of the time.
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    flags: common::BenchFlags,
    /// What the bench runs with: the flags above and those given before the subcommand
    /// (see [`Self::resolve`]).
    #[arg(skip)]
    pub(crate) common: CommonArgs,
}

impl FsArgs {
    /// Fills [`Self::common`] from this subcommand's flags and those given before it
    /// (`accio bench --quick SUBCOMMAND`).
    pub(crate) fn resolve(&mut self, parent: &CommonArgs) {
        self.common = self.flags.common(None, None, self.quick, parent);
    }
}

impl FsArgs {
    /// The quick variant run by plain `accio bench`: the temporary directory and /dev/shm
    /// (the bench writes in a test directory of its own inside each, removed afterwards).
    pub fn default_suite(common: &CommonArgs) -> FsArgs {
        // The temporary directory itself: the bench makes (and removes) its own test
        // directory inside it, and the path stays the same from one run to the next, so
        // that `accio compare` matches the figures.
        let mut paths = vec![std::env::temp_dir()];
        let shm = PathBuf::from("/dev/shm");
        if shm.is_dir() {
            paths.push(shm);
        }
        FsArgs {
            // The suite sets `common` itself; the flags as parsed stay empty.
            quick: false,
            flags: Default::default(),
            paths,
            modes: None,
            threads: None,
            file_size: None,
            record_size: None,
            repeats: None,
            direct: false,
            engine: EngineArg::Psync,
            iodepth: fs::DEFAULT_IODEPTH,
            cache_drop: DropArg::Auto,
            common: CommonArgs {
                quick: true,
                ..common.clone()
            },
        }
    }

    /// Bytes per file (what `--file-size` sets); used by the default suite's presets.
    pub(crate) fn set_file_size(&mut self, bytes: u64) {
        self.file_size = Some(bytes);
    }

    /// `--threads`, or the default for the preset.
    fn thread_counts(&self) -> Vec<usize> {
        let quick = self.common.quick;
        self.threads.clone().unwrap_or_else(|| {
            let all = mem::default_threads();
            if quick {
                let mut q = vec![1, *all.last().expect("at least one")];
                q.dedup();
                q
            } else {
                all
            }
        })
    }

    fn bench(&self) -> FsBench {
        let quick = self.common.quick;
        let threads = self.thread_counts();
        FsBench::new(&self.paths)
            .modes(self.modes.as_deref().unwrap_or(&Mode::DEFAULT))
            .threads(&threads)
            .file_size(self.file_size.unwrap_or(if quick {
                32 << 20
            } else {
                fs::DEFAULT_FILE_SIZE
            }))
            .record_size(
                self.record_size
                    .map_or(fs::DEFAULT_RECORD_SIZE, |r| r as usize),
            )
            .repeats(self.repeats.unwrap_or(fs::DEFAULT_REPEATS))
            .direct(self.direct)
            .engine(match self.engine {
                EngineArg::Psync => Engine::Psync,
                EngineArg::IoUring => Engine::IoUring,
            })
            .iodepth(self.iodepth)
            .cache_drop(match self.cache_drop {
                DropArg::Auto => CacheDrop::Auto,
                DropArg::DropCaches => CacheDrop::DropCaches,
                DropArg::Fadvise => CacheDrop::Fadvise,
                DropArg::Direct => CacheDrop::Direct,
            })
    }
}

/// Arguments of `accio bench mem`.
#[derive(clap::Args, Debug)]
pub struct MemArgs {
    /// Thread counts, comma-separated; each thread copies between its own buffers
    /// [default: 1,2,4,... up to the number of CPUs].
    #[arg(long, value_delimiter = ',')]
    threads: Option<Vec<usize>>,
    /// Samples per figure [default: 5; with --quick: 3].
    #[arg(long = "reps", aliases = ["repetitions", "repeats", "samples"], value_name = "N")]
    samples: Option<usize>,
    /// Buffer sizes, comma-separated, binary suffixes [default: 64K to 256M in x4 steps; with --quick: 64K,1M,16M,256M].
    #[arg(long, value_parser = common::parse_size_list)]
    sizes: Option<common::SizeList>,
    /// Fewer sizes and repetitions: a rough picture in a fraction of the time.
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    flags: common::BenchFlags,
    /// What the bench runs with: the flags above and those given before the subcommand
    /// (see [`Self::resolve`]).
    #[arg(skip)]
    pub(crate) common: CommonArgs,
}

impl MemArgs {
    /// Fills [`Self::common`] from this subcommand's flags and those given before it
    /// (`accio bench --quick SUBCOMMAND`).
    pub(crate) fn resolve(&mut self, parent: &CommonArgs) {
        self.common = self
            .flags
            .common(None, self.sizes.clone(), self.quick, parent);
    }
}

impl MemArgs {
    /// The quick variant run by plain `accio bench`.
    pub fn default_suite(common: &CommonArgs) -> MemArgs {
        MemArgs {
            // The suite sets `common` itself; the flags as parsed stay empty.
            sizes: None,
            quick: false,
            flags: Default::default(),
            threads: None,
            samples: None,
            common: CommonArgs {
                quick: true,
                ..common.clone()
            },
        }
    }
}

/// Runs the file-system bench.
pub fn run_fs(args: FsArgs, rec: &mut Recorder) -> anyhow::Result<()> {
    let common = args.common.clone();
    let tables = !common.stdout_taken();
    let r = run_fs_with(args, rec, &mut |e| common::print_event("fs", e), tables);
    common::finish("fs", &common, rec, r)
}

/// Runs the file-system bench with its events going to `events` and, with `tables`, its
/// tables printed on stdout. Ctrl-C ends it with [`FsError::Interrupted`] (test files
/// removed) instead of exiting, so that the default suite can still write its report.
pub(crate) fn run_fs_with(
    args: FsArgs,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    tables: bool,
) -> anyhow::Result<()> {
    if args.common.sizes.is_some() {
        events(Event::Note(
            "bench fs ignores --sizes; use --record-size and --file-size",
        ));
    }
    if args.common.backend.is_some() {
        events(Event::Note("bench fs ignores --backend"));
    }
    let bench = args.bench();
    let result = bench.run(rec, events);
    // Tables of whatever was measured, also after an interruption or a failed path.
    let report = rec.report();
    let paths = accio_report::text::fs::fs_paths(report);
    if tables {
        let width = crate::term::stdout_width();
        for p in &paths {
            println!(
                "{}",
                accio_report::text::fs::path_table_fit(report, p, width)
            );
        }
        if !paths.is_empty() {
            println!("Summary (after Colfax 2014, Table 1)");
            println!(
                "{}",
                accio_report::text::fs::summary_table_fit(report, width)
            );
        }
    }
    match result {
        Err(e) => Err(e.into()),
        Ok(out) if out.failures.is_empty() => Ok(()),
        Ok(out) => {
            anyhow::bail!(
                "{} of {} path(s) could not be measured (see above)",
                out.failures.len(),
                args.paths.len()
            )
        }
    }
}

/// Runs the memory bench.
pub fn run_mem(args: MemArgs, rec: &mut Recorder) -> anyhow::Result<()> {
    let common = args.common.clone();
    let tables = !common.stdout_taken();
    let r = run_mem_with(args, rec, &mut |e| common::print_event("mem", e), tables);
    common::finish("mem", &common, rec, r)
}

/// Runs the memory bench with its events going to `events` and, with `tables`, its table
/// printed on stdout.
pub(crate) fn run_mem_with(
    args: MemArgs,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    tables: bool,
) -> anyhow::Result<()> {
    let mut bench = if args.common.quick {
        MemBench::quick()
    } else {
        MemBench::new()
    };
    if let Some(t) = &args.threads {
        anyhow::ensure!(
            t.iter().all(|&n| n > 0),
            "--threads: thread counts must be at least 1"
        );
        bench = bench.threads(t);
    }
    if let Some(s) = &args.common.sizes {
        bench = bench.sizes(&s.0);
    }
    if let Some(n) = args.samples {
        bench = bench.samples(n);
    }
    if args.common.backend.is_some() {
        events(Event::Note("bench mem ignores --backend"));
    }
    bench
        .run(rec, events)
        .context("measuring memcpy bandwidth")?;
    if tables {
        println!(
            "{}",
            accio_report::text::mem::mem_table_fit(rec.report(), crate::term::stdout_width())
        );
    }
    Ok(())
}
