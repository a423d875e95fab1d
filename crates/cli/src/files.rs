//! `accio inspect`, `accio verify`, `accio recover`: tools for accio container files
//! (being written).

use std::path::PathBuf;

/// Arguments of `accio inspect`.
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// The container file.
    pub file: PathBuf,
}

/// Arguments of `accio verify`.
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The container file.
    pub file: PathBuf,
}

/// Arguments of `accio recover`.
#[derive(clap::Args, Debug)]
pub struct RecoverArgs {
    /// The container file.
    pub file: PathBuf,
}

/// Runs `accio inspect`.
pub fn run_inspect(_args: InspectArgs) -> anyhow::Result<()> {
    anyhow::bail!("accio inspect is not written yet")
}

/// Runs `accio verify`.
pub fn run_verify(_args: VerifyArgs) -> anyhow::Result<()> {
    anyhow::bail!("accio verify is not written yet")
}

/// Runs `accio recover`.
pub fn run_recover(_args: RecoverArgs) -> anyhow::Result<()> {
    anyhow::bail!("accio recover is not written yet")
}
