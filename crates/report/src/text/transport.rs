//! Text rendering of transport figures: one table per backend, the connection and
//! registration lines, and the one-line form used for progress.
//!
//! Everything here reads a [`Report`] (or one [`Figure`]), never the measurements
//! themselves, so a table can be rebuilt from any saved JSON document.

use accio_results::hazard::{Hazard, HazardKind};
use accio_results::model::{Figure, Report, Unit};
use accio_results::num::{fmt3, median_range};
use accio_results::size::format_size;

use super::table::render_fit;
use crate::doc::ratio_x;

use accio_results::metric::transport::{
    self as metric, BENCH, SEED_004_CONNECT_US, SEED_004_REGISTER_US,
};

fn size_of(f: &Figure) -> Option<u64> {
    f.params.get("size").and_then(|v| v.as_u64())
}

/// One line for progress output: `shm stream_bw 2M: 9.81 GB/s (9.5–10.2), 0.82x memcpy 2M, 1 thread`.
pub fn describe(f: &Figure) -> String {
    let mut who = Vec::new();
    let backend = f.param_str("backend");
    if !backend.is_empty() {
        who.push(backend);
    }
    who.push(f.metric.clone());
    if let Some(s) = size_of(f) {
        who.push(format_size(s));
    }
    let mut line = format!("{}: {} {}", who.join(" "), median_range(&f.summary), f.unit);
    if let Some(c) = &f.ceiling {
        if c.ratio.is_some() {
            line.push_str(&format!(", {} {}", ratio_x(f), c.name));
        }
    }
    line
}

/// The transport bench's rule for the hazards a figure shows, as advice for the reader
/// (the post-run analysis, [`crate::warnings`], applies it to transport figures): a bandwidth above its
/// memcpy ceiling, or (for the per-size figures) samples spread wider than half the median.
/// Connection and registration samples are not judged by spread: every registration is cold
/// by design, so a slow first touch now and then is part of what they measure.
pub fn hazards(f: &Figure) -> Vec<Hazard> {
    let mut w = Vec::new();
    let what = describe(f);
    if let Some(c) = &f.ceiling {
        if matches!(f.unit, Unit::GBps) && c.ratio.is_some_and(|r| r > 1.1) {
            let text = format!(
                "{what}: above its ceiling ({}); the ceiling's core was probably busy when it \
                 was measured — rerun on a quiet machine",
                c.name
            );
            w.push(Hazard::new(HazardKind::AboveCeiling, BENCH, text).about([f]));
        }
    }
    let steady = [
        metric::LATENCY,
        metric::STREAM_BW,
        metric::RMA_WRITE_BW,
        metric::MEMCPY,
    ]
    .contains(&f.metric.as_str());
    let spread = f.summary.spread();
    if steady && f.summary.n >= 3 && spread > 0.5 {
        let text = format!(
            "{what}: noisy, (max-min)/median = {}; rerun when the machine is quiet or with \
             more --reps",
            fmt3(spread)
        );
        w.push(Hazard::new(HazardKind::Noisy, BENCH, text).about([f]));
    }
    w
}

fn find<'a>(r: &'a Report, m: &'a str, backend: Option<&str>, size: u64) -> Option<&'a Figure> {
    r.select(BENCH, m).find(|f| {
        size_of(f) == Some(size)
            && match backend {
                Some(b) => f.param_str("backend") == b,
                None => true,
            }
    })
}

fn cell(f: Option<&Figure>) -> String {
    f.map_or_else(|| "-".to_string(), |f| median_range(&f.summary))
}

fn ratio_cell(f: Option<&Figure>) -> String {
    f.map_or_else(|| "-".to_string(), ratio_x)
}

/// Backends with transport figures, in the order they were measured.
fn backends(r: &Report) -> Vec<String> {
    accio_results::model::distinct_param(r.figures.iter().filter(|f| f.bench == BENCH), "backend")
}

/// Renders every transport figure of `report`: per backend a table by message size, the
/// connection time, and a registration table beside the SCIF figures of Monnard, "Concurrent I/O from Xeon Phi accelerator
/// cards" (2015).
pub fn render_tables(report: &Report) -> String {
    render_tables_fit(report, usize::MAX)
}

