//! Flags every bench shares.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use accio_results::event::Event;
use accio_results::model::{Recorder, Report};
use accio_results::size::parse_sizes;
use anyhow::Context as _;

/// The flags of plain `accio bench` (the default suite), also taken before a subcommand
/// (`accio bench --quick transport`); each subcommand's own flags are declared with it (see
/// [`BenchFlags`]), and what it runs with is this struct, filled from both.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CommonArgs {
    /// Backends the transport, merge and coalesce benches use, comma-separated (known: shm,
    /// tcp).
    #[arg(long, value_delimiter = ',', value_parser = parse_backend)]
    pub backend: Option<Vec<String>>,
    /// Sizes for the benches that take them: memcpy buffers and transport messages,
    /// comma-separated, binary suffixes (e.g. 8,4K,2M).
    #[arg(long, value_parser = parse_size_list)]
    pub sizes: Option<SizeList>,
    #[command(flatten)]
    pub flags: BenchFlags,
    /// Fewer sizes and repetitions: a rough picture in a fraction of the time.
    #[arg(long, conflicts_with = "full")]
    pub quick: bool,
    /// Every size, thread count and repetition of each bench: the thorough picture
    /// (several minutes).
    #[arg(long)]
    pub full: bool,
    /// Folder for the report: results.json (written as figures arrive), info.json,
    /// report.md, report.html [default: ./accio-report-<UTC time>/].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Where the figures go, for `accio bench` and every one of its subcommands.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BenchFlags {
    /// Also write the results as JSON to FILE (rewritten as figures arrive), or to stdout
    /// at the end with `-`.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write the figures as CSV (one row per figure) to FILE, or to stdout with `-`.
    #[arg(long, value_name = "FILE")]
    pub export_csv: Option<PathBuf>,
    /// Also write the results as a Markdown report to FILE, or to stdout with `-`.
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,
    /// Fail (exit status 1) when the run gave any warning (a noisy figure, one above its
    /// ceiling, something skipped): for CI jobs that must not pass on doubtful figures.
    #[arg(long)]
    pub strict: bool,
}

impl BenchFlags {
    /// A subcommand's flags as the shared arguments: its own `--backend`, `--sizes` and
    /// `--quick` (`None`/`false` where it has none), then what was given before the
    /// subcommand ([`CommonArgs::inherit`]).
    pub fn common(
        &self,
        backend: Option<Vec<String>>,
        sizes: Option<SizeList>,
        quick: bool,
        parent: &CommonArgs,
    ) -> CommonArgs {
        let mut c = CommonArgs {
            backend,
            sizes,
            flags: self.clone(),
            quick,
            full: false,
            out: None,
        };
        c.inherit(parent);
        c
    }
}

/// A parsed `--sizes` list (a newtype so clap treats the whole list as one value).
#[derive(Debug, Clone)]
pub struct SizeList(pub Vec<u64>);

pub(crate) fn parse_size_list(s: &str) -> Result<SizeList, String> {
    parse_sizes(s).map(SizeList)
}

pub(crate) fn parse_backend(s: &str) -> Result<String, String> {
    if accio::backend(s).is_some() {
        Ok(s.to_string())
    } else {
        Err(format!(
            "unknown backend {s:?} (known: {})",
            accio::schemes().join(", ")
        ))
    }
}

