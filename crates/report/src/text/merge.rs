//! The merge figures: throughput beside the ceiling, where the merger's time went, the naive
//! alternative, and the merger's memory against its budget; `write` says how the bytes
//! reached the file (`direct`: producers wrote in place; `copy`: through the merger).

use accio_results::model::Report;
use accio_results::num::{fmt3, median_range};
use accio_results::size::format_size;

use super::table::render_fit;
use crate::doc::ratio_cell;

/// The merge figures of `report` as a table: throughput beside the ceiling, the share of
/// the time the merger thread spent writing (and its rate meanwhile), the naive
/// alternative, and the merger's peak RSS against its budget.
pub fn render_table(report: &Report) -> String {
    render_table_fit(report, usize::MAX)
}

/// [`render_table`] within `width` columns (rows stacked where it would be wider, see
/// [`render_fit`]).
pub fn render_table_fit(report: &Report, width: usize) -> String {
    let mut rows = Vec::new();
    for f in report.select("merge", "merge") {
        let c = f.ceiling.as_ref();
        let rss = f.param_u64("merger_peak_rss_bytes").unwrap_or(0);
        let budget = f.param_u64("budget_bytes").unwrap_or(0);
        let naive = f.param_f64("naive_gbps");
        rows.push(vec![
            f.param_str("path"),
            if f.param_str("sync") == "true" {
                "sync".into()
            } else {
                "-".into()
            },
            f.param_str("backend"),
            // Figures from before write modes copied.
            match f.param_str("write_mode").as_str() {
                "direct" => "direct".to_string(),
                _ => "copy".to_string(),
            },
            f.param_str("placement"),
            f.param_str("producers"),
            format!(
                "{}x{}",
                f.param_str("buffers"),
                format_size(f.param_u64("buffer_bytes").unwrap_or(0))
            ),
            median_range(&f.summary),
            c.map_or("-".into(), |c| fmt3(c.value)),
            ratio_cell(f),
            match (
                f.param_f64("merger_writing_share"),
                f.param_f64("merger_write_gbps"),
            ) {
                (Some(share), Some(rate)) => format!("{:.0}% at {}", share * 100.0, fmt3(rate)),
                _ => "-".into(),
            },
            naive.map_or("-".into(), fmt3),
            format!("{}", rss >> 20),
            format!("{}", budget >> 20),
        ]);
    }
    if rows.is_empty() {
        return String::new();
    }
    render_fit(
        &[
            "path",
            "sync",
            "backend",
            "write",
            "producers as",
            "P",
            "F x S",
            "GB/s",
            "ceiling",
            "of ceiling",
            "merger writing",
            "naive GB/s",
            "merger RSS MiB",
            "budget MiB",
        ],
        &rows,
        width,
    )
}
