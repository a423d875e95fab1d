//! Flags every bench shares.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use accio_results::event::Event;
use accio_results::model::{Recorder, Report};
use accio_results::size::parse_sizes;
use anyhow::Context as _;

/// Flags shared by every `accio bench` subcommand.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CommonArgs {
    /// Backends to measure, comma-separated (known: shm, tcp).
    #[arg(long, value_delimiter = ',', value_parser = parse_backend)]
    pub backend: Option<Vec<String>>,
    /// Message, record or buffer sizes, comma-separated, binary suffixes (e.g. 8,4K,2M).
    #[arg(long, value_parser = parse_size_list)]
    pub sizes: Option<SizeList>,
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
    /// Fewer sizes and repetitions: a rough picture in a fraction of the time.
    #[arg(long, conflicts_with = "full")]
    pub quick: bool,
    /// Every size, thread count and repetition of each bench: the thorough picture (plain
    /// `accio bench`: several minutes).
    #[arg(long)]
    pub full: bool,
    /// Folder for the report of plain `accio bench`: results.json (written as figures
    /// arrive), info.json, report.md, report.html [default: ./accio-report-<UTC time>/].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// A parsed `--sizes` list (a newtype so clap treats the whole list as one value).
#[derive(Debug, Clone)]
pub struct SizeList(pub Vec<u64>);

fn parse_size_list(s: &str) -> Result<SizeList, String> {
    parse_sizes(s).map(SizeList)
}

fn parse_backend(s: &str) -> Result<String, String> {
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
    let json = common.json.as_deref().filter(|p| !is_stdout(p));
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
        self.json = self.json.take().or_else(|| parent.json.clone());
        self.quick |= parent.quick;
        self.full |= parent.full;
        self.out = self.out.take().or_else(|| parent.out.clone());
        self.export_csv = self.export_csv.take().or_else(|| parent.export_csv.clone());
        self.export_markdown = self
            .export_markdown
            .take()
            .or_else(|| parent.export_markdown.clone());
        self.strict |= parent.strict;
    }

    /// Whether an export goes to stdout (`-`): then stdout carries only that export, and
    /// the tables a bench prints there are left out.
    pub fn stdout_taken(&self) -> bool {
        [&self.json, &self.export_csv, &self.export_markdown]
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
        if let Some(p) = self.json.as_deref().filter(|p| is_stdout(p)) {
            let mut text = serde_json::to_string_pretty(report).context("encoding the results")?;
            text.push('\n');
            write(p, text)?;
        }
        if let Some(p) = &self.export_csv {
            write(p, accio_report::csv(report))?;
        }
        if let Some(p) = &self.export_markdown {
            write(p, accio_report::markdown(report))?;
        }
        Ok(())
    }

    /// With `--strict`, an error when the report holds warnings.
    pub fn check_strict(&self, report: &Report) -> anyhow::Result<()> {
        let n = report.warnings.len();
        anyhow::ensure!(
            !self.strict || n == 0,
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
        if named {
            eprintln!("{line}");
        } else {
            eprintln!("{bench}: {line}");
        }
    }
}

/// After a bench run on its own: the post-run analysis's warnings (figures above their
/// ceiling, noisy ones), recorded in the results and printed on stderr.
pub(crate) fn post_run_warnings(bench: &str, rec: &mut Recorder) -> anyhow::Result<()> {
    let before = rec.report().warnings.len();
    accio_report::warnings::apply(rec).context("recording the warnings")?;
    for w in &rec.report().warnings[before..] {
        eprintln!("{bench}: warning: {w}");
    }
    Ok(())
}

/// Columns to fit tables printed on stdout into: `COLUMNS` when set, else the width of the
/// terminal on stdout; unlimited when stdout is not a terminal (a file or a pipe keeps
/// whole rows).
pub(crate) fn stdout_width() -> usize {
    if let Some(c) = std::env::var("COLUMNS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
    {
        return c;
    }
    // SAFETY: an all-zero winsize is a valid value for the kernel to overwrite.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize into the valid, exclusively borrowed `ws`;
    // on a descriptor that is not a terminal it fails and writes nothing.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    if rc == 0 && ws.ws_col > 0 {
        usize::from(ws.ws_col)
    } else {
        usize::MAX
    }
}
