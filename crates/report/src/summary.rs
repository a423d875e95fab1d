//! The headline figures: the few numbers that characterize a node, each beside its
//! ceiling. Shown first in every report and printed by `accio bench` at the end of a run.
//!
//! Picked from whatever the report holds: memcpy at the largest buffer (one thread and all
//! threads); per file-system path write and cold read at the most threads; per transport
//! backend the latency of the smallest message (8 B by default) and streaming and RMA
//! bandwidth at 2 MiB (or the size nearest to it); for every other bench (merge,
//! coalesce, ...) one figure of each metric picked by its parameters, never by its value
//! (the most producers, the layer's own mode, the usual pattern, else the first measured),
//! so that every run of a preset has the same rows; baselines (merge's naive alternative,
//! coalesce's large-message ceiling) are left out.

use accio_results::model::{Figure, Report};
use accio_results::num::fmt_small;
use accio_results::size::format_size;

use crate::doc::cells::{ceiling_cell, figure_table, is_fs_bench, med_range, ratio_cell};
use crate::doc::types::Table;

/// One headline: a name for the row and the figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Headline<'a> {
    /// What the row shows, e.g. `shm latency, 8 B`.
    pub what: String,
    /// The figure.
    pub figure: &'a Figure,
}

/// Most headline rows for one bench outside mem, fs and transport.
const PER_OTHER_BENCH: usize = 4;

fn u64_param(f: &Figure, key: &str) -> Option<u64> {
    f.params.get(key).and_then(|v| v.as_u64())
}

fn is_matrix(f: &Figure) -> bool {
    f.params.contains_key("src") && f.params.contains_key("dst")
}

/// How a headline picks the value of one parameter among a metric's figures.
enum Pick {
    /// The largest value: the scaling end (`producers`, `threads`).
    Max,
    /// The first of these values that a figure has (the layer's own mode, the usual
    /// pattern), else the first recorded.
    Prefer(&'static [&'static str]),
}

/// Parameters whose headline value is not simply the first recorded one.
const PICKS: &[(&str, Pick)] = &[
    ("producers", Pick::Max),
    ("threads", Pick::Max),
    ("placement", Pick::Prefer(&["processes"])),
    ("pattern", Pick::Prefer(&["random"])),
    ("mode", Pick::Prefer(&["cache", "aggregate"])),
];

/// One figure of a metric, by fixed rules on its parameters, never by its value: for each
/// identifying parameter in turn (backend first), the value [`PICKS`] names, else the value
/// of the first figure recorded. The same options give the same row in every run.
fn fixed<'a>(figs: &[&'a Figure]) -> Option<&'a Figure> {
    let mut left: Vec<&Figure> = figs.to_vec();
    let first = *left.first()?;
    let mut keys: Vec<String> = first
        .identifying()
        .iter()
        .map(|(k, _)| k.to_string())
        .collect();
    keys.sort_by_key(|k| (k != "backend", k.clone()));
    for k in keys {
        let values: Vec<String> = left.iter().map(|f| f.param_str(&k)).collect();
        let Some(v0) = values.first().cloned() else {
            break;
        };
        let pick = PICKS.iter().find(|(p, _)| *p == k).map(|(_, p)| p);
        let want = match pick {
            Some(Pick::Max) => left
                .iter()
                .filter_map(|f| f.param_u64(&k))
                .max()
                .map_or(v0, |m| m.to_string()),
            Some(Pick::Prefer(vs)) => vs
                .iter()
                .find(|v| values.iter().any(|x| x == *v))
                .map_or(v0, |v| v.to_string()),
            None => v0,
        };
        left.retain(|f| f.param_str(&k) == want);
    }
    left.last().copied()
}

