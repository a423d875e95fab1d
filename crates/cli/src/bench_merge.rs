//! `accio bench merge`: many producers into one file through the merging file service,
//! each figure beside the target file system's single-stream write ceiling and the naive
//! alternative, measured in the same run. Producer processes are this executable, started
//! with the hidden `__merge-producer` subcommand.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Context as _;

use accio_bench::merge::{self, MergeBench, Placement, ProducerCommand, ProducerConfig};
use accio_results::event::Event;
use accio_results::model::Recorder;

use crate::common::{self, CommonArgs};

/// The hidden subcommand that runs one producer (declared in `main.rs`).
const PRODUCER_SUBCOMMAND: &str = "__merge-producer";

/// Arguments of `accio bench merge`.
#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Directories to write the merged file in [default: /dev/shm and the temporary
    /// directory, i.e. one memory-backed and one disk file system].
    #[arg(value_name = "DIR")]
    targets: Vec<PathBuf>,
    /// Producer counts to sweep, comma-separated [default: 1,4,16,60,256; --quick 1,16].
    #[arg(long, value_delimiter = ',', value_name = "P")]
    producers: Option<Vec<usize>>,
    /// Buffers per producer [default: as many as make a run move about 1 GiB].
    #[arg(long, value_name = "F")]
    buffers: Option<u64>,
    /// Where producers run, comma-separated: threads, processes [default: both].
    #[arg(long, value_delimiter = ',', value_parser = parse_placement)]
    placement: Option<Vec<Placement>>,
    /// The reference workload of the merging file service (the parallel merge server
    /// it follows: 60 workers of a coprocessor): 60 producers x 100 buffers x 2 MiB (12 GiB
    /// per run).
    #[arg(long)]
    seed: bool,
    /// The merger's memory budget in bytes (suffixes allowed) [default: 256M].
    #[arg(long, value_parser = parse_size)]
    budget: Option<u64>,
    /// Samples per figure [default: 3; --quick 1].
    #[arg(long = "reps", aliases = ["repetitions", "repeats", "samples"], value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    repetitions: Option<u32>,
    /// Do not sync the file at close on persistent file systems.
    #[arg(long)]
    no_sync: bool,
    /// Do not measure the naive alternative (one file per producer, then concatenated).
    #[arg(long)]
    no_naive: bool,
    /// CPU priority (nice, 0-19) of the producers [default: 0, the merger's]. With more
    /// producers than cores the merger thread gets one CPU share among P + 1; 19 models
    /// producers that never take the merger's CPU (as workers on a coprocessor never did).
    #[arg(long, value_name = "NICE", value_parser = clap::value_parser!(i32).range(0..=19))]
    producer_nice: Option<i32>,
    /// How block bytes reach the file, comma-separated: direct (producers write in place,
    /// one copy), copy (through the merger's slots), auto [default: direct,copy: both, side
    /// by side; tcp measures copy only]. Each figure says which it used (`write_mode`).
    #[arg(long, value_delimiter = ',', value_name = "MODE")]
    write_mode: Option<Vec<merge::service::WriteMode>>,
    /// Backends producers reach the merger over, comma-separated (known: shm, tcp) [default: all].
    #[arg(long, value_delimiter = ',', value_parser = common::parse_backend)]
    backend: Option<Vec<String>>,
    /// Buffer sizes S (bytes per block a producer hands over), comma-separated, binary suffixes; one sweep each [default: 2M].
    #[arg(long, value_parser = common::parse_size_list)]
    sizes: Option<common::SizeList>,
    /// Fewer sizes and repetitions: a rough picture in a fraction of the time.
    #[arg(long)]
    quick: bool,
    /// Where the producers' blocks live: host, or device[:N] (GPU N's memory, written with
    /// Producer::write_device by threads and processes alike; each merged file is
    /// verified, block by block) [default: host].
    #[arg(long, value_parser = parse_source, value_name = "MEMORY")]
    source: Option<Source>,
    /// Keep the last merged file at FILE (for accio verify) instead of removing it.
    #[arg(long, value_name = "FILE")]
    keep: Option<PathBuf>,
    #[command(flatten)]
    flags: common::BenchFlags,
    /// What the bench runs with: the flags above and those given before the subcommand
    /// (see [`Self::resolve`]).
    #[arg(skip)]
    pub(crate) common: CommonArgs,
}

