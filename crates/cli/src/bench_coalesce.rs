//! `accio bench coalesce`: small items into a peer window with and without the
//! communication cache, and small messages with and without aggregation.
//!
//! Thin: parse flags into [`Options`], print progress lines on stderr and the tables on
//! stdout. The methodology lives in `accio_bench::coalesce`.

use std::time::Duration;

use anyhow::Context as _;

use accio_bench::coalesce::{self, GeometrySpec, Options, Pattern, Placement, Transfer};
use accio_results::event::Event;
use accio_results::model::Recorder;
use accio_results::size::parse_size;

use crate::common::{self, CommonArgs};

/// Arguments of `accio bench coalesce`. `--sizes` sets the item sizes (powers of two, 8
/// to 4096 bytes) [default: 8,64,256; with --quick: 64].
#[derive(clap::Args, Debug)]
pub struct CoalesceArgs {
    /// Access patterns, comma-separated: random (independent uniform slots), permutation
    /// (every slot once per pass, random order), streaming (in order), repeated (a hot set
    /// of 512 slots) [default: all four].
    #[arg(long, value_delimiter = ',', value_parser = parse_pattern)]
    pattern: Option<Vec<Pattern>>,
    /// Cache geometries SETSxWAYSxWAYBYTES, comma-separated; lines are as large as the
    /// items [default: 16x4x32K,64x4x8K,4x4x128K; with --quick: 16x4x32K].
    #[arg(long, value_delimiter = ',', value_parser = parse_geometry)]
    geometry: Option<Vec<GeometrySpec>>,
    /// Placement policies, comma-separated: first-free, round-robin [default: both; with
    /// --quick: first-free].
    #[arg(long, value_delimiter = ',', value_parser = parse_placement)]
    placement: Option<Vec<Placement>>,
    /// Who copies evicted ways, comma-separated: push (the sender: one RMA or message per
    /// way), pull (the receiver copies from the sender's registered buffers; shm only),
    /// auto (pull where possible) [default: push,pull; with --quick: auto].
    #[arg(long, value_delimiter = ',', value_parser = parse_transfer)]
    transfer: Option<Vec<Transfer>>,
    /// Bytes of window the patterns write (K/M/G suffixes) [default: the cache capacity;
    /// 4x for streaming].
    #[arg(long, value_parser = parse_size)]
    footprint: Option<u64>,
    /// Items per cache sample, rounded to whole passes (K/M suffixes) [default: 1M; with
    /// --quick: 256K].
    #[arg(long, value_name = "N", value_parser = parse_size)]
    items: Option<u64>,
    /// Measured samples per figure [default: 5; with --quick: 3].
    #[arg(long = "reps", aliases = ["repetitions", "repeats", "samples"], value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    repetitions: Option<u32>,
    /// Time budget of one sample of one RMA per item, in milliseconds [default: 100; with
    /// --quick: 50].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    direct_ms: Option<u64>,
    /// Skip checked mode (measured by default except with --quick).
    #[arg(long)]
    no_checked: bool,
    /// Skip random over 4x the cache capacity (measured by default except with --quick).
    #[arg(long)]
    no_spill: bool,
    /// Skip the message aggregation figures.
    #[arg(long)]
    no_aggregate: bool,
    /// Backends to measure, comma-separated (known: shm, tcp) [default: all].
    #[arg(long, value_delimiter = ',', value_parser = common::parse_backend)]
    backend: Option<Vec<String>>,
    /// Item sizes in bytes, comma-separated, powers of two from 8 to 4096 [default: 8,64,256; with --quick: 64].
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

impl CoalesceArgs {
    /// Fills [`Self::common`] from this subcommand's flags and those given before it
    /// (`accio bench --quick SUBCOMMAND`).
    pub(crate) fn resolve(&mut self, parent: &CommonArgs) {
        self.common =
            self.flags
                .common(self.backend.clone(), self.sizes.clone(), self.quick, parent);
    }
}

fn parse_pattern(s: &str) -> Result<Pattern, String> {
    s.parse()
}

fn parse_geometry(s: &str) -> Result<GeometrySpec, String> {
    s.parse()
}

fn parse_placement(s: &str) -> Result<Placement, String> {
    s.parse()
}

fn parse_transfer(s: &str) -> Result<Transfer, String> {
    s.parse()
}

impl CoalesceArgs {
    /// The variant plain `accio bench` runs: the quick preset (about 2 s), or the full one
    /// with `--full`.
    pub fn default_suite(common: &CommonArgs) -> CoalesceArgs {
        CoalesceArgs {
            // The suite sets `common` itself; the flags as parsed stay empty.
            backend: None,
            sizes: None,
            quick: false,
            flags: Default::default(),
            common: CommonArgs {
                quick: !common.full,
                ..common.clone()
            },
            pattern: None,
            geometry: None,
            placement: None,
            transfer: None,
            footprint: None,
            items: None,
            repetitions: None,
            direct_ms: None,
            no_checked: false,
            no_spill: false,
            no_aggregate: false,
        }
    }

