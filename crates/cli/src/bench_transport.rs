//! `accio bench transport` (to be written).

use crate::common::CommonArgs;

/// Arguments of `accio bench transport`.
#[derive(clap::Args, Debug)]
pub struct TransportArgs {
    #[command(flatten)]
    common: CommonArgs,
}

impl TransportArgs {
    /// The quick variant run by plain `accio bench`.
    pub fn default_suite(common: &CommonArgs) -> TransportArgs {
        TransportArgs {
            common: common.clone(),
        }
    }
}

/// Arguments of the hidden peer process.
#[derive(clap::Args, Debug)]
pub struct PeerArgs {}

/// Runs the transport bench.
pub fn run(_args: TransportArgs) -> anyhow::Result<()> {
    anyhow::bail!("accio bench transport is not written yet")
}

/// Runs the peer side of the transport bench.
pub fn run_peer(_args: PeerArgs) -> anyhow::Result<()> {
    anyhow::bail!("not written yet")
}
