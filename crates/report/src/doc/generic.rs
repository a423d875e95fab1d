//! The section of any other bench (its figures, plotted along one parameter) and the methods section.

use accio_results::model::{Figure, Report, Unit};
use accio_results::num::fmt_small;

use serde_json::Value;

use crate::svg::{LinePlot, Series, XScale};

use super::cells::{
    ceiling_cell, ceiling_point, figure_table, has_matrix_params, measured_for, point, ratio_cell,
};
use super::{Block, Plot, Section};

/// [Identifying](Figure::identifying) parameters that vary within a group of figures
/// (except `skip`), in key order: what tells the group's series apart.
fn varying<'a>(figs: &[&'a Figure], skip: &[&str]) -> Vec<&'a str> {
    let mut keys: Vec<&str> = Vec::new();
    for f in figs {
        for (k, v) in f.identifying() {
            if skip.contains(&k) || keys.contains(&k) {
                continue;
            }
            if figs.iter().any(|g| g.params.get(k) != Some(v)) {
                keys.push(k);
            }
        }
    }
    keys.sort_unstable();
    keys
}

/// Parameters plotted along x, first match wins (when it takes two or more values).
const X_PARAMS: &[&str] = &[
    "producers",
    "threads",
    "senders",
    "workers",
    "size",
    "item",
    "item_size",
    "batch",
    "footprint",
];

/// The metric a figure is plotted with: the merge bench's naive alternative shares the
/// merger's plot, so the two are read against each other and against the one ceiling.
fn plot_metric(f: &Figure) -> &str {
    if f.bench == "merge" && f.metric == "naive" {
        "merge"
    } else {
        &f.metric
    }
}

pub(super) fn generic_section(report: &Report, bench: &str) -> Section {
    let figs: Vec<&Figure> = report
        .figures
        .iter()
        .filter(|f| (f.bench == bench || measured_for(f, bench)) && !has_matrix_params(f))
        .collect();
    let mut blocks = Vec::new();
    // One plot per metric, unit and path (each file system has its own ceiling), against
    // the first sweep parameter found.
    let mut groups: Vec<(String, Unit, String)> = Vec::new();
    for f in &figs {
        let key = (plot_metric(f).to_string(), f.unit, f.param_str("path"));
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    for (gi, (metric, unit, path)) in groups.iter().enumerate() {
        let group: Vec<&Figure> = figs
            .iter()
            .copied()
            .filter(|f| plot_metric(f) == metric && f.unit == *unit && &f.param_str("path") == path)
            .collect();
        let Some(x) = X_PARAMS.iter().copied().find(|k| {
            let mut vals: Vec<f64> = group.iter().filter_map(|f| f.param_f64(k)).collect();
            vals.sort_by(f64::total_cmp);
            vals.dedup();
            vals.len() >= 2
        }) else {
            continue;
        };
        let keys = varying(&group, &[x, "path"]);
        let mut series: Vec<Series> = Vec::new();
        let mut ceilings: Vec<Series> = Vec::new();
        for f in &group {
            let Some(xv) = f.param_f64(x) else { continue };
            // Values only for strings (`shm threads`), `key=value` otherwise.
            let name = if f.metric != *metric {
                format!("{} (the alternative)", f.metric)
            } else if keys.is_empty() {
                metric.clone()
            } else {
                // A key the figure does not have (a direct write has no geometry) is left
                // out rather than shown empty.
                keys.iter()
                    .filter_map(|k| match f.params.get(*k)? {
                        Value::String(v) => Some(v.clone()),
                        _ => Some(format!("{k}={}", f.param_str(k))),
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let idx = match series.iter().position(|s| s.name == name) {
                Some(i) => i,
                None => {
                    series.push(Series {
                        name,
                        points: Vec::new(),
                        dashed: false,
                        color: series.len(),
                    });
                    series.len() - 1
                }
            };
            series[idx].points.push(point(f, xv));
            if let Some(p) = ceiling_point(f, xv) {
                let cname = format!("ceiling: {}", f.ceiling.as_ref().map_or("", |c| &c.name));
                match ceilings.iter_mut().find(|s| s.name == cname) {
                    Some(s) if s.points.iter().any(|q| q.x == xv) => {}
                    Some(s) => s.points.push(p),
                    None => ceilings.push(Series {
                        name: cname,
                        points: vec![p],
                        dashed: true,
                        color: idx,
                    }),
                }
            }
        }
        series.truncate(7);
        ceilings.truncate(3);
        if ceilings.len() == 1 {
            // One ceiling for every series: black, not the first series' colour.
            ceilings[0].color = 6;
        }
        series.extend(ceilings);
        let on = if path.is_empty() {
            String::new()
        } else {
            format!(" on {path}")
        };
        let bytes = ["size", "item_size", "item", "footprint"].contains(&x);
        let plot = LinePlot {
            id: format!("plot-{bench}-{gi}"),
            title: if metric == bench {
                format!("{bench} throughput vs {x}{on}")
            } else {
                format!("{bench} {metric} vs {x}{on}")
            },
            x_label: if bytes {
                format!("{x} (bytes)")
            } else {
                x.to_string()
            },
            y_label: unit.to_string(),
            x_scale: if bytes { XScale::Bytes } else { XScale::Log2 },
            series,
        };
        if plot.is_useful() {
            blocks.push(Block::Plot(Plot::Line(plot)));
        }
    }
    let mut t = figure_table();
    let prefix = format!("{bench} ");
    for f in &figs {
        let label = f.label();
        t.rows.push(vec![
            label.strip_prefix(&prefix).unwrap_or(&label).to_string(),
            fmt_small(f.summary.median),
            format!("{}–{}", fmt_small(f.summary.min), fmt_small(f.summary.max)),
            f.unit.to_string(),
            ceiling_cell(f),
            ratio_cell(f),
        ]);
    }
    blocks.push(Block::Table(t));
    Section {
        id: format!("bench-{bench}"),
        title: format!("{bench} bench"),
        blocks,
    }
}

pub(super) fn methods_section(report: &Report) -> Section {
    let mut items: Vec<String> = Vec::new();
    for f in &report.figures {
        let Some(m) = &f.method else { continue };
        let item = format!("{} {}: {m}", f.bench, f.metric);
        if !items.contains(&item) {
            items.push(item);
        }
    }
    let mut blocks = Vec::new();
    if !items.is_empty() {
        blocks.push(Block::List(items));
    }
    blocks.push(Block::Para(format!(
        "Every figure with its samples, parameters and ceiling is in the JSON results \
         ({} schema version {}, documented in docs/RESULTS.md); `accio report RESULTS.json` \
         renders this page again from it.",
        report.schema, report.version
    )));
    Section {
        id: "methods".into(),
        title: "Methods".into(),
        blocks,
    }
}
