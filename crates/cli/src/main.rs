//! The `accio` command: the only crate that uses `anyhow`; libraries return typed errors and
//! this binary adds context.

mod bench_coalesce;
mod bench_device;
mod bench_device_windows;
mod bench_fs;
mod bench_matrix;
mod bench_merge;
mod bench_transport;
mod common;
mod cpus;
mod demo_laplace;
mod files;
mod report_cmd;
mod suite;
mod term;
mod world_cmd;

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

/// accio: concurrent, high-throughput data movement on accelerator and HPC nodes.
#[derive(Parser, Debug)]
#[command(name = "accio", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum Command {
    /// Measure this node's data paths: memory, file systems, transports.
    ///
    /// Without a subcommand, runs a quick version of every bench on built-in defaults
    /// (a temporary directory, /dev/shm, loopback).
    Bench(BenchArgs),
    /// What this node is: CPU, memory, NUMA, file systems, PCIe links and their
    /// theoretical bandwidth, GPUs.
    Info(report_cmd::InfoArgs),
    /// Re-render a results file (JSON) as Markdown and HTML.
    Report(report_cmd::ReportArgs),
    /// Two results files side by side: per-figure ratios, changes beyond the noise flagged.
    Compare(report_cmd::CompareArgs),
    /// Summarize an accio container file: producers, blocks, bytes.
    Inspect(files::InspectArgs),
    /// Check an accio container file's checksums and sequences (exit code 0 if whole).
    Verify(files::VerifyArgs),
    /// Rewrite a crashed accio container file with an index.
    Recover(files::RecoverArgs),
    /// Workloads built on accio, timed by phase: `accio demo laplace`.
    Demo(DemoArgs),
    /// Start N local ranks of one world (without MPI): `accio run -n 4 PROGRAM [ARGS]`.
    Run(world_cmd::RunArgs),
    /// For `accio run` (or mpirun): connect every pair of ranks over every backend that
    /// can serve it and print the choice of the transport rule with its reason.
    WorldCheck(world_cmd::CheckArgs),
    /// Internal: the peer process of `accio bench transport` (not for direct use).
    #[command(hide = true, name = "__transport-peer")]
    TransportPeer(bench_transport::PeerArgs),
    /// Internal: a producer process of `accio bench merge` (not for direct use).
    #[command(hide = true, name = "__merge-producer")]
    MergeProducer(bench_merge::ProducerArgs),
    /// Internal: the peer process of `accio bench device`'s IPC figures (not for direct use).
    #[command(hide = true, name = "__device-ipc-peer")]
    DeviceIpcPeer(bench_device::IpcPeerArgs),
    /// Internal: the peer process of `accio bench device`'s window figures.
    #[command(hide = true, name = "__device-window-peer")]
    DeviceWindowPeer(bench_device_windows::WindowPeerArgs),
}

#[derive(clap::Args, Debug)]
struct DemoArgs {
    #[command(subcommand)]
    which: DemoCommand,
}

#[derive(Subcommand, Debug)]
enum DemoCommand {
    /// A distributed Jacobi/Laplacian (a streaming stencil on a 2D or 3D grid split across
    /// ranks): halo exchange over the rank world, with compute / synchronize / communicate
    /// time per iteration and rank. Starts `accio run
    /// -n RANKS` itself when not run inside a world.
    Laplace(demo_laplace::LaplaceArgs),
}

#[derive(clap::Args, Debug)]
struct BenchArgs {
    #[command(subcommand)]
    which: Option<BenchCommand>,
    #[command(flatten)]
    common: common::CommonArgs,
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Latency, bandwidth, RMA, connection and registration cost of each backend.
    Transport(bench_transport::TransportArgs),
    /// File-system write, write+sync, cold read and re-read on one or more directories.
    Fs(bench_fs::FsArgs),
    /// memcpy bandwidth by thread count and buffer size (the in-memory ceiling).
    Mem(bench_fs::MemArgs),
    /// Small-item rates with and without the coalescing layer (a communication cache that
    /// turns small items into large transfers).
    Coalesce(bench_coalesce::CoalesceArgs),
    /// Many producers into one file through the merging file service.
    Merge(bench_merge::MergeArgs),
    /// Latency and bandwidth between every ordered pair of ranks of a world, over every
    /// backend that can serve the pair, with the transport choice per pair explained. Run
    /// it as a world's program: `accio run -n 4 accio bench matrix` or under mpirun.
    Matrix(bench_matrix::MatrixArgs),
    /// GPU copies (NVIDIA nvbandwidth's copy-engine tests): host to device and back from
    /// pinned and pageable memory, both ways at once, device to device, small-copy latency,
    /// each beside the PCIe link's theoretical bandwidth. Needs a build with `--features
    /// cuda`; without a GPU it says so in one line and exits 0.
    Device(bench_device::DeviceArgs),
}

