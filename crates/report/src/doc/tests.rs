//! Unit tests of the cell helpers and of the matrix grouping.

use accio_results::model::{Figure, Unit};

use super::transport::matrices;
use super::*;

#[test]
fn percentages_keep_small_ratios_readable() {
    assert_eq!(percent(0.82), "82%");
    assert_eq!(percent(1.5), "150%");
    assert_eq!(percent(0.035), "3.5%");
    assert_eq!(percent(0.0012), "0.12%");
    assert_eq!(percent(0.000013), "0.0013%");
    assert_eq!(percent(0.000099996), "0.010%");
    assert_eq!(percent(0.0001), "0.010%");
}

#[test]
fn utc_dates() {
    assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
    assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
}

#[test]
fn matrices_group_by_metric_and_other_params() {
    let mut r = Report::new();
    for (a, b, v) in [
        ("cpu0", "cpu1", 1.0),
        ("cpu0", "gpu0", 3.0),
        ("gpu0", "cpu1", 4.0),
    ] {
        r.figures.push(
            Figure::new("pingpong", "latency", Unit::Micros, vec![v])
                .unwrap()
                .param("src", a)
                .param("dst", b)
                .param("size", 8),
        );
    }
    let g = matrices(&r);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].0, "pingpong latency size=8");
    let s = matrix_section(&r).unwrap();
    assert!(s.blocks.iter().any(
        |b| matches!(b, Block::Plot(Plot::Heatmap(h)) if h.labels == ["cpu0", "cpu1", "gpu0"])
    ));
}

#[test]
fn a_laplace_run_gets_a_table_and_stacked_bars_per_rank() {
    let mut r = Report::new();
    for rank in 0..3u64 {
        for (metric, v) in [("compute", 2.0), ("sync", 0.5), ("communicate", 0.25)] {
            r.figures.push(
                Figure::new("laplace", metric, Unit::Millis, vec![v, v * 1.1, v * 0.9])
                    .unwrap()
                    .param("grid", "64x64")
                    .param("ranks", 3u64)
                    .param("rank", rank)
                    .param("node", "n0")
                    .param("path", "rma")
                    .param("backend", "shm")
                    .param("checked", false),
            );
        }
    }
    let d = document(&r);
    let s = d.sections.iter().find(|s| s.id == "laplace").unwrap();
    let bars = s
        .blocks
        .iter()
        .find_map(|b| match b {
            Block::Plot(Plot::Bars(b)) => Some(b),
            _ => None,
        })
        .unwrap();
    assert_eq!(bars.bars, ["rank 0", "rank 1", "rank 2"]);
    assert_eq!(bars.segments[0].1, [2.0, 2.0, 2.0]);
    assert_eq!(bars.segments[2].0, "communicate");
    let table = first_table(s);
    assert_eq!(table.rows.len(), 3);
    // No generic section repeats the figures.
    assert_eq!(
        d.sections
            .iter()
            .filter(|s| s.title.contains("laplace"))
            .count(),
        0
    );
}

/// The first table of a section.
pub(super) fn first_table(s: &Section) -> &Table {
    s.blocks
        .iter()
        .find_map(|b| match b {
            Block::Table(t) => Some(t),
            _ => None,
        })
        .expect("a table in the section")
}
