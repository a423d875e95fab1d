//! The default suite: what plain `accio bench` runs.

use crate::common::{self, CommonArgs};
use crate::{bench_fs, bench_transport};

/// `accio bench` with no subcommand: a quick pass over every bench on built-in defaults,
/// all figures in one report. A bench that fails is reported and the others still run.
pub fn run(common: CommonArgs) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let mut rec = common::recorder(&common)?;
    let mut failed = Vec::new();
    let mut step = |name: &str, r: anyhow::Result<()>| {
        if let Err(e) = r {
            eprintln!("error: bench {name}: {e:#}");
            failed.push(name.to_string());
        }
    };
    step(
        "mem",
        bench_fs::run_mem(bench_fs::MemArgs::default_suite(&common), &mut rec),
    );
    step(
        "fs",
        bench_fs::FsArgs::default_suite(&common).and_then(|a| bench_fs::run_fs(a, &mut rec)),
    );
    step(
        "transport",
        bench_transport::run(
            bench_transport::TransportArgs::default_suite(&common),
            &mut rec,
        ),
    );
    eprintln!(
        "accio bench: {} figures in {:.0} s{}",
        rec.report().figures.len(),
        started.elapsed().as_secs_f64(),
        common
            .json
            .as_ref()
            .map(|p| format!(", written to {}", p.display()))
            .unwrap_or_default()
    );
    anyhow::ensure!(
        failed.is_empty(),
        "{} failed (see above)",
        failed.join(", ")
    );
    Ok(())
}
