//! Text rendering of coalesce figures: one table per backend, an aggregation table, and the
//! summary lines that answer "how much does coalescing buy here".
//!
//! Everything reads a [`Report`], never the measurements, so tables can be rebuilt from
//! any saved JSON document.

use accio_results::model::{Figure, Report};
use accio_results::num::{fmt3, median_range};
use accio_results::size::format_size;

use super::table::render_fit;
use super::wrap::wrap;
use crate::doc::ratio_x;

use accio_results::metric::coalesce::{self as metric, BENCH};

/// Bytes as `512`, `32K`, `31.5K`, `1.2M`.
fn bytes(n: f64) -> String {
    if n < 1024.0 {
        format!("{n:.0}")
    } else if n < (1 << 20) as f64 {
        let k = n / 1024.0;
        if k.fract() == 0.0 {
            format!("{k:.0}K")
        } else {
            format!("{}K", fmt3(k))
        }
    } else {
        format!("{}M", fmt3(n / (1 << 20) as f64))
    }
}

fn num(f: &Figure, key: &str) -> Option<f64> {
    f.params.get(key).and_then(|v| v.as_f64())
}

/// One line for progress output, e.g. `shm random 64 cache 16x4x32K first-free: 98.1
/// (95.0–99.2) Mop/s, 0.52x large-message bw / 64 B, 32K per transfer`.
pub fn describe(f: &Figure) -> String {
    let mut who = vec![f.param_str("backend")];
    for k in [
        "pattern",
        "item",
        "mode",
        "geometry",
        "placement",
        "transfer",
    ] {
        let v = f.param_str(k);
        if !v.is_empty() {
            who.push(v);
        }
    }
    if f.metric == metric::LARGE_MSG_BW {
        who.push("large-message bandwidth".into());
    }
    if f.metric == metric::MSG_RATE {
        who.push("messages".into());
    }
    let mut line = format!("{}: {} {}", who.join(" "), median_range(&f.summary), f.unit);
    if let Some(c) = f.ceiling.as_ref().filter(|c| c.ratio.is_some()) {
        line.push_str(&format!(", {} {}", ratio_x(f), c.name));
    }
    if let Some(t) = num(f, "avg_transfer_bytes") {
        line.push_str(&format!(", {} per transfer", bytes(t)));
    }
    line
}

fn same_case(a: &Figure, b: &Figure) -> bool {
    ["backend", "pattern", "item", "footprint"]
        .iter()
        .all(|k| a.param_str(k) == b.param_str(k))
}

/// The `direct` figure measured for the same backend, pattern, item and footprint.
pub(crate) fn direct_of<'a>(r: &'a Report, f: &Figure) -> Option<&'a Figure> {
    r.select(BENCH, metric::ITEM_RATE)
        .find(|d| d.param_str("mode") == "direct" && same_case(d, f))
}

/// The `item_bw` figure recorded beside an `item_rate` one.
fn bw_of<'a>(r: &'a Report, f: &Figure) -> Option<&'a Figure> {
    r.select(BENCH, metric::ITEM_BW)
        .find(|b| b.params == f.params)
}

fn backends(r: &Report) -> Vec<String> {
    accio_results::model::distinct_param(r.figures.iter().filter(|f| f.bench == BENCH), "backend")
}

/// One table per backend (items into a window) and one of message aggregation, with the
/// large-message ceiling above each; empty if the report has no coalesce figures.
pub fn render_tables(r: &Report) -> String {
    render_tables_fit(r, usize::MAX)
}