/// [`render_tables`] within `width` columns (see [`render_fit`]).
pub fn render_tables_fit(report: &Report, width: usize) -> String {
    let mut out = String::new();
    for b in backends(report) {
        let b = b.as_str();
        let mut sizes: Vec<u64> = Vec::new();
        for m in [metric::LATENCY, metric::STREAM_BW, metric::RMA_WRITE_BW] {
            for f in report.select(BENCH, m) {
                if let Some(s) = size_of(f).filter(|_| f.param_str("backend") == b) {
                    if !sizes.contains(&s) {
                        sizes.push(s);
                    }
                }
            }
        }
        sizes.sort_unstable();
        if !sizes.is_empty() {
            let rows: Vec<Vec<String>> = sizes
                .iter()
                .map(|&s| {
                    let stream = find(report, metric::STREAM_BW, Some(b), s);
                    let rma = find(report, metric::RMA_WRITE_BW, Some(b), s);
                    vec![
                        format_size(s),
                        cell(find(report, metric::LATENCY, Some(b), s)),
                        cell(stream),
                        ratio_cell(stream),
                        cell(rma),
                        ratio_cell(rma),
                        cell(
                            find(report, metric::MEMCPY, Some(b), s)
                                .or_else(|| find(report, metric::MEMCPY, None, s)),
                        ),
                    ]
                })
                .collect();
            out.push_str(&format!(
                "{b}: median (min–max); latency is one-way (half the round trip)\n"
            ));
            out.push_str(&render_fit(
                &[
                    "size",
                    "latency us",
                    "stream GB/s",
                    "of memcpy",
                    "RMA write GB/s",
                    "of memcpy",
                    "memcpy GB/s",
                ],
                &rows,
                width,
            ));
        }
        if let Some(c) = report
            .select(BENCH, metric::CONNECT)
            .find(|f| f.param_str("backend") == b)
        {
            out.push_str(&format!(
                "{b} connect: {} us  (Monnard 2015: SCIF {} us, sockets {} us)\n",
                median_range(&c.summary),
                fmt3(SEED_004_CONNECT_US.0),
                fmt3(SEED_004_CONNECT_US.1)
            ));
        }
        let reg: Vec<&Figure> = report
            .select(BENCH, metric::REGISTER)
            .filter(|f| f.param_str("backend") == b)
            .collect();
        if !reg.is_empty() {
            let rows: Vec<Vec<String>> = reg
                .iter()
                .map(|f| {
                    let s = size_of(f).unwrap_or(0);
                    let seed = SEED_004_REGISTER_US
                        .iter()
                        .find(|(z, _)| *z == s)
                        .map_or_else(|| "-".to_string(), |(_, us)| fmt3(*us));
                    vec![
                        format_size(s),
                        median_range(&f.summary),
                        cell(find(report, metric::UNREGISTER, Some(b), s)),
                        seed,
                    ]
                })
                .collect();
            out.push_str(&render_fit(
                &[
                    "window",
                    "register us",
                    "unregister us",
                    "SCIF register us (Monnard 2015)",
                ],
                &rows,
                width,
            ));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::model::CeilingSource;
    use accio_results::num::fmt_small;

    fn fig(metric: &str, unit: Unit, backend: Option<&str>, size: u64, s: &[f64]) -> Figure {
        let f = Figure::new(BENCH, metric, unit, s.to_vec())
            .unwrap()
            .param("size", size);
        match backend {
            Some(b) => f.param("backend", b),
            None => f,
        }
    }

    fn report() -> Report {
        let mut r = Report::new();
        r.figures = vec![
            fig(
                metric::MEMCPY,
                Unit::GBps,
                None,
                2 << 20,
                &[10.0, 12.0, 11.0],
            ),
            fig(
                metric::LATENCY,
                Unit::Micros,
                Some("shm"),
                2 << 20,
                &[150.0, 160.0, 170.0],
            ),
            fig(
                metric::STREAM_BW,
                Unit::GBps,
                Some("shm"),
                2 << 20,
                &[8.0, 9.0, 10.0],
            )
            .ceiling("memcpy 2M, 1 thread", 11.0, CeilingSource::Measured),
            fig(
                metric::LATENCY,
                Unit::Micros,
                Some("shm"),
                8,
                &[0.5, 0.4, 0.6],
            ),
            fig(
                metric::CONNECT,
                Unit::Micros,
                Some("shm"),
                0,
                &[50.0, 60.0, 70.0],
            ),
            fig(
                metric::REGISTER,
                Unit::Micros,
                Some("shm"),
                64 << 10,
                &[20.0, 30.0, 25.0],
            ),
            fig(
                metric::UNREGISTER,
                Unit::Micros,
                Some("shm"),
                64 << 10,
                &[5.0],
            ),
            fig(
                metric::LATENCY,
                Unit::Micros,
                Some("tcp"),
                8,
                &[20.0, 30.0, 25.0],
            ),
        ];
        r
    }

    #[test]
    fn tables_are_built_per_backend_from_figures() {
        let t = render_tables(&report());
        // Column widths depend on every row; compare the structure, not the padding.
        let first: Vec<&str> = t.lines().take(2).collect();
        assert_eq!(
            first[0],
            "shm: median (min–max); latency is one-way (half the round trip)"
        );
        assert!(first[1].starts_with("size  latency us"));
        let row_2m = t
            .lines()
            .find(|l| l.trim_start().starts_with("2M"))
            .unwrap();
        let cells: Vec<&str> = row_2m
            .split("  ")
            .filter(|c| !c.trim().is_empty())
            .collect();
        assert_eq!(
            cells.iter().map(|c| c.trim()).collect::<Vec<_>>(),
            [
                "2M",
                "160 (150–170)",
                "9.00 (8.00–10.0)",
                "0.818x",
                "-",
                "-",
                "11.0 (10.0–12.0)"
            ]
        );
        assert!(t.contains("shm connect: 60.0 (50.0–70.0) us  (Monnard 2015: SCIF 750 us"));
        let reg = t
            .lines()
            .find(|l| l.trim_start().starts_with("64K"))
            .unwrap();
        assert!(reg.contains("25.0 (20.0–30.0)") && reg.contains("5.00 (5.00–5.00)"));
        assert!(reg.trim_end().ends_with("2000"));
        // tcp comes second and has its own table.
        let tcp = t.find("tcp: median").unwrap();
        assert!(tcp > t.find("shm: median").unwrap());
        assert!(t[tcp..].contains("25.0 (20.0–30.0)"));
    }

    #[test]
    fn small_values_keep_two_significant_digits() {
        assert_eq!(fmt_small(0.00052), "0.00052");
        assert_eq!(fmt_small(0.0012), "0.0012");
        assert_eq!(fmt_small(0.012), "0.012");
        assert_eq!(fmt_small(0.0), "0");
        assert_eq!(fmt_small(12.34), "12.3");
    }

    #[test]
    fn describe_and_hazards() {
        let f = fig(
            metric::STREAM_BW,
            Unit::GBps,
            Some("tcp"),
            4096,
            &[1.0, 2.0, 4.0],
        )
        .ceiling("memcpy 4K, 1 thread", 1.5, CeilingSource::Measured);
        assert_eq!(
            describe(&f),
            "tcp stream_bw 4K: 2.00 (1.00–4.00) GB/s, ≈1x memcpy 4K, 1 thread"
        );
        let h = hazards(&f);
        assert_eq!(h.len(), 2);
        assert!(h[0].text.contains("above its ceiling") && h[1].text.contains("noisy"));
        assert_eq!(
            (h[0].kind, h[1].kind),
            (HazardKind::AboveCeiling, HazardKind::Noisy)
        );
        let calm = fig(
            metric::LATENCY,
            Unit::Micros,
            Some("tcp"),
            8,
            &[1.0, 1.1, 1.2],
        )
        .ceiling("one memcpy of 8, 1 thread", 0.01, CeilingSource::Measured);
        assert!(hazards(&calm).is_empty());
        let cold = fig(
            metric::REGISTER,
            Unit::Micros,
            Some("tcp"),
            4096,
            &[1.0, 1.0, 9.0],
        );
        assert!(hazards(&cold).is_empty());
    }
}
