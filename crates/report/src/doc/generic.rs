//! The section of any other bench (its figures, plotted along one parameter) and the methods section.

use accio_results::model::{Figure, Report, Unit, NUMERIC_IDENTIFIERS};
use accio_results::num::fmt_small;
use accio_results::size::format_size;

use serde_json::Value;

use crate::svg::{LinePlot, Point, Series, XScale, BLACK};

use super::cells::{
    backend_colors, ceiling_cell, ceiling_point, figure_table, has_matrix_params, measured_for,
    point, ratio_cell,
};
use super::{Block, Plot, Section};

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

/// Numeric parameters that configure a run rather than report on it (the record size of a
/// ceiling, the merger's slot size): with the identifying ones, what tells two
/// configurations apart.
const CONFIG_NUMBERS: &[&str] = &[
    "record_size",
    "file_size",
    "buffer_bytes",
    "slot_bytes",
    "budget_bytes",
    "iodepth",
];

/// Numeric parameters that are byte counts, labelled in the size notation (`2M`).
const BYTE_PARAMS: &[&str] = &[
    "size",
    "item",
    "item_size",
    "footprint",
    "record_size",
    "file_size",
    "buffer_bytes",
    "slot_bytes",
    "budget_bytes",
];

/// Parameters a series label names first, in this order (the rest follow by key).
const LABEL_ORDER: &[&str] = &[
    "backend",
    "for",
    "mode",
    "pattern",
    "placement",
    "write_mode",
    "transfer",
    "sync",
    "geometry",
];

/// A figure's configuration, in key order: every parameter that says what was measured or
/// how (strings, booleans, sweep numbers and configuration sizes), except `skip`. Unlike
/// [`Figure::identifying`] it keeps the parameters of how a run was set up (`for`,
/// `record_size`): two ceilings of one path measured in two merge configurations have the
/// same identity but not the same configuration, and must not share a line.
fn configuration<'a>(f: &'a Figure, skip: &[&str]) -> Vec<(&'a str, &'a Value)> {
    f.params
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .filter(|(k, v)| {
            !skip.contains(k)
                && match v {
                    Value::String(_) | Value::Bool(_) => true,
                    Value::Number(n) => {
                        n.is_u64()
                            && (NUMERIC_IDENTIFIERS.contains(k) || CONFIG_NUMBERS.contains(k))
                    }
                    _ => false,
                }
        })
        .collect()
}

/// `key=value`, or the value alone where it names itself (a backend, `direct`,
/// `merge ceiling`); byte counts in the size notation.
fn label_part(k: &str, v: &Value, bare: bool) -> String {
    match v {
        Value::String(s) if bare && k == "backend" => s.clone(),
        Value::String(s) if bare && s.chars().count() > 1 => s.clone(),
        Value::String(s) => format!("{k}={s}"),
        Value::Number(n) if BYTE_PARAMS.contains(&k) && n.is_u64() => {
            format!("{k}={}", format_size(n.as_u64().unwrap_or(0)))
        }
        v => format!("{k}={v}"),
    }
}

/// The value of `k` in a configuration.
fn config_value<'a>(c: &[(&str, &'a Value)], k: &str) -> Option<&'a Value> {
    c.iter().find(|(ck, _)| *ck == k).map(|(_, v)| *v)
}

