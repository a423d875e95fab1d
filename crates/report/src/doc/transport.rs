//! The transport section (bandwidth and latency by message size) and the src×dst matrix section.

use accio_results::metric::transport::{SEED_004_CONNECT_US, SEED_004_REGISTER_US};
use accio_results::model::{distinct_param, Figure, Report};
use accio_results::num::{fmt3, fmt_small};
use accio_results::size::format_size;

use serde_json::Value;

use crate::svg::{Heatmap, LinePlot, Point, Series, XScale};

use super::cells::{
    backend_colors, ceiling_point, has_matrix_params, med_range, point, ratio_cell, u64_param,
};
use super::{Block, Plot, Section, Table};

/// The transport section's title (the summary names it where it points at its plots).
pub(super) const SECTION_TITLE: &str = "Transports";

fn transport_backends(report: &Report) -> Vec<String> {
    distinct_param(
        report
            .figures
            .iter()
            .filter(|f| f.bench == "transport" && !has_matrix_params(f)),
        "backend",
    )
}

/// Transport figures of one backend and metric that have a size, by size.
fn transport_figures<'a>(report: &'a Report, backend: &str, metric: &str) -> Vec<&'a Figure> {
    let mut v: Vec<&Figure> = report
        .figures
        .iter()
        .filter(|f| f.bench == "transport" && f.metric == metric)
        .filter(|f| f.param_str("backend") == backend && !has_matrix_params(f))
        .filter(|f| u64_param(f, "size").is_some())
        .collect();
    v.sort_by_key(|f| u64_param(f, "size"));
    v
}

