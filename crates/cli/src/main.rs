//! The `accio` command: the only crate that uses `anyhow`; libraries return typed errors and
//! this binary adds context.

mod bench_fs;
mod bench_transport;
mod common;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Internal: the peer process of `accio bench transport` (not for direct use).
    #[command(hide = true, name = "__transport-peer")]
    TransportPeer(bench_transport::PeerArgs),
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line with the whole context chain; no backtrace for a user error even
            // when RUST_BACKTRACE is set.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Bench(BenchArgs {
            which: Some(b),
            common: parent,
        }) => match b {
            BenchCommand::Transport(mut a) => {
                a.common.inherit(&parent);
                let mut rec = common::recorder(&a.common)?;
                bench_transport::run(a, &mut rec)
            }
            BenchCommand::Fs(mut a) => {
                a.common.inherit(&parent);
                let mut rec = common::recorder(&a.common)?;
                bench_fs::run_fs(a, &mut rec)
            }
            BenchCommand::Mem(mut a) => {
                a.common.inherit(&parent);
                let mut rec = common::recorder(&a.common)?;
                bench_fs::run_mem(a, &mut rec)
            }
        },
        Command::Bench(BenchArgs {
            which: None,
            common,
        }) => run_default_suite(common),
        Command::TransportPeer(a) => bench_transport::run_peer(a),
    }
}

/// `accio bench` with no subcommand: a quick pass over every bench on built-in defaults,
/// all figures in one report. A bench that fails is reported and the others still run.
fn run_default_suite(common: common::CommonArgs) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let mut rec = common::recorder(&common)?;
    let mut failed = Vec::new();
    let mut step = |name: &str, r: anyhow::Result<()>| {
        if let Err(e) = r {
            eprintln!("error: bench {name}: {e:#}");
            failed.push(name.to_string());
        }
    };
    step(
        "mem",
        bench_fs::run_mem(bench_fs::MemArgs::default_suite(&common), &mut rec),
    );
    step(
        "fs",
        bench_fs::FsArgs::default_suite(&common).and_then(|a| bench_fs::run_fs(a, &mut rec)),
    );
    step(
        "transport",
        bench_transport::run(
            bench_transport::TransportArgs::default_suite(&common),
            &mut rec,
        ),
    );
    eprintln!(
        "accio bench: {} figures in {:.0} s{}",
        rec.report().figures.len(),
        started.elapsed().as_secs_f64(),
        common
            .json
            .as_ref()
            .map(|p| format!(", written to {}", p.display()))
            .unwrap_or_default()
    );
    anyhow::ensure!(
        failed.is_empty(),
        "{} failed (see above)",
        failed.join(", ")
    );
    Ok(())
}