/// Labels that tell the configurations `configs` apart: the values of the parameters
/// that vary among them, in [`LABEL_ORDER`], less those the others already tell apart
/// (dropped last-named first: the merger's `claim` follows from its write mode and need
/// not be named). Empty labels when there is only one configuration.
fn series_labels(configs: &[Vec<(&str, &Value)>]) -> Vec<String> {
    let mut keys: Vec<&str> = Vec::new();
    for c in configs {
        for (k, v) in c {
            if !keys.contains(k) && configs.iter().any(|o| config_value(o, k) != Some(*v)) {
                keys.push(k);
            }
        }
    }
    let rank = |k: &str| {
        LABEL_ORDER
            .iter()
            .position(|o| *o == k)
            .unwrap_or(LABEL_ORDER.len())
    };
    keys.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
    let distinct = |keys: &[&str]| {
        let tuples: Vec<Vec<Option<&Value>>> = configs
            .iter()
            .map(|c| keys.iter().map(|k| config_value(c, k)).collect())
            .collect();
        tuples
            .iter()
            .enumerate()
            .all(|(i, t)| tuples[..i].iter().all(|u| u != t))
    };
    // The last-named keys go first while the rest still tell every pair apart.
    for i in (0..keys.len()).rev() {
        let mut fewer = keys.clone();
        fewer.remove(i);
        if distinct(&fewer) {
            keys = fewer;
        }
    }
    let make = |bare: bool| -> Vec<String> {
        configs
            .iter()
            .map(|c| {
                keys.iter()
                    .filter_map(|k| config_value(c, k).map(|v| label_part(k, v, bare)))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    };
    let labels = make(true);
    // Bare values of two keys can read alike (`a=x` and `b=x`): then name every key.
    if labels
        .iter()
        .enumerate()
        .all(|(i, l)| !labels[..i].contains(l))
    {
        labels
    } else {
        make(false)
    }
}

/// The figures of one plot that share a configuration: one series.
struct Config<'a> {
    /// The metric and the configuration, as text: what the series is keyed by.
    key: String,
    /// The [`configuration`], less the x parameter and the path.
    params: Vec<(&'a str, &'a Value)>,
    /// Its figures, in report order.
    figs: Vec<&'a Figure>,
}

impl Config<'_> {
    fn backend(&self) -> Option<&str> {
        self.figs[0].params.get("backend").and_then(Value::as_str)
    }
}

/// The series of one plot: figures grouped by their whole configuration (less the x
/// parameter and the path, which the plot is of), each group labelled by what tells it
/// from the others, coloured by its backend, with the ceilings it is read against.
fn plot_series(report: &Report, group: &[&Figure], metric: &str, x: &str) -> Vec<Series> {
    let colors = backend_colors(report);
    // One entry per configuration: its figures, in report order.
    let mut configs: Vec<Config> = Vec::new();
    for f in group {
        if f.param_f64(x).is_none() {
            continue;
        }
        let params = configuration(f, &[x, "path"]);
        let key = format!(
            "{}/{}",
            f.metric,
            serde_json::to_string(&params).unwrap_or_default()
        );
        match configs.iter_mut().find(|c| c.key == key) {
            Some(c) => c.figs.push(f),
            None => configs.push(Config {
                key,
                params,
                figs: vec![f],
            }),
        }
    }
    // The plotted metric's series first, then the alternative's (the naive writer), each
    // labelled among its own kind.
    configs.sort_by_key(|c| c.figs[0].metric != metric);
    let mut names: Vec<String> = Vec::new();
    for own in [true, false] {
        let of: Vec<_> = configs
            .iter()
            .filter(|c| (c.figs[0].metric == metric) == own)
            .collect();
        let cs: Vec<Vec<(&str, &Value)>> = of.iter().map(|c| c.params.clone()).collect();
        for (c, label) in of.iter().zip(series_labels(&cs)) {
            let what = if own {
                metric.to_string()
            } else {
                format!("{} (the alternative)", c.figs[0].metric)
            };
            names.push(match (own, label.is_empty()) {
                (_, true) => what,
                (true, false) => label,
                (false, false) => format!("{what} {label}"),
            });
        }
    }
    // Colours: a backend's own; series without a backend (the naive writer) take a colour
    // no backend of the plot has, bluish green first (far from shm's blue and tcp's
    // vermillion; orange is near vermillion).
    let used: Vec<usize> = configs
        .iter()
        .filter_map(|c| c.backend().map(|b| colors.of(b)))
        .collect();
    let spare = [2, 3, 4, 5, 0, 1]
        .into_iter()
        .find(|c| !used.contains(c))
        .unwrap_or(BLACK);
    let mut series: Vec<Series> = Vec::new();
    for (i, (c, name)) in configs.iter().zip(names).enumerate() {
        let color = match c.backend() {
            Some(b) => colors.of(b),
            None if used.is_empty() => i % BLACK,
            None => spare,
        };
        let variant = series.iter().filter(|s| s.color == color).count();
        series.push(Series {
            name,
            points: c
                .figs
                .iter()
                .filter_map(|f| Some(point(f, f.param_f64(x)?)))
                .collect(),
            dashed: false,
            color,
            variant,
        });
    }
    series.extend(ceiling_series(&configs, &series, x));
    series
}

