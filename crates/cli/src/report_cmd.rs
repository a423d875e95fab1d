//! `accio info` (what the node is) and `accio report` (re-render a results file).

use std::path::{Path, PathBuf};

use accio_results::model::Report;
use accio_results::node::NodeInfo;
use anyhow::Context as _;

/// Arguments of `accio info`.
#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    /// Also write the facts as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Arguments of `accio report`.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// A results file written by `accio bench` (results.json) or `accio bench ... --json`.
    pub results: PathBuf,
    /// Folder to write report.md and report.html into [default: the results file's folder].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// `accio compare OLD.json NEW.json`.
#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// The earlier results file (results.json, or a bench's --json).
    pub old: PathBuf,
    /// The later results file.
    pub new: PathBuf,
    /// How far apart the two runs' min–max ranges must be for a change to count, in
    /// percent.
    #[arg(long, default_value_t = 10.0, value_name = "PERCENT")]
    pub threshold: f64,
    /// Exit with status 1 when any figure got slower or lower beyond the noise (for CI),
    /// and 3 when the comparison is inconclusive: the machine's own ceilings moved between
    /// the runs, so no change of accio's can be judged (run both again).
    #[arg(long)]
    pub fail_on_regression: bool,
}

/// Runs `accio compare`: each figure's change between two runs in words, changes beyond
/// the noise flagged.
pub fn run_compare(args: CompareArgs) -> anyhow::Result<()> {
    let old = Report::read(&args.old)?;
    let new = Report::read(&args.new)?;
    let c = accio_report::compare::compare(&old, &new, args.threshold / 100.0);
    anyhow::ensure!(
        !c.changes.is_empty(),
        "{} and {} have no figure in common (different benches or parameters)",
        args.old.display(),
        args.new.display()
    );
    print!("{}", c.text_fit(crate::term::stdout_width()));
    if !args.fail_on_regression || c.regressions().is_empty() {
        return Ok(());
    }
    // Short, so that it fits a terminal: the rows above name the figures.
    let moved = c.machine_differed().len();
    if moved > 0 {
        return Err(crate::common::ExitWith::inconclusive(format!(
            "{} figure(s) got slower or lower, but {moved} of the machine's own ceilings moved \
             too: inconclusive, run both again",
            c.regressions().len()
        ))
        .into());
    }
    anyhow::bail!(
        "{} figure(s) got slower or lower beyond the noise",
        c.regressions().len()
    )
}

/// Runs `accio info`: the facts on stdout, and as JSON with `--json FILE`.
pub fn run_info(args: InfoArgs) -> anyhow::Result<()> {
    let info = NodeInfo::detect();
    print!(
        "{}",
        accio_report::text::info::node_fit(&info, crate::term::stdout_width())
    );
    if let Some(p) = &args.json {
        write_json(p, &info)?;
        eprintln!("info: written to {}", p.display());
    }
    Ok(())
}

fn write_json(path: &Path, info: &NodeInfo) -> anyhow::Result<()> {
    let text = serde_json::to_vec_pretty(info).context("encoding the node facts")?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Runs `accio report`: reads the results, adds the warnings the analysis finds, and
/// writes report.md and report.html; prints the summary.
pub fn run_report(args: ReportArgs) -> anyhow::Result<()> {
    let mut report = Report::read(&args.results)?;
    let dir = match &args.out {
        Some(d) => d.clone(),
        None => args
            .results
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
    };
    let new: Vec<String> = accio_report::warnings::analyze(&report)
        .into_iter()
        .map(|w| w.text)
        .collect();
    report.warnings.extend(new);
    let written = accio_report::write(&report, &dir)?;
    print!(
        "{}",
        accio_report::summary::text_fit(&report, crate::term::stdout_width())
    );
    crate::term::print_para(
        &format!(
            "report: {} (also {})",
            written.html.display(),
            written.markdown.display()
        ),
        "  ",
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::model::{Figure, Unit};

    #[test]
    fn report_rerenders_next_to_the_results_and_rejects_other_json() {
        let dir = std::env::temp_dir().join(format!("accio-report-cmd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let results = dir.join("results.json");
        let mut r = Report::new();
        r.figures.push(
            Figure::new("mem", "memcpy", Unit::GBps, vec![1.0, 2.0, 9.0])
                .unwrap()
                .param("size", 65536)
                .param("threads", 1),
        );
        std::fs::write(&results, serde_json::to_vec(&r).unwrap()).unwrap();
        run_report(ReportArgs {
            results: results.clone(),
            out: None,
        })
        .unwrap();
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        // The noisy figure got the analysis' warning.
        assert!(md.contains("## Warnings"), "{md}");
        assert!(
            md.contains("mem memcpy 64K x1 (2.00 GB/s, 1.00–9.00)"),
            "{md}"
        );
        assert!(dir.join("report.html").is_file());
        std::fs::write(&results, br#"{"schema":"something-else"}"#).unwrap();
        let e = run_report(ReportArgs {
            results: results.clone(),
            out: None,
        })
        .unwrap_err();
        assert!(
            e.to_string().contains("is not an accio results document"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