/// What a latency floor is, without its numbers: `cache-line hop` of `cache-line hop
/// 0.263 us + one memcpy of 8` (the words before the first number).
fn floor_kind(name: &str) -> String {
    let words: Vec<&str> = name
        .split(' ')
        .take_while(|w| !w.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    words.join(" ")
}

/// Bandwidth and latency against message size, one line per backend (and per streaming
/// and RMA), the memcpy ceiling (or, for latency, the one-copy floor) dashed: each
/// backend in its own colour, streaming and RMA told apart by marker.
pub(super) fn transport_plots(report: &Report) -> Vec<LinePlot> {
    let backends = transport_backends(report);
    let colors = backend_colors(report);
    let of = |b: &str, m: &str| transport_figures(report, b, m);
    let at_size = |f: &Figure| point(f, u64_param(f, "size").unwrap_or(0) as f64);
    let mut plots = Vec::new();
    // Bandwidth vs size: stream and RMA per backend, the memcpy ceiling dashed.
    let mut bw = Vec::new();
    let mut lat = Vec::new();
    for b in &backends {
        let color = colors.of(b);
        for (variant, (m, what)) in [("stream_bw", "stream"), ("rma_write_bw", "RMA write")]
            .into_iter()
            .enumerate()
        {
            let figs = of(b, m);
            if figs.is_empty() {
                continue;
            }
            bw.push(Series {
                name: format!("{b} {what}"),
                points: figs.iter().map(|f| at_size(f)).collect(),
                dashed: false,
                color,
                variant,
            });
        }
        let mem = of(b, "memcpy");
        if !mem.is_empty() {
            bw.push(Series {
                name: format!("ceiling: memcpy of the same size, 1 thread ({b} run)"),
                points: mem.iter().map(|f| at_size(f)).collect(),
                dashed: true,
                color,
                variant: 0,
            });
        }
        let l = of(b, "latency");
        if !l.is_empty() {
            lat.push(Series {
                name: format!("{b} latency"),
                points: l.iter().map(|f| at_size(f)).collect(),
                dashed: false,
                color,
                variant: 0,
            });
            let floor: Vec<Point> = l
                .iter()
                .filter_map(|f| ceiling_point(f, u64_param(f, "size").unwrap_or(0) as f64))
                .collect();
            let kind = l
                .iter()
                .find_map(|f| f.ceiling.as_ref())
                .map_or(String::new(), |c| floor_kind(&c.name));
            if !floor.is_empty() {
                lat.push(Series {
                    name: if kind.is_empty() {
                        format!("floor: one memcpy ({b})")
                    } else {
                        format!("floor: {kind} + one memcpy ({b})")
                    },
                    points: floor,
                    dashed: true,
                    color,
                    variant: 0,
                });
            }
        }
    }
    for (id, title, y, series) in [
        ("plot-transport-bw", "Bandwidth vs message size", "GB/s", bw),
        (
            "plot-transport-lat",
            "One-way latency vs message size",
            "latency (us)",
            lat,
        ),
    ] {
        let plot = LinePlot {
            id: id.into(),
            title: title.into(),
            x_label: "message size (bytes)".into(),
            y_label: y.into(),
            x_scale: XScale::Bytes,
            series,
        };
        if plot.is_useful() {
            plots.push(plot);
        }
    }
    plots
}

pub(super) fn transport_section(report: &Report) -> Option<Section> {
    let backends = transport_backends(report);
    if backends.is_empty() {
        return None;
    }
    let of = |b: &str, m: &str| transport_figures(report, b, m);
    let mut blocks: Vec<Block> = transport_plots(report)
        .into_iter()
        .map(|p| Block::Plot(Plot::Line(p)))
        .collect();
    for b in &backends {
        let mut sizes: Vec<u64> = ["latency", "stream_bw", "rma_write_bw"]
            .iter()
            .flat_map(|m| of(b, m))
            .filter_map(|f| u64_param(f, "size"))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        if !sizes.is_empty() {
            blocks.push(Block::Heading(b.clone()));
            let mut t = Table::new(
                &[
                    "size",
                    "latency us",
                    "stream GB/s",
                    "of memcpy",
                    "RMA write GB/s",
                    "of memcpy ",
                    "memcpy GB/s",
                ],
                &[
                    "size",
                    "latency us",
                    "stream GB/s",
                    "of memcpy",
                    "RMA write GB/s",
                    "of memcpy ",
                    "memcpy GB/s",
                ],
            );
            let find = |m: &str, s: u64| {
                of(b, m)
                    .into_iter()
                    .find(|f| u64_param(f, "size") == Some(s))
            };
            for s in sizes {
                let cell = |f: Option<&Figure>| f.map_or("-".into(), med_range);
                let ratio = |f: Option<&Figure>| f.map_or("-".into(), ratio_cell);
                let (stream, rma) = (find("stream_bw", s), find("rma_write_bw", s));
                t.rows.push(vec![
                    format_size(s),
                    cell(find("latency", s)),
                    cell(stream),
                    ratio(stream),
                    cell(rma),
                    ratio(rma),
                    cell(find("memcpy", s)),
                ]);
            }
            t.notes.push(
                "Median (min–max). Latency is one-way (half the round trip); bandwidths are \
                 read against single-thread memcpy of the same size, measured just before."
                    .into(),
            );
            blocks.push(Block::Table(t));
        }
    }
    // Setup costs.
    let mut t = Table::new(
        &["backend", "what", "size", "us", "SCIF us (Monnard 2015)"],
        &["size", "us", "SCIF us (Monnard 2015)"],
    );
    for b in &backends {
        for f in report
            .select("transport", "connect")
            .filter(|f| &f.param_str("backend") == b)
        {
            t.rows.push(vec![
                b.clone(),
                "connect".into(),
                "-".into(),
                med_range(f),
                format!(
                    "{} (sockets {})",
                    fmt3(SEED_004_CONNECT_US.0),
                    fmt3(SEED_004_CONNECT_US.1)
                ),
            ]);
        }
        for m in ["register", "unregister"] {
            for f in of(b, m) {
                let s = u64_param(f, "size").unwrap_or(0);
                let seed = if m == "register" {
                    SEED_004_REGISTER_US
                        .iter()
                        .find(|(z, _)| *z == s)
                        .map_or("-".into(), |(_, us)| fmt3(*us))
                } else {
                    "-".into()
                };
                t.rows.push(vec![
                    b.clone(),
                    m.into(),
                    format_size(s),
                    med_range(f),
                    seed,
                ]);
            }
        }
    }
    if !t.rows.is_empty() {
        blocks.push(Block::Heading("Connection and registration".into()));
        t.notes.push(
            "SCIF over PCIe on a Xeon Phi, as measured in R. Monnard, \"Concurrent I/O from Xeon Phi \
             accelerator cards\" (2015): a reference point, not a ceiling."
                .into(),
        );
        blocks.push(Block::Table(t));
    }
    Some(Section {
        id: "transport".into(),
        title: SECTION_TITLE.into(),
        blocks,
    })
}

/// Groups of figures that form a matrix: same bench, metric and other parameters, over
/// (`src`, `dst`) pairs.
pub(super) fn matrices(report: &Report) -> Vec<(String, Vec<&Figure>)> {
    let mut groups: Vec<(String, Vec<&Figure>)> = Vec::new();
    for f in report.figures.iter().filter(|f| has_matrix_params(f)) {
        let mut key = format!("{} {}", f.bench, f.metric);
        for (k, v) in &f.params {
            if k != "src" && k != "dst" {
                let v = match (k.as_str(), v) {
                    ("size", Value::Number(n)) => n.as_u64().map_or(n.to_string(), format_size),
                    (_, Value::String(s)) => s.clone(),
                    (_, v) => v.to_string(),
                };
                key.push_str(&format!(" {k}={v}"));
            }
        }
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(f),
            None => groups.push((key, vec![f])),
        }
    }
    groups
}

