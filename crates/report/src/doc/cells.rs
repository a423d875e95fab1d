//! Cell helpers shared by the sections and by the text exporter: dates, `median (min–max)`,
//! percentages, ceilings, plot points, node facts (CPU, caches, links, huge pages).

use accio_results::model::{distinct_param, CeilingSource, Figure, Report};
use accio_results::node::{CpuInfo, HugePages, Link};
use accio_results::num::{fmt3, fmt_small, median_range};
use accio_results::size::human_bytes;

use serde_json::Value;

use crate::svg::{BackendColors, Point};

use super::types::Table;

/// `2024-05-01 12:00:00 UTC` for seconds since the Unix epoch.
pub fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `median (min–max)` keeping small values readable.
pub fn med_range(f: &Figure) -> String {
    median_range(&f.summary)
}

/// A ratio as a percentage: `82%`, `3.5%`, `0.12%`, `0.0013%`.
pub fn percent(r: f64) -> String {
    let v = r * 100.0;
    if v.abs() >= 10.0 {
        format!("{v:.0}%")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}%")
    } else if v == 0.0 || !v.is_finite() {
        format!("{v}%")
    } else {
        // Two significant digits; one decimal fewer when rounding reaches the next decade
        // (0.0099996 reads 0.010, not 0.0100).
        let mut decimals = (-v.abs().log10()).ceil() as usize + 1;
        let rounded: f64 = format!("{v:.decimals$}").parse().unwrap_or(v);
        if rounded.abs() >= 10f64.powi(2 - decimals as i32) && decimals > 0 {
            decimals -= 1;
        }
        format!("{v:.decimals$}%")
    }
}

/// The figure's share of its ceiling ([`percent`]), or `-`. Never above 100%: a figure
/// past its ceiling within the noise reads `≈100%`, one past it beyond the noise (a
/// measurement error, see `docs/CEILINGS.md` and the warnings) reads `beyond!`.
pub fn ratio_cell(f: &Figure) -> String {
    match f.ceiling.as_ref().and_then(|c| c.ratio) {
        None => "-".into(),
        Some(_) if f.beyond_ceiling() => "beyond!".into(),
        Some(r) if r > 1.0 => "≈100%".into(),
        Some(r) => percent(r),
    }
}

/// The figure's share of its ceiling as a factor, never above 1 (`0.52x`; `≈1x` past it
/// within the noise, `beyond!` beyond it), or `-`: [`ratio_cell`] for tables that read
/// ratios as factors.
pub fn ratio_x(f: &Figure) -> String {
    match f.ceiling.as_ref().and_then(|c| c.ratio) {
        None => "-".into(),
        Some(_) if f.beyond_ceiling() => "beyond!".into(),
        Some(r) if r > 1.0 => "≈1x".into(),
        Some(r) => format!("{}x", fmt_small(r)),
    }
}

/// `memcpy 2M, 1 thread = 10.5 GB/s`, marked `(theoretical)` when it was not measured in
/// the run; without a ceiling, why the rule gives none (`none: bounded by the device`), or
/// `-` for a kind the rule does not know.
pub fn ceiling_cell(f: &Figure) -> String {
    f.ceiling.as_ref().map_or_else(
        || {
            accio_results::metric::no_ceiling_reason(f)
                .unwrap_or("-")
                .into()
        },
        |c| {
            format!(
                "{} = {} {}{}",
                c.name,
                fmt_small(c.value),
                f.unit,
                match c.source {
                    CeilingSource::Measured => "",
                    CeilingSource::Theoretical => " (theoretical)",
                }
            )
        },
    )
}

pub(super) fn u64_param(f: &Figure, key: &str) -> Option<u64> {
    f.params.get(key).and_then(Value::as_u64)
}

/// A figure of the fs bench proper: not one another bench measured as its own ceiling
/// (those carry `for`, e.g. the merge bench's `for = "merge ceiling"`).
pub fn is_fs_bench(f: &Figure) -> bool {
    f.bench == "fs" && !f.params.contains_key("for")
}

/// Whether `f` was measured for `bench` (its `for` parameter names it first).
pub(super) fn measured_for(f: &Figure, bench: &str) -> bool {
    f.param_str("for")
        .split_whitespace()
        .next()
        .is_some_and(|b| b == bench)
}

/// The colour of each backend of `report`, the same in every plot of its page.
pub(super) fn backend_colors(report: &Report) -> BackendColors {
    BackendColors::new(
        report
            .figures
            .iter()
            .filter_map(|f| f.params.get("backend").and_then(Value::as_str)),
    )
}

