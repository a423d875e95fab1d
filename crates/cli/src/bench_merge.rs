//! `accio bench merge` (being written).

use accio_bench::model::Recorder;

use crate::common::CommonArgs;

/// Arguments of `accio bench merge`.
#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
}

impl MergeArgs {
    /// The quick variant run by plain `accio bench`.
    pub fn default_suite(common: &CommonArgs) -> MergeArgs {
        MergeArgs {
            common: CommonArgs {
                quick: true,
                ..common.clone()
            },
        }
    }
}

/// Arguments of the hidden producer process of the merge bench.
#[derive(clap::Args, Debug)]
pub struct ProducerArgs {}

/// Runs the merge bench.
pub fn run(_args: MergeArgs, _rec: &mut Recorder) -> anyhow::Result<()> {
    anyhow::bail!("accio bench merge is not written yet")
}

/// Runs one producer process of the merge bench.
pub fn run_producer(_args: ProducerArgs) -> anyhow::Result<()> {
    anyhow::bail!("not written yet")
}
