//! The GPU copy table (`accio bench device`): one row per GPU and size, one column per
//! copy, each cell the median GB/s with its share of the ceiling; latencies and ceilings
//! in the notes.

use accio_results::metric::device as names;
use accio_results::model::{Figure, Report};
use accio_results::num::fmt3;
use accio_results::size::format_size;

use super::table::table_fit;
use crate::doc::Table;

/// The columns: metric, `memory` parameter, `backend` parameter (empty for copies
/// without one), header.
const COLUMNS: [(&str, &str, &str, &str); 11] = [
    (names::H2D, "pinned", "", "h2d pinned"),
    (names::D2H, "pinned", "", "d2h pinned"),
    (names::H2D, "pageable", "", "h2d pageable"),
    (names::D2H, "pageable", "", "d2h pageable"),
    (names::BIDIR, "pinned", "", "both ways"),
    (names::D2D, "device", "", "d2d"),
    (names::D2D_IPC, "device", "", "d2d ipc"),
    (names::WINDOW_D2D, "device", "shm", "window d2d shm"),
    (names::WINDOW_H2D, "host", "shm", "window h2d shm"),
    (names::WINDOW_D2D, "device", "tcp", "window d2d tcp"),
    (names::WINDOW_H2D, "host", "tcp", "window h2d tcp"),
];

/// `median (share of the ceiling)`, or the median alone without a ceiling.
fn cell(f: &Figure) -> String {
    match f.ceiling.as_ref().and_then(|c| c.ratio) {
        Some(r) => format!("{} ({:.0}%)", fmt3(f.summary.median), r * 100.0),
        None => fmt3(f.summary.median),
    }
}

/// The `device` figures as a table (see the module docs); `None` without any.
pub fn device_table(report: &Report) -> Option<Table> {
    let figs: Vec<&Figure> = report
        .figures
        .iter()
        .filter(|f| f.bench == names::BENCH)
        .collect();
    if figs.is_empty() {
        return None;
    }
    let mut gpus: Vec<String> = figs.iter().map(|f| f.param_str("gpu")).collect();
    gpus.dedup();
    let mut headers = vec!["gpu", "size"];
    headers.extend(COLUMNS.iter().map(|c| c.3));
    let numeric: Vec<&str> = headers[1..].to_vec();
    let mut t = Table::new(&headers, &numeric);
    for gpu in &gpus {
        let mine: Vec<&&Figure> = figs.iter().filter(|f| &f.param_str("gpu") == gpu).collect();
        let mut sizes: Vec<u64> = mine
            .iter()
            .filter(|f| f.unit == accio_results::model::Unit::GBps)
            .filter_map(|f| f.param_u64("size"))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        for s in sizes {
            let mut row = vec![gpu.clone(), format_size(s)];
            for (metric, memory, backend, _) in COLUMNS {
                row.push(
                    mine.iter()
                        .find(|f| {
                            f.metric == metric
                                && f.param_str("memory") == memory
                                && f.param_str("backend") == backend
                                && f.param_u64("size") == Some(s)
                        })
                        .map_or_else(|| "-".into(), |f| cell(f)),
                );
            }
            t.rows.push(row);
        }
        let mut ceilings: Vec<String> = Vec::new();
        for f in &mine {
            if let Some(c) = &f.ceiling {
                let line = format!("{} GB/s {}", fmt3(c.value), c.name);
                if !ceilings.contains(&line) {
                    ceilings.push(line);
                }
            }
        }
        let lat = |m: &str| {
            mine.iter()
                .find(|f| f.metric == m)
                .map(|f| format!("{} us", fmt3(f.summary.median)))
        };
        let name = mine
            .first()
            .map(|f| f.param_str("gpu_name"))
            .unwrap_or_default();
        t.notes.push(format!(
            "{gpu} {name}: latency h2d {}, d2h {} (8 B copy + stream synchronize), flag one \
             way {} (mapped pinned memory); ceilings: {}",
            lat(names::LATENCY_H2D).unwrap_or_else(|| "-".into()),
            lat(names::LATENCY_D2H).unwrap_or_else(|| "-".into()),
            lat(names::LATENCY_FLAG).unwrap_or_else(|| "-".into()),
            if ceilings.is_empty() {
                "none known".into()
            } else {
                ceilings.join("; ")
            }
        ));
    }
    t.notes.push(
        "GB/s copied (both ways: bytes of both directions), median of the passes; in \
         parentheses the share of the ceiling (the PCIe link, or the device memory's copy rate)"
            .into(),
    );
    Some(t)
}

/// [`device_table`] rendered within `width` columns; empty without `device` figures.
pub fn device_table_fit(report: &Report, width: usize) -> String {
    device_table(report).map_or_else(String::new, |t| table_fit(&t, width))
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::model::{CeilingSource, Unit};

    #[test]
    fn rows_are_sizes_and_cells_carry_the_share_of_the_ceiling() {
        let mut r = Report::new();
        let fig = |metric: &str, memory: &str, size: u64, v: f64| {
            Figure::new("device", metric, Unit::GBps, vec![v])
                .unwrap()
                .param("gpu", "0000:3b:00.0")
                .param("gpu_name", "NVIDIA H200")
                .param("memory", memory)
                .param("size", size)
        };
        r.figures
            .push(fig("h2d", "pinned", 512 << 20, 50.0).ceiling(
                "PCIe 5.0 x16 theoretical",
                63.0,
                CeilingSource::Theoretical,
            ));
        r.figures.push(fig("d2d", "device", 4096, 1.5));
        // Window figures fill the column of their transport only.
        r.figures.push(
            fig("window_d2d", "device", 512 << 20, 1800.0)
                .param("backend", "tcp")
                .ceiling(
                    "device→device copy in one process, same run",
                    2000.0,
                    CeilingSource::Measured,
                ),
        );
        r.figures.push(
            Figure::new("device", "latency_h2d", Unit::Micros, vec![2.5])
                .unwrap()
                .param("gpu", "0000:3b:00.0")
                .param("size", 8u64),
        );
        let text = device_table_fit(&r, usize::MAX);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("gpu"), "{text}");
        assert!(
            lines[2].contains("  4K") && lines[2].contains("1.50"),
            "{text}"
        );
        assert!(
            lines[3].contains("512M") && lines[3].contains("50.0 (79%)"),
            "{text}"
        );
        let header: Vec<&str> = lines[0].split("  ").filter(|c| !c.is_empty()).collect();
        let row: Vec<&str> = lines[3].split("  ").filter(|c| !c.is_empty()).collect();
        let at = header
            .iter()
            .position(|h| h.trim() == "window d2d tcp")
            .unwrap();
        assert_eq!(row[at].trim(), "1800 (90%)", "{text}");
        let shm = header
            .iter()
            .position(|h| h.trim() == "window d2d shm")
            .unwrap();
        assert_eq!(row[shm].trim(), "-", "{text}");
        assert!(text.contains("latency h2d 2.50 us"), "{text}");
        assert!(
            text.contains("63.0 GB/s PCIe 5.0 x16 theoretical"),
            "{text}"
        );
        assert!(device_table(&Report::new()).is_none());
    }
}