/// The ceilings of a plot's series: one dashed line per ceiling, shared by every series
/// read against it. Series share a line when their ceilings have one name and agree at
/// every x both have (a line measured at other x, as the coalescing patterns are, is
/// still one ceiling); a ceiling of that name with another value (measured again, another
/// configuration's) is a line of its own. A ceiling of every series is labelled with its
/// name; one of a backend's series with the backend too, one of some series with theirs.
fn ceiling_series(configs: &[Config], series: &[Series], x: &str) -> Vec<Series> {
    // (name, points, indices of the series read against it)
    let mut ceilings: Vec<(String, Vec<Point>, Vec<usize>)> = Vec::new();
    for (i, config) in configs.iter().enumerate() {
        let mut by_name: Vec<(String, Vec<Point>)> = Vec::new();
        for f in &config.figs {
            let (Some(c), Some(xv)) = (f.ceiling.as_ref(), f.param_f64(x)) else {
                continue;
            };
            let Some(p) = ceiling_point(f, xv) else {
                continue;
            };
            match by_name.iter_mut().find(|(n, _)| *n == c.name) {
                Some((_, pts)) if pts.iter().any(|q| q.x == xv) => {}
                Some((_, pts)) => pts.push(p),
                None => by_name.push((c.name.clone(), vec![p])),
            }
        }
        for (name, pts) in by_name {
            let agrees = |q: &[Point]| {
                pts.iter()
                    .all(|a| q.iter().all(|b| a.x != b.x || a.y == b.y))
            };
            match ceilings
                .iter_mut()
                .find(|(n, q, _)| *n == name && agrees(q))
            {
                Some((_, q, of)) => {
                    of.push(i);
                    for p in pts {
                        if !q.iter().any(|b| b.x == p.x) {
                            q.push(p);
                        }
                    }
                }
                None => ceilings.push((name, pts, vec![i])),
            }
        }
    }
    let read: Vec<usize> = (0..series.len())
        .filter(|i| ceilings.iter().any(|(_, _, of)| of.contains(i)))
        .collect();
    let mut out: Vec<Series> = Vec::new();
    for (name, mut points, of) in ceilings {
        points.sort_by(|a, b| a.x.total_cmp(&b.x));
        let backend = |i: usize| configs[i].backend();
        // Whose ceiling it is: every series' (of those read against one), one backend's,
        // or some series'.
        let whose = match backend(of[0]) {
            _ if of.len() == read.len() => None,
            Some(b)
                if read
                    .iter()
                    .all(|i| (backend(*i) == Some(b)) == of.contains(i)) =>
            {
                Some(b.to_string())
            }
            _ => Some(
                of.iter()
                    .map(|&i| series[i].name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        };
        let label = match whose {
            None => format!("ceiling: {name}"),
            Some(w) => format!("ceiling of {w}: {name}"),
        };
        // In its series' colour when they have one, black when it is everyone's.
        let color = if of.len() < read.len()
            && of.iter().all(|&i| series[i].color == series[of[0]].color)
        {
            series[of[0]].color
        } else {
            BLACK
        };
        let variant = out.iter().filter(|s| s.color == color).count();
        out.push(Series {
            name: label,
            points,
            dashed: true,
            color,
            variant,
        });
    }
    out
}

/// The title of a plot of `bench`'s section: `merge throughput vs producers on /tmp`, or
/// for figures another bench measured for it, what they are and what for (`fs write vs
/// threads on /dev/shm (merge ceiling)`).
fn plot_title(bench: &str, group: &[&Figure], metric: &str, x: &str, path: &str) -> String {
    let on = if path.is_empty() {
        String::new()
    } else {
        format!(" on {path}")
    };
    let first = group[0];
    if first.bench != bench {
        let purpose = first.param_str("for");
        let purpose = purpose.split(',').next().unwrap_or_default();
        return format!("{} {metric} vs {x}{on} ({purpose})", first.bench);
    }
    if metric == bench {
        format!("{bench} throughput vs {x}{on}")
    } else {
        format!("{bench} {metric} vs {x}{on}")
    }
}

/// The figure column of a bench's table: each figure's [label](Figure::label), less the
/// bench's name; where two figures would read alike (a ceiling measured again), with what
/// tells them apart in parentheses.
fn row_labels(figs: &[&Figure], bench: &str) -> Vec<String> {
    let prefix = format!("{bench} ");
    let mut labels: Vec<String> = figs
        .iter()
        .map(|f| {
            let l = f.label();
            l.strip_prefix(&prefix).unwrap_or(&l).to_string()
        })
        .collect();
    let plain = labels.clone();
    for (i, l) in plain.iter().enumerate() {
        let same: Vec<usize> = (0..plain.len()).filter(|&j| plain[j] == *l).collect();
        if same.len() < 2 || same[0] != i {
            continue;
        }
        let configs: Vec<Vec<(&str, &Value)>> =
            same.iter().map(|&j| configuration(figs[j], &[])).collect();
        for (&j, extra) in same.iter().zip(series_labels(&configs)) {
            if !extra.is_empty() {
                labels[j] = format!("{} ({extra})", plain[j]);
            }
        }
    }
    labels
}

pub(super) fn generic_section(report: &Report, bench: &str) -> Section {
    let figs: Vec<&Figure> = report
        .figures
        .iter()
        .filter(|f| (f.bench == bench || measured_for(f, bench)) && !has_matrix_params(f))
        .collect();
    let mut blocks = Vec::new();
    // One plot per bench, metric, unit and path (each file system has its own ceiling),
    // against the first sweep parameter found.
    let mut groups: Vec<(String, String, Unit, String)> = Vec::new();
    for f in &figs {
        let key = (
            f.bench.clone(),
            plot_metric(f).to_string(),
            f.unit,
            f.param_str("path"),
        );
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    for (gi, (gbench, metric, unit, path)) in groups.iter().enumerate() {
        let group: Vec<&Figure> = figs
            .iter()
            .copied()
            .filter(|f| {
                &f.bench == gbench
                    && plot_metric(f) == metric
                    && f.unit == *unit
                    && &f.param_str("path") == path
            })
            .collect();
        let Some(x) = X_PARAMS.iter().copied().find(|k| {
            let mut vals: Vec<f64> = group.iter().filter_map(|f| f.param_f64(k)).collect();
            vals.sort_by(f64::total_cmp);
            vals.dedup();
            vals.len() >= 2
        }) else {
            continue;
        };
        let bytes = ["size", "item_size", "item", "footprint"].contains(&x);
        let plot = LinePlot {
            id: format!("plot-{bench}-{gi}"),
            title: plot_title(bench, &group, metric, x, path),
            x_label: if bytes {
                format!("{x} (bytes)")
            } else {
                x.to_string()
            },
            y_label: unit.to_string(),
            x_scale: if bytes { XScale::Bytes } else { XScale::Log2 },
            series: plot_series(report, &group, metric, x),
        };
        if plot.is_useful() {
            blocks.push(Block::Plot(Plot::Line(plot)));
        }
    }
    let mut t = figure_table();
    for (f, label) in figs.iter().zip(row_labels(&figs, bench)) {
        t.rows.push(vec![
            label,
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