/// [`render_tables`] within `width` columns: tables stacked where they would be wider (see
/// [`render_fit`]), the other lines wrapped at spaces.
pub fn render_tables_fit(r: &Report, width: usize) -> String {
    let mut out = String::new();
    for backend in backends(r) {
        // The best measure: the one the items are read against (a ceiling that an item
        // figure passed is measured again).
        let large = r
            .select(BENCH, metric::LARGE_MSG_BW)
            .filter(|f| f.param_str("backend") == backend)
            .max_by(|a, b| a.summary.median.total_cmp(&b.summary.median));
        out.push_str(&wrap(
            &format!(
                "coalesce, {backend}: small items into a peer window; large-message bandwidth {}",
                large.map_or_else(
                    || "not measured".to_string(),
                    |f| format!(
                        "{} GB/s ({} write_to)",
                        median_range(&f.summary),
                        format_size(f.param_str("size").parse().unwrap_or(0))
                    )
                )
            ),
            width,
            "  ",
        ));
        let mut rows = Vec::new();
        for f in r
            .select(BENCH, metric::ITEM_RATE)
            .filter(|f| f.param_str("backend") == backend)
        {
            let bw = bw_of(r, f);
            let speedup = match (direct_of(r, f), f.param_str("mode").as_str()) {
                (_, "direct") => "1x".to_string(),
                (Some(d), _) if d.summary.median > 0.0 => {
                    format!("{}x", fmt3(f.summary.median / d.summary.median))
                }
                _ => "-".to_string(),
            };
            let dash = |s: String| if s.is_empty() { "-".to_string() } else { s };
            rows.push(vec![
                f.param_str("pattern"),
                f.param_str("item"),
                f.param_str("mode"),
                dash(f.param_str("geometry")),
                dash(f.param_str("placement")),
                dash(f.param_str("transfer")),
                format_size(num(f, "footprint").unwrap_or(0.0) as u64),
                median_range(&f.summary),
                bw.map_or_else(|| "-".into(), |b| fmt3(b.summary.median * 1e3)),
                bw.map_or_else(|| "-".into(), ratio_x),
                num(f, "avg_transfer_bytes").map_or_else(|| "-".into(), bytes),
                num(f, "dedup").map_or_else(|| "-".into(), |d| format!("{}x", fmt3(d))),
                speedup,
            ]);
        }
        out.push_str(&render_fit(
            &[
                "pattern",
                "item",
                "mode",
                "geometry",
                "placement",
                "transfer",
                "footprint",
                "Mitems/s (min–max)",
                "MB/s",
                "x ceiling",
                "per transfer",
                "dedup",
                "vs direct",
            ],
            &rows,
            width,
        ));
        let msgs: Vec<&Figure> = r
            .select(BENCH, metric::MSG_RATE)
            .filter(|f| f.param_str("backend") == backend)
            .collect();
        if !msgs.is_empty() {
            out.push('\n');
            out.push_str(&wrap(
                &format!("coalesce, {backend}: small messages to one destination"),
                width,
                "  ",
            ));
            let rows: Vec<Vec<String>> = msgs
                .iter()
                .map(|f| {
                    let plain = msgs.iter().find(|s| {
                        s.param_str("mode") == "send" && s.param_str("item") == f.param_str("item")
                    });
                    let item: f64 = f.param_str("item").parse().unwrap_or(0.0);
                    vec![
                        f.param_str("item"),
                        f.param_str("mode"),
                        median_range(&f.summary),
                        fmt3(f.summary.median * item),
                        num(f, "avg_transfer_bytes").map_or_else(|| "-".into(), bytes),
                        plain.filter(|p| p.summary.median > 0.0).map_or_else(
                            || "-".into(),
                            |p| format!("{}x", fmt3(f.summary.median / p.summary.median)),
                        ),
                    ]
                })
                .collect();
            out.push_str(&render_fit(
                &[
                    "item",
                    "mode",
                    "Mmsg/s (min–max)",
                    "MB/s",
                    "per transfer",
                    "vs send",
                ],
                &rows,
                width,
            ));
        }
        for l in summary_lines(r).iter().filter(|l| l.starts_with(&backend)) {
            out.push_str(&wrap(l, width, "  "));
        }
        out.push('\n');
    }
    out
}

