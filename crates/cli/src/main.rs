//! The `accio` command: the only crate that uses `anyhow`; libraries return typed errors and
//! this binary adds context.

mod bench_fs;
mod bench_transport;
mod common;

use clap::{Parser, Subcommand};

/// accio: concurrent, high-throughput data movement on accelerator and HPC nodes.
#[derive(Parser, Debug)]
#[command(name = "accio", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

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
#[command(args_conflicts_with_subcommands = true)]
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

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(BenchArgs { which: Some(b), .. }) => match b {
            BenchCommand::Transport(a) => bench_transport::run(a),
            BenchCommand::Fs(a) => bench_fs::run_fs(a),
            BenchCommand::Mem(a) => bench_fs::run_mem(a),
        },
        Command::Bench(BenchArgs {
            which: None,
            common,
        }) => run_default_suite(common),
        Command::TransportPeer(a) => bench_transport::run_peer(a),
    }
}

/// `accio bench` with no subcommand: a quick pass over every bench on built-in defaults.
fn run_default_suite(common: common::CommonArgs) -> anyhow::Result<()> {
    bench_fs::run_mem(bench_fs::MemArgs::default_suite(&common))?;
    bench_fs::run_fs(bench_fs::FsArgs::default_suite(&common)?)?;
    bench_transport::run(bench_transport::TransportArgs::default_suite(&common))
}