pub(super) fn matrix_section(report: &Report) -> Option<Section> {
    let groups = matrices(report);
    if groups.is_empty() {
        return None;
    }
    let mut blocks = vec![Block::Para(
        "Ping-pong between every pair of endpoints, as the Intel MPI PingPong \
         matrices of the Robin and Helios clusters (CPUs and Xeon Phi coprocessors) are laid out: rows are the sending endpoint, columns the \
         receiving one."
            .into(),
    )];
    for (gi, (key, figs)) in groups.iter().enumerate() {
        let mut labels: Vec<String> = Vec::new();
        for f in figs {
            for k in ["src", "dst"] {
                let l = f.param_str(k);
                if !labels.contains(&l) {
                    labels.push(l);
                }
            }
        }
        let cell = |a: &str, b: &str| {
            figs.iter()
                .rev()
                .find(|f| f.param_str("src") == a && f.param_str("dst") == b)
        };
        let unit = figs[0].unit;
        blocks.push(Block::Heading(format!("{key} ({unit})")));
        if labels.len() > 2 {
            blocks.push(Block::Plot(Plot::Heatmap(Heatmap {
                id: format!("plot-matrix-{gi}"),
                title: format!("{key} ({unit})"),
                cells: labels
                    .iter()
                    .map(|a| {
                        labels
                            .iter()
                            .map(|b| cell(a, b).map(|f| f.summary.median))
                            .collect()
                    })
                    .collect(),
                labels: labels.clone(),
                unit: unit.to_string(),
                higher_is_better: figs[0].higher_is_better(),
            })));
        }
        let mut headers = vec![format!("from \\ to ({unit})")];
        headers.extend(labels.iter().cloned());
        let h: Vec<&str> = headers.iter().map(String::as_str).collect();
        let mut t = Table::new(&h, &h[1..]);
        for a in &labels {
            let mut row = vec![a.clone()];
            for b in &labels {
                row.push(cell(a, b).map_or("-".into(), |f| fmt_small(f.summary.median)));
            }
            t.rows.push(row);
        }
        blocks.push(Block::Table(t));
    }
    Some(Section {
        id: "matrix".into(),
        title: "Ping-pong matrices".into(),
        blocks,
    })
}
