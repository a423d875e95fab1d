//! `accio bench transport`: latency, streaming and RMA bandwidth, connection and
//! registration cost of each backend, between this process and a peer process (this same
//! executable, started with the hidden `__transport-peer` subcommand).

use std::ffi::OsString;

use anyhow::Context as _;

use accio_bench::transport::{self, Figures, Options, PeerCommand, PeerConfig};
use accio_results::event::Event;
use accio_results::model::Recorder;

use crate::common::{self, CommonArgs};

/// The hidden subcommand that runs the peer (declared in `main.rs`).
const PEER_SUBCOMMAND: &str = "__transport-peer";

/// Arguments of `accio bench transport`.
#[derive(clap::Args, Debug)]
pub struct TransportArgs {
    /// Samples per figure: latency batches, streaming and RMA passes, memcpy batches
    /// [default: 11 latency batches and 5 passes; with --quick 5 and 3].
    #[arg(long = "reps", aliases = ["repetitions", "repeats", "samples"], value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    repetitions: Option<u32>,
    /// Do not pin the bench and its peer process to different CPUs.
    #[arg(long)]
    no_pin: bool,
    /// Measure only these figures, comma-separated: latency, stream, rma, ceilings (memcpy
    /// and the latency floor), setup (connect, register) [default: all]
    #[arg(long, value_name = "FIGURES")]
    only: Option<String>,
    /// Backends to measure, comma-separated (known: shm, tcp) [default: all].
    #[arg(long, value_delimiter = ',', value_parser = common::parse_backend)]
    backend: Option<Vec<String>>,
    /// Message sizes, comma-separated, binary suffixes (e.g. 8,4K,2M) [default: 8 B to 64M; with --quick fewer].
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

impl TransportArgs {
    /// Fills [`Self::common`] from this subcommand's flags and those given before it
    /// (`accio bench --quick SUBCOMMAND`).
    pub(crate) fn resolve(&mut self, parent: &CommonArgs) {
        self.common =
            self.flags
                .common(self.backend.clone(), self.sizes.clone(), self.quick, parent);
    }
}

impl TransportArgs {
    /// The quick variant run by plain `accio bench`.
    pub fn default_suite(common: &CommonArgs) -> TransportArgs {
        TransportArgs {
            // The suite sets `common` itself; the flags as parsed stay empty.
            backend: None,
            sizes: None,
            quick: false,
            flags: Default::default(),
            common: CommonArgs {
                quick: true,
                ..common.clone()
            },
            repetitions: None,
            no_pin: false,
            only: None,
        }
    }