/// The headline figures of `report`, in display order.
pub fn headlines(report: &Report) -> Vec<Headline<'_>> {
    let mut out = Vec::new();
    // Memory: the largest buffer, at one thread and at the most threads.
    let mem: Vec<&Figure> = report.select("mem", "memcpy").collect();
    if let Some(size) = mem.iter().filter_map(|f| u64_param(f, "size")).max() {
        let at: Vec<&&Figure> = mem
            .iter()
            .filter(|f| u64_param(f, "size") == Some(size))
            .collect();
        let mut threads: Vec<u64> = at.iter().filter_map(|f| u64_param(f, "threads")).collect();
        threads.sort_unstable();
        threads.dedup();
        let picks = match (threads.first(), threads.last()) {
            (Some(&a), Some(&b)) if a != b => vec![a, b],
            (Some(&a), _) => vec![a],
            _ => vec![],
        };
        for n in picks {
            if let Some(f) = at.iter().rev().find(|f| u64_param(f, "threads") == Some(n)) {
                out.push(Headline {
                    what: format!(
                        "memcpy {}, {n} thread{}",
                        format_size(size),
                        if n == 1 { "" } else { "s" }
                    ),
                    figure: f,
                });
            }
        }
    }
    // File systems: per path, write and cold read at the most threads measured (a fixed
    // row, whichever thread count happened to be fastest in this run).
    let mut paths: Vec<String> = Vec::new();
    for f in report.figures.iter().filter(|f| is_fs_bench(f)) {
        let p = f.param_str("path");
        if !paths.contains(&p) {
            paths.push(p);
        }
    }
    for p in &paths {
        for (metric, label) in [("write", "write"), ("cold-read", "cold read")] {
            let figs: Vec<&Figure> = report
                .select("fs", metric)
                .filter(|f| is_fs_bench(f) && &f.param_str("path") == p)
                .collect();
            if let Some(f) = fixed(&figs) {
                let n = u64_param(f, "threads").unwrap_or(1);
                let what = format!(
                    "fs {p} {label}, {n} thread{}",
                    if n == 1 { "" } else { "s" }
                );
                out.push(Headline { what, figure: f });
            }
        }
    }
    // Transports: per backend, small-message latency and 2 MiB bandwidth.
    let mut backends: Vec<String> = Vec::new();
    for f in report
        .figures
        .iter()
        .filter(|f| f.bench == "transport" && !is_matrix(f))
    {
        let b = f.param_str("backend");
        if !b.is_empty() && !backends.contains(&b) {
            backends.push(b);
        }
    }
    for b in &backends {
        let of = |m: &'static str| {
            report
                .select("transport", m)
                .filter(move |f| &f.param_str("backend") == b && !is_matrix(f))
                .filter(|f| u64_param(f, "size").is_some())
        };
        if let Some(f) = of("latency").min_by_key(|f| u64_param(f, "size")) {
            let s = u64_param(f, "size").unwrap_or(0);
            out.push(Headline {
                what: format!("{b} latency, {} B", format_size(s)),
                figure: f,
            });
        }
        for (m, label) in [("stream_bw", "stream"), ("rma_write_bw", "RMA write")] {
            // The size nearest to 2 MiB on a log scale.
            let target = (2u64 << 20) as f64;
            let pick = of(m).min_by(|x, y| {
                let d = |f: &Figure| {
                    (u64_param(f, "size").unwrap_or(1) as f64 / target)
                        .log2()
                        .abs()
                };
                d(x).total_cmp(&d(y))
            });
            if let Some(f) = pick {
                out.push(Headline {
                    what: format!(
                        "{b} {label}, {}",
                        format_size(u64_param(f, "size").unwrap_or(0))
                    ),
                    figure: f,
                });
            }
        }
    }
    // Every other bench: one fixed figure of each metric (the same parameters on every run
    // of a preset, so two runs can be compared row by row), except the metrics that are
    // only there to be read against (the naive alternative, a ceiling measured by the
    // bench): they stand beside their figures in the bench's own section.
    const BASELINES: &[&str] = &["naive", "large_msg_bw"];
    let mut others: Vec<&str> = Vec::new();
    for f in &report.figures {
        if !["mem", "fs", "transport"].contains(&f.bench.as_str())
            && !others.contains(&f.bench.as_str())
        {
            others.push(&f.bench);
        }
    }
    for bench in others {
        let mut metrics: Vec<&str> = Vec::new();
        for f in report.figures.iter().filter(|f| {
            f.bench == bench && !is_matrix(f) && !BASELINES.contains(&f.metric.as_str())
        }) {
            if !metrics.contains(&f.metric.as_str()) {
                metrics.push(&f.metric);
            }
        }
        for m in metrics.into_iter().take(PER_OTHER_BENCH) {
            let figs: Vec<&Figure> = report.select(bench, m).filter(|f| !is_matrix(f)).collect();
            if let Some(f) = fixed(&figs) {
                out.push(Headline {
                    what: f.label(),
                    figure: f,
                });
            }
        }
    }
    out
}