    /// The library options these arguments stand for.
    fn options(&self) -> anyhow::Result<Options> {
        let mut o = if self.common.quick {
            Options::quick()
        } else {
            Options::full()
        };
        if let Some(b) = &self.common.backend {
            o.backends = b.clone();
        }
        if let Some(s) = &self.common.sizes {
            o.items =
                s.0.iter()
                    .map(|&n| usize::try_from(n).context("item size too large"))
                    .collect::<anyhow::Result<_>>()?;
        }
        if let Some(p) = &self.pattern {
            o.patterns = p.clone();
        }
        if let Some(g) = &self.geometry {
            o.geometries = g.clone();
        }
        if let Some(p) = &self.placement {
            o.placements = p.clone();
        }
        if let Some(t) = &self.transfer {
            o.transfers = t.clone();
        }
        o.footprint = self.footprint;
        if let Some(n) = self.items {
            o.items_per_sample = usize::try_from(n).context("--items is too large")?;
        }
        if let Some(r) = self.repetitions {
            o.repetitions = r as usize;
        }
        if let Some(ms) = self.direct_ms {
            o.direct_budget = Duration::from_millis(ms);
        }
        o.checked &= !self.no_checked;
        o.spill &= !self.no_spill;
        o.aggregate &= !self.no_aggregate;
        o.validate()?;
        Ok(o)
    }
}

/// Runs the coalescing bench: progress on stderr, tables on stdout, JSON to `--json FILE`.
pub fn run(args: CoalesceArgs, rec: &mut Recorder) -> anyhow::Result<()> {
    let common = args.common.clone();
    let standalone = !common.stdout_taken();
    let r = run_with(
        args,
        rec,
        &mut |e| common::print_event("coalesce", e),
        standalone,
    );
    common::finish("coalesce", &common, rec, r)
}

/// Runs the coalescing bench with its events going to `events`; `standalone`
/// also prints the tables on stdout and the closing line on stderr (the default suite
/// prints its own summary instead).
pub(crate) fn run_with(
    args: CoalesceArgs,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    standalone: bool,
) -> anyhow::Result<()> {
    let opts = args.options()?;
    let result = coalesce::run(&opts, rec, events);
    if standalone {
        // Tables of whatever was measured, also when the run failed part-way.
        let tables = accio_report::text::coalesce::render_tables_fit(
            rec.report(),
            crate::term::stdout_width(),
        );
        if !tables.is_empty() {
            print!("\n{tables}");
        }
        if let Some(p) = &args.common.flags.json {
            eprintln!("coalesce: results written to {}", p.display());
        }
    }
    result.context("accio bench coalesce")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn coalesce_args(argv: &[&str]) -> Result<CoalesceArgs, clap::Error> {
        let cli = crate::Cli::try_parse_from(argv)?;
        match cli.command {
            crate::Command::Bench(crate::BenchArgs {
                which: Some(crate::BenchCommand::Coalesce(mut a)),
                common,
            }) => {
                a.resolve(&common);
                Ok(a)
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn flags_reach_the_options() {
        let a = coalesce_args(&[
            "accio",
            "bench",
            "coalesce",
            "--backend",
            "shm",
            "--sizes",
            "8,256",
            "--pattern",
            "random,repeated",
            "--geometry",
            "16x4x32K,64x2x8K",
            "--placement",
            "round-robin",
            "--transfer",
            "push",
            "--footprint",
            "4M",
            "--items",
            "64K",
            "--repetitions",
            "2",
            "--direct-ms",
            "20",
            "--no-checked",
        ])
        .unwrap();
        let o = a.options().unwrap();
        assert_eq!(o.backends, vec!["shm"]);
        assert_eq!(o.items, vec![8, 256]);
        assert_eq!(o.patterns, vec![Pattern::Random, Pattern::Repeated]);
        assert_eq!(o.geometries.len(), 2);
        assert_eq!(o.geometries[1].to_string(), "64x2x8K");
        assert_eq!(o.placements, vec![Placement::RoundRobin]);
        assert_eq!(o.transfers, vec![Transfer::Push]);
        assert_eq!(o.footprint, Some(4 << 20));
        assert_eq!(o.items_per_sample, 64 << 10);
        assert_eq!(o.repetitions, 2);
        assert_eq!(o.direct_budget, Duration::from_millis(20));
        assert!(!o.checked && o.spill && o.aggregate);
    }

    #[test]
    fn default_suite_is_the_quick_preset() {
        let common = CommonArgs {
            backend: Some(vec!["tcp".into()]),
            ..CommonArgs::default()
        };
        let o = CoalesceArgs::default_suite(&common).options().unwrap();
        assert_eq!(o.backends, vec!["tcp"]);
        assert_eq!(o.items, vec![64]);
        assert_eq!(o.geometries, vec![GeometrySpec::default_cache()]);
        // The quick preset spills too: the rate against the footprint, on one plot.
        assert!(!o.checked && o.spill && o.repetitions == 3);
        let full = CommonArgs {
            full: true,
            ..CommonArgs::default()
        };
        let o = CoalesceArgs::default_suite(&full).options().unwrap();
        assert_eq!(o.items, vec![8, 64, 256]);
        assert!(o.checked && o.spill);
    }

    #[test]
    fn bad_values_are_clear_errors() {
        let e = coalesce_args(&["accio", "bench", "coalesce", "--pattern", "zigzag"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown pattern \"zigzag\""), "{e}");
        let e = coalesce_args(&["accio", "bench", "coalesce", "--geometry", "16x4"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("SETSxWAYSxWAYBYTES"), "{e}");
        let e = coalesce_args(&["accio", "bench", "coalesce", "--placement", "lru"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("first-free, round-robin"), "{e}");
        let a = coalesce_args(&["accio", "bench", "coalesce", "--sizes", "48"]).unwrap();
        let e = a.options().unwrap_err().to_string();
        assert!(e.contains("power of two from 8 to 4096"), "{e}");
    }
}