    /// The library options these arguments stand for, starting peers with `peer`.
    fn options(&self, peer: PeerCommand) -> anyhow::Result<Options> {
        let mut o = Options::new(peer);
        if let Some(list) = &self.only {
            o.figures = Figures::only(list)?;
        }
        if let Some(b) = &self.common.backend {
            o.backends = b.clone();
        }
        o.sizes = self.common.sizes.as_ref().map(|s| s.0.clone());
        o.quick = self.common.quick;
        o.repetitions = self.repetitions.map(|r| r as usize);
        o.pin = !self.no_pin;
        Ok(o)
    }
}

/// Arguments of the hidden peer process (written by [`PeerConfig::to_args`]).
#[derive(clap::Args, Debug)]
pub struct PeerArgs {
    /// The bench's listening address to connect to.
    #[arg(long)]
    addr: String,
    /// CPU to pin the peer to.
    #[arg(long)]
    cpu: Option<usize>,
    /// The bench's pid; the peer refuses to run under another parent.
    #[arg(long)]
    parent: Option<u32>,
}

impl From<PeerArgs> for PeerConfig {
    fn from(a: PeerArgs) -> PeerConfig {
        PeerConfig {
            addr: a.addr,
            cpu: a.cpu,
            parent: a.parent,
        }
    }
}

/// Runs the transport bench: progress on stderr, tables on stdout, JSON to `--json FILE`.
pub fn run(args: TransportArgs, rec: &mut Recorder) -> anyhow::Result<()> {
    let common = args.common.clone();
    let standalone = !common.stdout_taken();
    let r = run_with(
        args,
        rec,
        &mut |e| common::print_event("transport", e),
        standalone,
    );
    common::finish("transport", &common, rec, r)
}

/// Runs the transport bench with its events going to `events`; `standalone` also prints
/// the tables on stdout and the closing lines on stderr (the default suite prints its own
/// summary instead).
pub(crate) fn run_with(
    args: TransportArgs,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    standalone: bool,
) -> anyhow::Result<()> {
    let program = std::env::current_exe()
        .context("finding the accio executable to start the transport peer process")?;
    let opts = args.options(PeerCommand {
        program,
        args: vec![OsString::from(PEER_SUBCOMMAND)],
    })?;
    let json = args.common.flags.json.as_deref();
    let result = transport::run(&opts, rec, events);
    if standalone {
        // Tables of whatever was measured, also when the run failed part-way.
        let tables = accio_report::text::transport::render_tables_fit(
            rec.report(),
            crate::term::stdout_width(),
        );
        if !tables.is_empty() {
            print!("\n{tables}");
        }
        if let Some(p) = json {
            eprintln!("transport: results written to {}", p.display());
        }
    }
    result.context("accio bench transport")
}

/// Runs the peer side of the transport bench.
pub fn run_peer(args: PeerArgs) -> anyhow::Result<()> {
    let cfg = PeerConfig::from(args);
    transport::peer_main(&cfg)
        .with_context(|| format!("transport peer process connected to {}", cfg.addr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    fn transport_args(argv: &[&str]) -> Result<TransportArgs, clap::Error> {
        let cli = crate::Cli::try_parse_from(argv)?;
        match cli.command {
            crate::Command::Bench(crate::BenchArgs {
                which: Some(crate::BenchCommand::Transport(mut a)),
                common,
            }) => {
                a.resolve(&common);
                Ok(a)
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    fn peer() -> PeerCommand {
        PeerCommand {
            program: "accio".into(),
            args: vec![PEER_SUBCOMMAND.into()],
        }
    }

    #[test]
    fn command_line_is_consistent() {
        crate::Cli::command().debug_assert();
    }

    #[test]
    fn shared_flags_reach_the_options() {
        let a = transport_args(&[
            "accio",
            "bench",
            "transport",
            "--backend",
            "tcp,shm",
            "--sizes",
            "8,4K,2M",
            "--quick",
            "--json",
            "out.json",
            "--reps",
            "4",
        ])
        .unwrap();
        assert_eq!(
            a.common.flags.json.as_deref(),
            Some(std::path::Path::new("out.json"))
        );
        let o = a.options(peer()).unwrap();
        assert_eq!(o.backends, vec!["tcp", "shm"]);
        assert_eq!(o.sizes, Some(vec![8, 4096, 2 << 20]));
        assert!(o.quick && o.pin);
        assert_eq!(o.repetitions, Some(4));
        let d = transport_args(&["accio", "bench", "transport", "--no-pin"])
            .unwrap()
            .options(peer())
            .unwrap();
        assert_eq!(d.backends, vec!["shm", "tcp"]);
        assert!(d.sizes.is_none() && !d.quick && !d.pin);
        assert_eq!(d.figures, Figures::default());
        let only = transport_args(&["accio", "bench", "transport", "--only", "latency,stream"])
            .unwrap()
            .options(peer())
            .unwrap();
        assert!(only.figures.latency && only.figures.stream);
        assert!(!only.figures.rma && !only.figures.ceilings && !only.figures.setup);
        let e = transport_args(&["accio", "bench", "transport", "--only", "latency,speed"])
            .unwrap()
            .options(peer())
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown figure \"speed\""), "{e}");
    }

    #[test]
    fn bad_backends_and_sizes_are_clear_errors() {
        let e = transport_args(&["accio", "bench", "transport", "--backend", "shm,ib"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown backend \"ib\" (known: shm, tcp)"),
            "{e}"
        );
        let e = transport_args(&["accio", "bench", "transport", "--sizes", "8,4Q"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("size \"4Q\" has unknown suffix \"Q\""), "{e}");
        let e = transport_args(&["accio", "bench", "transport", "--reps", "0"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--reps"), "{e}");
    }

    #[test]
    fn default_suite_is_quick() {
        let common = CommonArgs {
            backend: Some(vec!["tcp".into()]),
            ..CommonArgs::default()
        };
        let o = TransportArgs::default_suite(&common)
            .options(peer())
            .unwrap();
        assert!(o.quick && o.pin && o.repetitions.is_none());
        assert_eq!(o.backends, vec!["tcp"]);
    }

    #[test]
    fn peer_arguments_round_trip_through_the_hidden_subcommand() {
        let cfg = PeerConfig {
            addr: "tcp://127.0.0.1:4242".into(),
            cpu: Some(1),
            parent: Some(99),
        };
        let mut argv = vec!["accio".to_string(), PEER_SUBCOMMAND.to_string()];
        argv.extend(cfg.to_args());
        match crate::Cli::try_parse_from(&argv).unwrap().command {
            crate::Command::TransportPeer(a) => assert_eq!(PeerConfig::from(a), cfg),
            other => panic!("parsed as {other:?}"),
        }
    }
}