/// For every backend, item size and the two random patterns (`random`, `permutation`),
/// the cache as the library sets it up by default — the first geometry and placement
/// measured, and the pulling transfer where it was measured (`Transfer::Auto` pulls
/// wherever the backend can map peer memory) — against one RMA per item and against the
/// ceiling:
/// `shm random 64 B, cache 16x4x32K pull: 14.2x the direct item rate, 0.57x the
/// large-message bandwidth, 32K per transfer`.
pub fn summary_lines(r: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let caches: Vec<_> = r
        .select(BENCH, metric::ITEM_RATE)
        .filter(|f| {
            matches!(f.param_str("pattern").as_str(), "random" | "permutation")
                && f.param_str("mode") == "cache"
        })
        .collect();
    let key = |f: &Figure| {
        (
            f.param_str("backend"),
            f.param_str("pattern"),
            f.param_str("item"),
        )
    };
    let mut seen = Vec::new();
    for first in &caches {
        let k = key(first);
        if seen.contains(&k) {
            continue;
        }
        seen.push(k.clone());
        let same_setup = |f: &&&Figure| {
            key(f) == k
                && f.param_str("geometry") == first.param_str("geometry")
                && f.param_str("placement") == first.param_str("placement")
        };
        let f = *caches
            .iter()
            .filter(same_setup)
            .find(|f| f.param_str("transfer") == "pull")
            .unwrap_or(first);
        let Some(d) = direct_of(r, f) else { continue };
        let ratio = bw_of(r, f)
            .and_then(|b| b.ceiling.as_ref())
            .and_then(|c| c.ratio)
            .map_or_else(|| "n/a".into(), fmt3);
        let mut cache = f.param_str("geometry");
        let transfer = f.param_str("transfer");
        if !transfer.is_empty() {
            cache = format!("{cache} {transfer}");
        }
        out.push(format!(
            "{} {} {} B, cache {}: {}x the direct item rate, {}x the large-message \
             bandwidth, {} per transfer",
            f.param_str("backend"),
            f.param_str("pattern"),
            f.param_str("item"),
            cache,
            fmt3(f.summary.median / d.summary.median),
            ratio,
            num(f, "avg_transfer_bytes").map_or_else(|| "-".into(), bytes),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::model::{CeilingSource, Unit};

    fn rate(mode: &str, v: f64, transfer: u64) -> Figure {
        let mut f = Figure::new(BENCH, metric::ITEM_RATE, Unit::MopsPerSec, vec![v])
            .unwrap()
            .param("backend", "shm")
            .param("pattern", "random")
            .param("item", 64u64)
            .param("mode", mode)
            .param("footprint", 2u64 << 20)
            .param("avg_transfer_bytes", transfer)
            .param("dedup", 1.0);
        if mode != "direct" {
            f = f
                .param("geometry", "16x4x32K")
                .param("placement", "first-free")
                .param("transfer", "pull");
        }
        f
    }

    fn report() -> Report {
        let mut r = Report::new();
        r.figures.push(
            Figure::new(BENCH, metric::LARGE_MSG_BW, Unit::GBps, vec![12.0])
                .unwrap()
                .param("backend", "shm")
                .param("size", 2u64 << 20),
        );
        for (mode, v, t) in [("direct", 7.5, 64), ("cache", 105.0, 32 << 10)] {
            let f = rate(mode, v, t);
            let mut bw = Figure::new(BENCH, metric::ITEM_BW, Unit::GBps, vec![v * 64.0 / 1e3])
                .unwrap()
                .ceiling("large-message bw", 12.0, CeilingSource::Measured);
            bw.params = f.params.clone();
            r.figures.push(f);
            r.figures.push(bw);
        }
        r
    }

    #[test]
    fn table_shows_speedup_ceiling_ratio_and_transfer_size() {
        let t = render_tables(&report());
        assert!(
            t.contains("large-message bandwidth 12.0 (12.0–12.0) GB/s (2M write_to)"),
            "{t}"
        );
        let cache = t.lines().find(|l| l.contains(" cache ")).unwrap();
        // 105 Mitems/s x 64 B = 6720 MB/s = 0.56x of 12 GB/s, 14x the direct rate.
        for want in [
            "6720",
            "0.560x",
            "32K",
            "14.0x",
            "16x4x32K",
            "first-free",
            "pull",
        ] {
            assert!(cache.contains(want), "{want} missing in {cache:?}");
        }
        let direct = t.lines().find(|l| l.contains(" direct ")).unwrap();
        assert!(
            direct.contains(" 64 ") && direct.ends_with("1x"),
            "{direct:?}"
        );
    }

    #[test]
    fn summary_takes_the_pulling_cache_where_both_transfers_were_measured() {
        // Measured first: the same cache pushing.
        let mut r = Report::new();
        r.figures
            .push(rate("cache", 50.0, 20 << 10).param("transfer", "push"));
        r.figures.extend(report().figures);
        let s = summary_lines(&r);
        assert_eq!(s.len(), 1, "{s:?}");
        assert!(s[0].contains("16x4x32K pull: 14.0x the direct"), "{s:?}");
    }

    #[test]
    fn summary_names_the_ratios() {
        let s = summary_lines(&report());
        assert_eq!(
            s,
            vec![
                "shm random 64 B, cache 16x4x32K pull: 14.0x the direct item rate, 0.560x the \
                 large-message bandwidth, 32K per transfer"
                    .to_string()
            ]
        );
    }

    #[test]
    fn describe_is_one_line_with_the_ceiling() {
        let f = rate("cache", 105.0, 32 << 10).ceiling(
            "large-message bw / 64 B",
            187.5,
            CeilingSource::Measured,
        );
        assert_eq!(
            describe(&f),
            "shm random 64 cache 16x4x32K first-free pull: 105 (105–105) Mop/s, 0.560x \
             large-message bw / 64 B, 32K per transfer"
        );
    }

    #[test]
    fn byte_sizes_read_naturally() {
        assert_eq!(bytes(64.0), "64");
        assert_eq!(bytes(32768.0), "32K");
        assert_eq!(bytes(20_000.0), "19.5K");
        assert_eq!(bytes(3.0 * 1048576.0), "3.00M");
    }
}
