//! `accio info` and `accio report` (being written).

use std::path::PathBuf;

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
    /// A results file written by `accio bench --json`.
    pub results: PathBuf,
    /// Folder to write the Markdown and HTML into.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Runs `accio info`.
pub fn run_info(_args: InfoArgs) -> anyhow::Result<()> {
    anyhow::bail!("accio info is not written yet")
}

/// Runs `accio report`.
pub fn run_report(_args: ReportArgs) -> anyhow::Result<()> {
    anyhow::bail!("accio report is not written yet")
}