pub(super) fn has_matrix_params(f: &Figure) -> bool {
    f.params.contains_key("src") && f.params.contains_key("dst")
}

pub(super) fn point(f: &Figure, x: f64) -> Point {
    Point {
        x,
        y: f.summary.median,
        lo: f.summary.min,
        hi: f.summary.max,
        tip: {
            let mut t = format!("{}: {} {}", f.label(), med_range(f), f.unit);
            if f.ceiling.is_some() {
                t.push_str(&format!(", {} of {}", ratio_cell(f), ceiling_cell(f)));
            }
            t
        },
    }
}

pub(super) fn ceiling_point(f: &Figure, x: f64) -> Option<Point> {
    let c = f.ceiling.as_ref()?;
    Some(Point {
        x,
        y: c.value,
        lo: c.value,
        hi: c.value,
        tip: format!("ceiling of {}: {}", f.label(), ceiling_cell(f)),
    })
}

/// An empty table of figures with their ceilings: figure, median, min–max, unit, ceiling,
/// share of the ceiling (the headline table and every bench's figure list).
pub(crate) fn figure_table() -> Table {
    Table::new(
        &[
            "figure",
            "median",
            "min–max",
            "unit",
            "ceiling",
            "of ceiling",
        ],
        &["median", "min–max", "of ceiling"],
    )
}

/// Distinct `path` parameters of the fs bench's own figures, in the order first measured.
pub fn fs_paths(report: &Report) -> Vec<String> {
    distinct_param(report.figures.iter().filter(|f| is_fs_bench(f)), "path")
}

/// The model and its counts: `Xeon Gold 6338 (128 logical CPUs, 64 cores, 2 sockets)`.
pub fn cpu(info: &CpuInfo) -> String {
    let counts = match (info.physical_cores, info.sockets) {
        (Some(c), Some(s)) => format!(
            "{} logical CPUs, {c} cores, {s} socket{}",
            info.logical_cpus,
            if s == 1 { "" } else { "s" }
        ),
        _ => format!("{} logical CPUs", info.logical_cpus),
    };
    format!("{} ({counts})", info.model)
}

/// The CPU's caches, clock and notable ISA features, as `(row name, text)` pairs: the
/// facts that explain the steps of a memcpy curve. Rows whose facts are unknown are left
/// out.
pub fn cpu_details(c: &CpuInfo) -> Vec<(&'static str, String)> {
    let mut rows = Vec::new();
    if !c.caches.is_empty() {
        let caches: Vec<String> = c
            .caches
            .iter()
            .map(|k| {
                let kind = match k.kind.as_str() {
                    "Data" => "d",
                    "Instruction" => "i",
                    _ => "",
                };
                let shared = if k.shared_by > 1 {
                    format!(" (shared by {})", k.shared_by)
                } else {
                    String::new()
                };
                format!("L{}{kind} {}{shared}", k.level, human_bytes(k.size_bytes))
            })
            .collect();
        rows.push(("caches", caches.join(", ")));
    }
    if let Some(mhz) = c.mhz {
        rows.push(("clock", format!("{mhz:.0} MHz")));
    }
    if !c.flags.is_empty() {
        rows.push(("ISA", c.flags.join(" ")));
    }
    rows
}

/// Huge pages: the pool (`2 MiB pages: 0 in the pool, 0 free`) and the transparent mode;
/// `None` when neither is known (results of an older accio).
pub fn huge_pages(h: &HugePages) -> Option<String> {
    if h.size_bytes.is_none() && h.transparent.is_none() {
        return None;
    }
    let pool = match h.size_bytes {
        Some(s) => format!(
            "{} pages: {} in the pool, {} free",
            human_bytes(s),
            h.total,
            h.free
        ),
        None => "none".into(),
    };
    Some(match &h.transparent {
        Some(t) => format!("{pool}; transparent: {t}"),
        None => pool,
    })
}

/// `Gen4 x16 (16.0 GT/s, 128b/130b)`: generation, lanes, rate and line code.
pub fn link_name(l: &Link) -> String {
    let generation = l
        .generation
        .map_or_else(|| "PCIe".to_string(), |g| format!("Gen{g}"));
    format!(
        "{generation} x{} ({} GT/s, {})",
        l.width,
        fmt3(l.speed_gts),
        l.encoding.name()
    )
}

/// `Gen4 x16 (16.0 GT/s, 128b/130b) = 31.5 GB/s`.
pub fn link(l: &Link) -> String {
    format!("{} = {} GB/s", link_name(l), fmt3(l.gbps))
}
