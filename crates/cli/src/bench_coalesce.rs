//! `accio bench coalesce` (being written).

use accio_bench::model::Recorder;

use crate::common::CommonArgs;

/// Arguments of `accio bench coalesce`.
#[derive(clap::Args, Debug)]
pub struct CoalesceArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
}

impl CoalesceArgs {
    /// The quick variant run by plain `accio bench`.
    pub fn default_suite(common: &CommonArgs) -> CoalesceArgs {
        CoalesceArgs {
            common: CommonArgs {
                quick: true,
                ..common.clone()
            },
        }
    }
}

/// Runs the coalescing bench.
pub fn run(_args: CoalesceArgs, _rec: &mut Recorder) -> anyhow::Result<()> {
    anyhow::bail!("accio bench coalesce is not written yet")
}
