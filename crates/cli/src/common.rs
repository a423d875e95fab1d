//! Flags every bench shares.

use std::path::PathBuf;

use accio_results::event::Event;
use accio_results::model::Recorder;
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
    /// Also write the results as JSON to FILE (rewritten as figures arrive).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
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

/// The recorder for a run: figures kept in memory and, with `--json FILE`, rewritten to FILE
/// as they arrive.
pub fn recorder(common: &CommonArgs) -> anyhow::Result<Recorder> {
    let json = common.json.as_deref();
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
    }
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