/// The rank a launcher gave this process (`accio run`, or an MPI launcher: Open MPI's, or
/// any PMI/PMIx one), if any.
pub fn launched_rank() -> Option<usize> {
    [
        "ACCIO_RANK",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "PMIX_RANK",
    ]
    .iter()
    .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// `-`: the path that stands for stdout.
fn is_stdout(p: &Path) -> bool {
    p == Path::new("-")
}

/// The recorder for a run: figures kept in memory and, with `--json FILE`, rewritten to FILE
/// as they arrive (`--json -` prints them at the end instead, see [`finish`]).
pub fn recorder(common: &CommonArgs) -> anyhow::Result<Recorder> {
    let json = common.flags.json.as_deref().filter(|p| !is_stdout(p));
    Recorder::new(json).with_context(|| match json {
        Some(p) => format!("creating the results file {}", p.display()),
        None => "creating the results".into(),
    })
}

impl CommonArgs {
    /// Fills what this subcommand's flags left unset from the flags given before the
    /// subcommand (`accio bench --quick transport` = `accio bench transport --quick`).
    pub fn inherit(&mut self, parent: &CommonArgs) {
        self.backend = self.backend.take().or_else(|| parent.backend.clone());
        self.sizes = self.sizes.take().or_else(|| parent.sizes.clone());
        self.quick |= parent.quick;
        self.full |= parent.full;
        self.out = self.out.take().or_else(|| parent.out.clone());
        let (f, p) = (&mut self.flags, &parent.flags);
        f.json = f.json.take().or_else(|| p.json.clone());
        f.export_csv = f.export_csv.take().or_else(|| p.export_csv.clone());
        f.export_markdown = f
            .export_markdown
            .take()
            .or_else(|| p.export_markdown.clone());
        f.strict |= p.strict;
    }

    /// Whether an export goes to stdout (`-`): then stdout carries only that export, and
    /// the tables a bench prints there are left out.
    pub fn stdout_taken(&self) -> bool {
        let f = &self.flags;
        [&f.json, &f.export_csv, &f.export_markdown]
            .into_iter()
            .flatten()
            .any(|p| is_stdout(p))
    }

    /// Writes the exports asked for: `--json -` (the file form is written as figures
    /// arrive), `--export-csv`, `--export-markdown`.
    pub fn export(&self, report: &Report) -> anyhow::Result<()> {
        let write = |path: &Path, text: String| -> anyhow::Result<()> {
            if is_stdout(path) {
                std::io::stdout()
                    .write_all(text.as_bytes())
                    .context("writing to stdout")
            } else {
                std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
            }
        };
        if let Some(p) = self.flags.json.as_deref().filter(|p| is_stdout(p)) {
            let mut text = serde_json::to_string_pretty(report).context("encoding the results")?;
            text.push('\n');
            write(p, text)?;
        }
        if let Some(p) = &self.flags.export_csv {
            write(p, accio_report::csv(report))?;
        }
        if let Some(p) = &self.flags.export_markdown {
            write(p, accio_report::markdown(report))?;
        }
        Ok(())
    }

    /// With `--strict`, an error when the report holds warnings.
    pub fn check_strict(&self, report: &Report) -> anyhow::Result<()> {
        let n = report.warnings.len();
        anyhow::ensure!(
            !self.flags.strict || n == 0,
            "{n} warning(s) and --strict: the figures are doubtful (see the warnings above)"
        );
        Ok(())
    }
}

/// The end of a bench run on its own: the post-run warnings, the exports, then the run's
/// own result, then `--strict`.
pub(crate) fn finish(
    bench: &str,
    common: &CommonArgs,
    rec: &mut Recorder,
    result: anyhow::Result<()>,
) -> anyhow::Result<()> {
    post_run_warnings(bench, rec)?;
    common.export(rec.report())?;
    result?;
    common.check_strict(rec.report())
}

/// Prints a bench event as a plain progress line on stderr, named after the bench where the
/// line does not start with its name already (figure lines do).
pub(crate) fn print_event(bench: &str, e: Event<'_>) {
    if let Some(line) = accio_report::text::event_line(&e) {
        let named = line
            .strip_prefix(bench)
            .is_some_and(|rest| rest.starts_with([' ', ':']));
        // Within the terminal: a long figure line continues below, indented.
        if named {
            crate::term::eprint_para(&line, "  ");
        } else {
            crate::term::eprint_para(&format!("{bench}: {line}"), "  ");
        }
    }
}

/// After a bench run on its own: the post-run analysis's warnings (figures above their
/// ceiling, noisy ones), recorded in the results and printed on stderr.
pub(crate) fn post_run_warnings(bench: &str, rec: &mut Recorder) -> anyhow::Result<()> {
    let before = rec.report().warnings.len();
    accio_report::warnings::apply(rec).context("recording the warnings")?;
    // One paragraph per warning, wrapped at spaces within the terminal.
    for w in &rec.report().warnings[before..] {
        crate::term::eprint_para(&format!("{bench}: warning: {w}"), "  ");
    }
    Ok(())
}

/// An error that ends accio with an exit status of its own (README, "Exit status"): 2 for
/// a usage error, as clap's own for a bad command line; 3 for an `accio compare
/// --fail-on-regression` that could judge nothing.
#[derive(Debug)]
pub struct ExitWith {
    /// The process's exit status.
    pub status: u8,
    /// What went wrong.
    pub message: String,
}

impl ExitWith {
    /// A usage error (exit status 2).
    pub fn usage(message: impl Into<String>) -> ExitWith {
        ExitWith {
            status: 2,
            message: message.into(),
        }
    }

    /// A comparison that is inconclusive: the machine differed between the runs (exit
    /// status 3).
    pub fn inconclusive(message: impl Into<String>) -> ExitWith {
        ExitWith {
            status: 3,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ExitWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExitWith {}
