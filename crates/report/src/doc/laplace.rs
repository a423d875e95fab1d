//! The halo-exchange workload's section: per run, a table of every rank's phases and rates
//! and seed 001's Figure 1 as stacked bars (compute, synchronize, communicate per rank).

use accio_results::metric::laplace as m;
use accio_results::model::{Figure, Report};
use accio_results::num::fmt3;

use crate::bars::StackedBars;

use super::cells::{med_range, ratio_cell};
use super::{Block, Plot, Section, Table};

/// What tells one run of `accio demo laplace` from another in one results file.
const RUN_PARAMS: &[&str] = &["grid", "ranks", "path", "backend", "checked"];

fn run_key(f: &Figure) -> String {
    RUN_PARAMS
        .iter()
        .map(|k| format!("{k}={}", f.param_str(k)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The section, or `None` when the report holds no laplace figures.
pub(super) fn laplace_section(report: &Report) -> Option<Section> {
    let figs: Vec<&Figure> = report
        .figures
        .iter()
        .filter(|f| f.bench == m::BENCH)
        .collect();
    if figs.is_empty() {
        return None;
    }
    let mut runs: Vec<String> = Vec::new();
    for f in &figs {
        let k = run_key(f);
        if !runs.contains(&k) {
            runs.push(k);
        }
    }
    let mut blocks = vec![Block::Para(
        "The streaming Jacobi/Laplacian over the rank world (a halo exchange between \
         neighbouring ranks): time per iteration of each phase on each rank (median, \
         min–max over the iterations), the halo rate beside the pair bandwidth (one face one \
         way by the same path, measured in the same run), and the kernel's sweep rate beside \
         an in-place sweep of as many bytes by every rank at once."
            .into(),
    )];
    for (i, run) in runs.iter().enumerate() {
        let of_run: Vec<&Figure> = figs
            .iter()
            .copied()
            .filter(|f| &run_key(f) == run)
            .collect();
        let mut ranks: Vec<u64> = of_run.iter().filter_map(|f| f.param_u64("rank")).collect();
        ranks.sort_unstable();
        ranks.dedup();
        let get = |rank: u64, metric: &str| {
            of_run
                .iter()
                .copied()
                .find(|f| f.metric == metric && f.param_u64("rank") == Some(rank))
        };
        blocks.push(Block::Heading(run.clone()));
        const HEADERS: [&str; 9] = [
            "rank",
            "node",
            "compute ms",
            "synchronize ms",
            "communicate ms",
            "halo GB/s",
            "pair GB/s",
            "sweep GB/s",
            "of ceiling",
        ];
        // Every column after rank and node holds numbers.
        let mut t = Table::new(&HEADERS, &HEADERS[2..]);
        let mut bars = StackedBars {
            id: format!("laplace-phases-{i}"),
            title: format!("Time per iteration by phase and rank ({run})"),
            unit: "ms per iteration (median)".into(),
            bars: Vec::new(),
            segments: vec![
                ("compute".into(), Vec::new()),
                ("synchronize".into(), Vec::new()),
                ("communicate".into(), Vec::new()),
            ],
        };
        for &r in &ranks {
            let cell = |metric: &str| get(r, metric).map_or("-".into(), med_range);
            let node = get(r, m::COMPUTE)
                .map(|f| f.param_str("node"))
                .unwrap_or_default();
            let halo = get(r, m::HALO_BW);
            let sweep = get(r, m::COMPUTE_BW);
            t.rows.push(vec![
                r.to_string(),
                node.clone(),
                cell(m::COMPUTE),
                cell(m::SYNC),
                cell(m::COMMUNICATE),
                halo.map_or("-".into(), med_range),
                halo.and_then(|f| f.param_f64("pair_gbps"))
                    .map_or("-".into(), fmt3),
                sweep.map_or("-".into(), med_range),
                sweep.map_or("-".into(), ratio_cell),
            ]);
            bars.bars.push(format!("rank {r}"));
            for (k, metric) in [m::COMPUTE, m::SYNC, m::COMMUNICATE].iter().enumerate() {
                bars.segments[k]
                    .1
                    .push(get(r, metric).map_or(0.0, |f| f.summary.median));
            }
        }
        t.notes.push(
            "halo GB/s: bytes a rank sends per iteration / its communicate time; pair GB/s: \
             the same bytes at the slowest side's one-way time of one face (a reference, not a \
             ceiling: a rank whose neighbours' faces arrived while it synchronized \
             communicates faster). sweep: updated cells x 8 B / compute time."
                .into(),
        );
        blocks.push(Block::Table(t));
        blocks.push(Block::Plot(Plot::Bars(bars)));
    }
    Some(Section {
        id: "laplace".into(),
        title: "Halo exchange (Jacobi/Laplacian)".into(),
        blocks,
    })
}