/// Exit status of a run ended by Ctrl-C (128 + SIGINT, as shells report it).
const INTERRUPTED: u8 = 130;

fn main() -> ExitCode {
    // `--help` within the terminal (see `term`), as every other line accio prints.
    let cli = Cli::command().term_width(term::help_width()).get_matches();
    let cli = match Cli::from_arg_matches(&cli) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    // Every bench stops at its next step on Ctrl-C, keeping what it measured and removing
    // its test files (see `accio_bench::cancel`); a second Ctrl-C kills at once.
    let _sigint = match &cli.command {
        Command::Bench(_) => match accio_bench::cancel::SigintGuard::install() {
            Ok(g) => Some(g),
            Err(e) => {
                eprintln!("error: installing the Ctrl-C handler: {e}");
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    let result = run(cli);
    if accio_bench::cancel::interrupted() {
        if let Err(e) = &result {
            term::eprint_para(&format!("error: {}", one_line(e)), "  ");
        }
        term::eprint_para(
            "accio: interrupted; the results hold what was measured, test files removed",
            "  ",
        );
        return ExitCode::from(INTERRUPTED);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line with the whole context chain; no backtrace for a user error even
            // when RUST_BACKTRACE is set.
            term::eprint_para(&format!("error: {}", one_line(&e)), "  ");
            if let Some(x) = e.downcast_ref::<common::ExitWith>() {
                // A usage error (2) or an inconclusive comparison (3): README, exit status.
                return ExitCode::from(x.status);
            }
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, `a: b: c`. A cause whose text its parent's message
/// already contains (library errors often print their source too) is not repeated.
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Runs `accio bench SUBCOMMAND`, with the flags given before the subcommand in `parent`.
fn run_bench(b: BenchCommand, parent: &common::CommonArgs) -> anyhow::Result<()> {
    match b {
        BenchCommand::Transport(mut a) => {
            a.resolve(parent);
            let mut rec = common::recorder(&a.common)?;
            bench_transport::run(a, &mut rec)
        }
        BenchCommand::Fs(mut a) => {
            a.resolve(parent);
            let mut rec = common::recorder(&a.common)?;
            bench_fs::run_fs(a, &mut rec)
        }
        BenchCommand::Mem(mut a) => {
            a.resolve(parent);
            let mut rec = common::recorder(&a.common)?;
            bench_fs::run_mem(a, &mut rec)
        }
        BenchCommand::Coalesce(mut a) => {
            a.resolve(parent);
            let mut rec = common::recorder(&a.common)?;
            bench_coalesce::run(a, &mut rec)
        }
        BenchCommand::Matrix(mut a) => {
            a.resolve(parent);
            // Every rank parses the same command line; only rank 0 writes the results
            // file (ranks writing and renaming one file at once lost the race).
            let mut rec = if common::launched_rank().unwrap_or(0) == 0 {
                common::recorder(&a.common)?
            } else {
                accio_results::model::Recorder::new(None)?
            };
            bench_matrix::run_cmd(a, &mut rec)
        }
        BenchCommand::Merge(mut a) => {
            a.resolve(parent);
            let mut rec = common::recorder(&a.common)?;
            bench_merge::run(a, &mut rec)
        }
        BenchCommand::Device(mut a) => {
            a.resolve(parent);
            let mut rec = common::recorder(&a.common)?;
            bench_device::run(a, &mut rec)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Bench(BenchArgs {
            which: Some(b),
            common: parent,
        }) => {
            // The report folder and the thorough preset are the suite's.
            if parent.out.is_some() || parent.full {
                return Err(common::ExitWith::usage(
                    "--out and --full are for plain `accio bench` (the suite); a bench on its \
                     own writes its figures with --json, --export-csv or --export-markdown",
                )
                .into());
            }
            run_bench(b, &parent)
        }
        Command::Bench(BenchArgs {
            which: None,
            common,
        }) => suite::run(common),
        Command::Info(a) => report_cmd::run_info(a),
        Command::Report(a) => report_cmd::run_report(a),
        Command::Compare(a) => report_cmd::run_compare(a),
        Command::Inspect(a) => files::run_inspect(a),
        Command::Verify(a) => files::run_verify(a),
        Command::Recover(a) => files::run_recover(a),
        Command::Demo(DemoArgs {
            which: DemoCommand::Laplace(a),
        }) => demo_laplace::run(a),
        Command::Run(a) => world_cmd::run(a),
        Command::WorldCheck(a) => world_cmd::check(a),
        Command::TransportPeer(a) => bench_transport::run_peer(a),
        Command::MergeProducer(a) => bench_merge::run_producer(a),
        Command::DeviceIpcPeer(a) => bench_device::run_ipc_peer(a),
        Command::DeviceWindowPeer(a) => bench_device_windows::run_peer(a),
    }
}

#[cfg(test)]
mod error_tests {
    use super::one_line;

    #[derive(Debug, thiserror::Error)]
    #[error("reading /x: {source}")]
    struct Embeds {
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(Embeds { source: io }).context("loading results");
        assert_eq!(one_line(&e), "loading results: reading /x: no such file");
    }
}

#[cfg(test)]
mod vocabulary_tests {
    use clap::{CommandFactory as _, Parser as _};

    /// The long flags `accio bench SUBCOMMAND --help` lists (hidden aliases left out).
    fn listed(sub: &str) -> Vec<String> {
        let mut cli = super::Cli::command();
        let bench = cli.find_subcommand_mut("bench").unwrap();
        let cmd = bench.find_subcommand_mut(sub).unwrap();
        cmd.get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long().map(str::to_string))
            .collect()
    }

    #[test]
    fn each_bench_lists_only_its_own_flags_and_counts_repetitions_with_reps() {
        for sub in [
            "transport",
            "fs",
            "mem",
            "coalesce",
            "merge",
            "matrix",
            "device",
        ] {
            let l = listed(sub);
            assert!(l.contains(&"reps".to_string()), "{sub}: {l:?}");
            for other in ["out", "full", "repetitions", "repeats", "samples"] {
                assert!(
                    !l.contains(&other.to_string()),
                    "{sub} lists --{other}: {l:?}"
                );
            }
        }
        for sub in ["fs", "mem", "matrix"] {
            assert!(!listed(sub).contains(&"backend".to_string()), "{sub}");
        }
        assert!(!listed("fs").contains(&"sizes".to_string()));
        assert!(listed("matrix").contains(&"backends".to_string()));
    }

    #[test]
    fn the_old_repetition_flags_and_matrix_backend_still_parse() {
        for (sub, old) in [
            ("transport", "--repetitions"),
            ("coalesce", "--repetitions"),
            ("merge", "--repetitions"),
            ("fs", "--repeats"),
            ("mem", "--samples"),
            ("matrix", "--samples"),
        ] {
            let mut argv = vec!["accio", "bench", sub, old, "2"];
            if sub == "fs" {
                argv.push("/tmp");
            }
            assert!(super::Cli::try_parse_from(&argv).is_ok(), "{argv:?}");
        }
        assert!(
            super::Cli::try_parse_from(["accio", "bench", "matrix", "--backend", "tcp"]).is_ok()
        );
        assert!(super::Cli::try_parse_from(["accio", "bench", "mem", "--backend", "tcp"]).is_err());
    }

    #[test]
    fn out_and_full_before_a_bench_are_usage_errors() {
        let cli = super::Cli::try_parse_from(["accio", "bench", "--out", "r", "mem"]).unwrap();
        let e = super::run(cli).unwrap_err();
        assert!(
            e.downcast_ref::<crate::common::ExitWith>()
                .is_some_and(|x| x.status == 2),
            "{e}"
        );
    }
}
