//! `accio bench fs` and `accio bench mem` (to be written).

use crate::common::CommonArgs;

/// Arguments of `accio bench fs`.
#[derive(clap::Args, Debug)]
pub struct FsArgs {
    #[command(flatten)]
    common: CommonArgs,
}

impl FsArgs {
    /// The quick variant run by plain `accio bench` (a temporary directory and /dev/shm).
    pub fn default_suite(common: &CommonArgs) -> anyhow::Result<FsArgs> {
        Ok(FsArgs {
            common: common.clone(),
        })
    }
}

/// Arguments of `accio bench mem`.
#[derive(clap::Args, Debug)]
pub struct MemArgs {
    #[command(flatten)]
    common: CommonArgs,
}

impl MemArgs {
    /// The quick variant run by plain `accio bench`.
    pub fn default_suite(common: &CommonArgs) -> MemArgs {
        MemArgs {
            common: common.clone(),
        }
    }
}

/// Runs the file-system bench.
pub fn run_fs(_args: FsArgs) -> anyhow::Result<()> {
    anyhow::bail!("accio bench fs is not written yet")
}

/// Runs the memory bench.
pub fn run_mem(_args: MemArgs) -> anyhow::Result<()> {
    anyhow::bail!("accio bench mem is not written yet")
}