impl MergeArgs {
    /// Fills [`Self::common`] from this subcommand's flags and those given before it
    /// (`accio bench --quick SUBCOMMAND`).
    pub(crate) fn resolve(&mut self, parent: &CommonArgs) {
        self.common =
            self.flags
                .common(self.backend.clone(), self.sizes.clone(), self.quick, parent);
    }
}

fn parse_placement(s: &str) -> Result<Placement, String> {
    match s {
        "threads" => Ok(Placement::Threads),
        "processes" => Ok(Placement::Processes),
        _ => Err(format!(
            "unknown placement {s:?} (known: threads, processes)"
        )),
    }
}

/// Where producers' blocks live (`--source`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Host memory.
    Host,
    /// GPU N's memory.
    Device(u32),
}

fn parse_source(s: &str) -> Result<Source, String> {
    match s {
        "host" => Ok(Source::Host),
        "device" | "gpu" => Ok(Source::Device(0)),
        _ => s
            .strip_prefix("device:")
            .or_else(|| s.strip_prefix("gpu:"))
            .and_then(|n| n.parse().ok())
            .map(Source::Device)
            .ok_or_else(|| format!("unknown source {s:?} (known: host, device, device:N)")),
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    accio_results::size::parse_size(s)
}

impl MergeArgs {
    /// The variant run by plain `accio bench`: the quick one (about 6 s on a 2-core VM),
    /// or the full sweep under `accio bench --full`.
    pub fn default_suite(common: &CommonArgs) -> MergeArgs {
        MergeArgs {
            // The suite sets `common` itself; the flags as parsed stay empty.
            backend: None,
            sizes: None,
            quick: false,
            flags: Default::default(),
            common: CommonArgs {
                quick: !common.full,
                ..common.clone()
            },
            targets: Vec::new(),
            producers: None,
            buffers: None,
            placement: None,
            seed: false,
            budget: None,
            repetitions: None,
            no_sync: false,
            no_naive: false,
            producer_nice: None,
            write_mode: None,
            source: None,
            keep: None,
        }
    }

    fn targets(&self) -> Vec<PathBuf> {
        if !self.targets.is_empty() {
            return self.targets.clone();
        }
        let mut t = Vec::new();
        if std::path::Path::new("/dev/shm").is_dir() {
            t.push(PathBuf::from("/dev/shm"));
        }
        t.push(std::env::temp_dir());
        t
    }

    /// The bench these arguments stand for, with buffers of `size` bytes.
    fn bench(&self, size: Option<u64>, command: ProducerCommand) -> MergeBench {
        let targets = self.targets();
        let mut b = if self.seed {
            MergeBench::seed(targets)
        } else if self.common.quick {
            MergeBench::quick(targets)
        } else {
            MergeBench::new(targets)
        };
        b = b.producer_command(command);
        if let Some(s) = size {
            b = b.buffer_bytes(s as usize);
        }
        if let Some(p) = &self.producers {
            b = b.producers(p);
        }
        if self.buffers.is_some() {
            b = b.buffers(self.buffers);
        }
        if let Some(p) = &self.placement {
            b = b.placements(p);
        }
        if let Some(be) = &self.common.backend {
            b = b.backends(be);
        }
        if let Some(bud) = self.budget {
            b = b.budget(bud as usize);
        }
        if let Some(r) = self.repetitions {
            b = b.repeats(r as usize);
        }
        if let Some(n) = self.producer_nice {
            b = b.producer_nice(n);
        }
        if let Some(m) = &self.write_mode {
            b = b.write_modes(m);
        }
        b = b.sync_persistent(!self.no_sync).naive(!self.no_naive);
        if let Some(Source::Device(gpu)) = self.source {
            b = b.device(Some(gpu));
        }
        b.keep(self.keep.clone())
    }
}

/// Arguments of the hidden producer process of the merge bench (written by
/// [`ProducerConfig::to_args`]).
#[derive(clap::Args, Debug)]
pub struct ProducerArgs {
    /// The merger's address.
    #[arg(long)]
    addr: String,
    /// Producer id.
    #[arg(long)]
    id: u32,
    /// Buffers to write.
    #[arg(long)]
    buffers: u64,
    /// Bytes per buffer.
    #[arg(long)]
    size: usize,
    /// CPU priority to run at.
    #[arg(long, default_value_t = 0)]
    nice: i32,
    /// Blocks from this GPU's memory.
    #[arg(long)]
    device: Option<u32>,
}

/// Runs the merge bench: progress on stderr, the table and checks on stdout, JSON to
/// `--json FILE`.
pub fn run(args: MergeArgs, rec: &mut Recorder) -> anyhow::Result<()> {
    let common = args.common.clone();
    let standalone = !common.stdout_taken();
    let r = run_with(
        args,
        rec,
        &mut |e| common::print_event("merge", e),
        standalone,
    );
    common::finish("merge", &common, rec, r)
}

/// Runs the merge bench with its events going to `events`; `standalone` also
/// prints the table and checks on stdout and the closing line on stderr (the default
/// suite prints its own summary instead).
pub(crate) fn run_with(
    args: MergeArgs,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    standalone: bool,
) -> anyhow::Result<()> {
    let program = std::env::current_exe()
        .context("finding the accio executable to start producer processes")?;
    let command = ProducerCommand {
        program,
        args: vec![OsString::from(PRODUCER_SUBCOMMAND)],
    };
    let sizes: Vec<Option<u64>> = match &args.common.sizes {
        Some(s) => s.0.iter().map(|&x| Some(x)).collect(),
        None => vec![None],
    };
    let mut result = Ok(());
    for size in sizes {
        let bench = args.bench(size, command.clone());
        if let Err(e) = bench.run(rec, events) {
            result = Err(e);
            break;
        }
    }
    if standalone {
        let table =
            accio_report::text::merge::render_table_fit(rec.report(), crate::term::stdout_width());
        if !table.is_empty() {
            print!("\n{table}");
            for line in merge::checks(rec.report()) {
                crate::term::print_para(&line, "  ");
            }
        }
        if let Some(p) = &args.common.flags.json {
            eprintln!("merge: results written to {}", p.display());
        }
    }
    result.context("accio bench merge")
}

/// Runs one producer process of the merge bench.
pub fn run_producer(args: ProducerArgs) -> anyhow::Result<()> {
    let cfg = ProducerConfig {
        addr: args.addr,
        id: args.id,
        buffers: args.buffers,
        size: args.size,
        nice: args.nice,
        device: args.device,
    };
    merge::producer_main(&cfg)
        .with_context(|| format!("merge producer {} connected to {}", cfg.id, cfg.addr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn flags_reach_the_bench() {
        let cli = crate::Cli::try_parse_from([
            "accio",
            "bench",
            "merge",
            "/dev/shm",
            "--producers",
            "1,60",
            "--placement",
            "processes",
            "--budget",
            "64M",
            "--producer-nice",
            "19",
            "--quick",
        ])
        .unwrap();
        let crate::Command::Bench(crate::BenchArgs {
            which: Some(crate::BenchCommand::Merge(mut a)),
            common,
        }) = cli.command
        else {
            panic!("not parsed as bench merge");
        };
        a.resolve(&common);
        assert_eq!(a.producers, Some(vec![1, 60]));
        assert_eq!(a.placement, Some(vec![Placement::Processes]));
        assert_eq!(a.budget, Some(64 << 20));
        assert_eq!(a.producer_nice, Some(19));
        assert!(a.common.quick);
        assert_eq!(a.targets(), vec![PathBuf::from("/dev/shm")]);
        let cfg = ProducerConfig {
            addr: "tcp://127.0.0.1:5".into(),
            id: 3,
            buffers: 7,
            size: 4096,
            nice: 19,
            device: Some(2),
        };
        let mut argv = vec!["accio".to_string(), PRODUCER_SUBCOMMAND.into()];
        argv.extend(cfg.to_args());
        let crate::Command::MergeProducer(p) = crate::Cli::try_parse_from(argv).unwrap().command
        else {
            panic!("not parsed as the producer");
        };
        assert_eq!(
            (p.addr.as_str(), p.id, p.buffers, p.size, p.nice, p.device),
            ("tcp://127.0.0.1:5", 3, 7, 4096, 19, Some(2))
        );
        for (arg, want) in [
            ("host", Source::Host),
            ("device", Source::Device(0)),
            ("device:3", Source::Device(3)),
        ] {
            assert_eq!(parse_source(arg), Ok(want));
        }
        assert!(parse_source("device:x").is_err() && parse_source("disk").is_err());
        assert!(
            crate::Cli::try_parse_from(["accio", "bench", "merge", "--producer-nice", "-1"])
                .is_err()
        );
    }
}