/// The headlines as a table.
pub fn table(heads: &[Headline<'_>]) -> Table {
    let mut t = figure_table();
    for h in heads {
        let f = h.figure;
        t.rows.push(vec![
            h.what.clone(),
            fmt_small(f.summary.median),
            format!("{}–{}", fmt_small(f.summary.min), fmt_small(f.summary.max)),
            f.unit.to_string(),
            ceiling_cell(f),
            ratio_cell(f),
        ]);
    }
    t.notes.push(
        "Ceilings were measured in the same run unless marked theoretical. Every figure, \
         with all its samples, is in the sections below and in the JSON."
            .into(),
    );
    t
}

/// The summary as plain text for a terminal: one line per headline, columns aligned.
pub fn text(report: &Report) -> String {
    text_fit(report, usize::MAX)
}

/// [`text`] within `width` columns: rows stacked where the table would be wider (see
/// [`crate::text::table::render_fit`]).
pub fn text_fit(report: &Report, width: usize) -> String {
    let heads = headlines(report);
    if heads.is_empty() {
        return "no figures were recorded\n".into();
    }
    let rows: Vec<Vec<String>> = heads
        .iter()
        .map(|h| {
            let f = h.figure;
            vec![
                h.what.clone(),
                format!("{} {}", med_range(f), f.unit),
                ceiling_cell(f),
                ratio_cell(f),
            ]
        })
        .collect();
    crate::text::table::render_fit(
        &["figure", "median (min–max)", "ceiling", "of ceiling"],
        &rows,
        width,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::model::{CeilingSource, Unit};

    fn fig(bench: &str, metric: &str, unit: Unit, v: f64) -> Figure {
        Figure::new(bench, metric, unit, vec![v * 0.9, v, v * 1.1]).unwrap()
    }

    #[test]
    fn other_benches_get_the_same_row_whatever_their_values() {
        let rates = |direct: f64, cache: f64| {
            let mut r = Report::new();
            for pattern in ["streaming", "random"] {
                for (mode, v) in [("direct", direct), ("cache", cache)] {
                    r.figures.push(
                        fig("coalesce", "item_rate", Unit::MopsPerSec, v)
                            .param("backend", "shm")
                            .param("pattern", pattern)
                            .param("mode", mode)
                            .param("item", 64u64),
                    );
                }
            }
            let h = headlines(&r);
            assert_eq!(h.len(), 1);
            h[0].what.clone()
        };
        // Which mode is faster does not change the row: the layer's own mode, the usual
        // pattern.
        let row = "coalesce shm item_rate pattern=random mode=cache item=64";
        assert_eq!(rates(10.0, 90.0), row);
        assert_eq!(rates(90.0, 10.0), row);
    }

    #[test]
    fn picks_largest_memcpy_best_fs_and_transport_endpoints() {
        let mut r = Report::new();
        for (s, t, v) in [(65536u64, 1, 30.0), (1 << 28, 1, 9.0), (1 << 28, 2, 14.0)] {
            r.figures.push(
                fig("mem", "memcpy", Unit::GBps, v)
                    .param("size", s)
                    .param("threads", t),
            );
        }
        for (t, v) in [(1, 2.0), (2, 3.5)] {
            r.figures.push(
                fig("fs", "write", Unit::GBps, v)
                    .param("path", "/dev/shm")
                    .param("threads", t)
                    .ceiling("memcpy 4M", 10.0, CeilingSource::Measured),
            );
        }
        for (s, v) in [(8u64, 0.4), (4096, 0.8)] {
            r.figures.push(
                fig("transport", "latency", Unit::Micros, v)
                    .param("backend", "shm")
                    .param("size", s),
            );
        }
        for (s, v) in [(512u64 << 10, 5.0), (2 << 20, 8.0), (8 << 20, 7.0)] {
            r.figures.push(
                fig("transport", "stream_bw", Unit::GBps, v)
                    .param("backend", "shm")
                    .param("size", s),
            );
        }
        r.figures
            .push(fig("merge", "throughput", Unit::GBps, 1.0).param("producers", 1));
        r.figures
            .push(fig("merge", "throughput", Unit::GBps, 2.0).param("producers", 4));
        let h = headlines(&r);
        let what: Vec<&str> = h.iter().map(|h| h.what.as_str()).collect();
        assert_eq!(
            what,
            [
                "memcpy 256M, 1 thread",
                "memcpy 256M, 2 threads",
                "fs /dev/shm write, 2 threads",
                "shm latency, 8 B",
                "shm stream, 2M",
                "merge throughput producers=4",
            ]
        );
        assert_eq!(h[1].figure.summary.median, 14.0);
        assert_eq!(h[4].figure.summary.median, 8.0);
        let text = text(&r);
        assert!(
            text.lines().any(|l| l
                == "fs /dev/shm write, 2 threads  3.50 (3.15–3.85) GB/s   memcpy 4M = 10.0 GB/s               35%"),
            "{text}"
        );
    }

    #[test]
    fn an_empty_report_says_so() {
        assert_eq!(text(&Report::new()), "no figures were recorded\n");
    }
}
