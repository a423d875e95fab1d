//! The memory and file-system sections: the memcpy grid and Colfax's Table 1 with its plots.

use std::collections::BTreeMap;

use accio_results::metric::fs::Mode;
use accio_results::model::{Figure, Report};
use accio_results::num::fmt_small;
use accio_results::size::format_size;

use serde_json::Value;

use crate::svg::{LinePlot, Point, Series, XScale, BLACK};

use super::cells::{ceiling_point, is_fs_bench, med_range, point, ratio_cell, u64_param};
use super::{Block, Plot, Section, Table};

/// The memcpy figures as a grid: distinct buffer sizes by distinct thread counts.
struct MemGrid<'a> {
    figs: Vec<&'a Figure>,
    sizes: Vec<u64>,
    threads: Vec<u64>,
}

impl<'a> MemGrid<'a> {
    fn of(report: &'a Report) -> Option<MemGrid<'a>> {
        let figs: Vec<&Figure> = report.select("mem", "memcpy").collect();
        if figs.is_empty() {
            return None;
        }
        let distinct = |key: &str| {
            let mut v: Vec<u64> = figs.iter().filter_map(|f| u64_param(f, key)).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let (sizes, threads) = (distinct("size"), distinct("threads"));
        Some(MemGrid {
            figs,
            sizes,
            threads,
        })
    }

    /// The latest figure of `size` bytes at `threads` threads.
    fn find(&self, size: u64, threads: u64) -> Option<&'a Figure> {
        self.figs.iter().rev().copied().find(|f| {
            u64_param(f, "size") == Some(size) && u64_param(f, "threads") == Some(threads)
        })
    }

    fn table(&self) -> Table {
        let headers: Vec<String> = std::iter::once("size".to_string())
            .chain(
                self.threads
                    .iter()
                    .map(|t| format!("{t} thread{}", if *t == 1 { "" } else { "s" })),
            )
            .collect();
        let h: Vec<&str> = headers.iter().map(String::as_str).collect();
        let mut t = Table::new(&h, &h);
        for &s in &self.sizes {
            let mut row = vec![format_size(s)];
            for &n in &self.threads {
                row.push(self.find(s, n).map_or("-".into(), med_range));
            }
            t.rows.push(row);
        }
        t.notes.push(
            "GB/s of bytes copied (memory traffic is twice that), median (min–max). memcpy is \
             the ceiling of every in-memory path: file systems on tmpfs, shared-memory transport."
                .into(),
        );
        t
    }
}

/// The memcpy matrix: one row per buffer size, one column per thread count, each cell
/// `median (min–max)` in GB/s of bytes copied. `None` without memcpy figures.
pub fn mem_table(report: &Report) -> Option<Table> {
    MemGrid::of(report).map(|g| g.table())
}

pub(super) fn mem_section(report: &Report) -> Option<Section> {
    let grid = MemGrid::of(report)?;
    let t = grid.table();
    let (sizes, threads) = (&grid.sizes, &grid.threads);
    let find = |s: u64, n: u64| grid.find(s, n);
    let mut blocks = Vec::new();
    let series: Vec<Series> = threads
        .iter()
        .enumerate()
        .map(|(i, &n)| Series {
            name: format!("{n} thread{}", if n == 1 { "" } else { "s" }),
            points: sizes
                .iter()
                .filter_map(|&s| find(s, n).map(|f| point(f, s as f64)))
                .collect(),
            dashed: false,
            color: i,
            variant: i,
        })
        .collect();
    let plot = LinePlot {
        id: "plot-mem".into(),
        title: "memcpy bandwidth vs buffer size".into(),
        x_label: "buffer size (bytes)".into(),
        y_label: "GB/s copied".into(),
        x_scale: XScale::Bytes,
        series,
    };
    if plot.is_useful() {
        blocks.push(Block::Plot(Plot::Line(plot)));
    }
    blocks.push(Block::Table(t));
    Some(Section {
        id: "mem".into(),
        title: "Memory".into(),
        blocks,
    })
}

fn yes_no(f: &Figure, key: &str) -> String {
    match f.params.get(key).and_then(Value::as_bool) {
        Some(true) => "yes".into(),
        Some(false) => "no".into(),
        None => "unknown".into(),
    }
}

/// The headers of a path's table: one row per mode and thread count.
pub(crate) const FS_PATH_HEADERS: [&str; 6] = [
    "mode",
    "threads",
    "GB/s",
    "min–max",
    "ceiling GB/s",
    "of ceiling",
];

/// One row of a path's table ([`FS_PATH_HEADERS`]), for the pages and the text alike.
pub(crate) fn fs_path_row(mode: Mode, f: &Figure) -> Vec<String> {
    vec![
        mode.label().into(),
        u64_param(f, "threads").unwrap_or(0).to_string(),
        fmt_small(f.summary.median),
        format!("{}–{}", fmt_small(f.summary.min), fmt_small(f.summary.max)),
        f.ceiling
            .as_ref()
            .map_or("-".into(), |c| fmt_small(c.value)),
        ratio_cell(f),
    ]
}

/// A file system's capacity and free space, or `no limit (RAM)` (ramfs reports none).
pub(crate) fn fs_capacity(f: &Figure) -> String {
    let human = accio_results::size::human_bytes;
    match (u64_param(f, "capacity_bytes"), u64_param(f, "free_bytes")) {
        (Some(c), Some(fr)) => format!("{} ({} free)", human(c), human(fr)),
        _ => "no limit (RAM)".into(),
    }
}

/// The body of Colfax's Table 1 (2014), shared by the pages and the text table: one column
/// per file system, its properties rows, then for each mode its single-thread row and (when
/// some path has several thread counts) its best-N row, each cell made by `cell(figure,
/// threads)` (`threads` is `Some` on the best-N row).
pub(crate) struct FsSummary {
    /// Properties and mode rows; the first cell is the row's label.
    pub rows: Vec<Vec<String>>,
    /// Per path: the modes whose best N-thread figure is at least 1.25× the single-thread
    /// one (Colfax's "scales across multiple threads" row; the threshold keeps noise alone
    /// from counting as scaling), or `None` while no mode has both 1 and N threads there.
    pub scales: Vec<Option<Vec<String>>>,
}

impl FsSummary {
    pub(crate) fn of(
        report: &Report,
        paths: &[String],
        cell: &dyn Fn(&Figure, Option<u64>) -> String,
    ) -> FsSummary {
        let figs: Vec<Vec<&Figure>> = paths
            .iter()
            .map(|p| {
                report
                    .figures
                    .iter()
                    .filter(|f| is_fs_bench(f) && &f.param_str("path") == p)
                    .collect()
            })
            .collect();
        let prop = |label: &str, get: &dyn Fn(&Figure) -> String| -> Vec<String> {
            std::iter::once(label.to_string())
                .chain(
                    figs.iter()
                        .map(|fs| fs.first().map_or("-".into(), |f| get(f))),
                )
                .collect()
        };
        let mut rows = vec![
            prop("type", &|f| f.param_str("fs_type")),
            prop("backing", &|f| f.param_str("backing")),
            prop("capacity", &fs_capacity),
            prop("persistent across reboot", &|f| yes_no(f, "persistent")),
            prop("shared across hosts", &|f| yes_no(f, "shared")),
            prop("root needed to mount", &|f| yes_no(f, "root_to_mount")),
        ];
        let threads = |f: &Figure| u64_param(f, "threads").unwrap_or(0);
        let mut scales: Vec<Option<Vec<String>>> = vec![None; paths.len()];
        for mode in Mode::ALL {
            if !figs.iter().flatten().any(|f| f.metric == mode.name()) {
                continue;
            }
            let mut single = vec![format!("{}, 1 thread", mode.label())];
            let mut best = vec![format!("{}, best N threads", mode.label())];
            let mut any_multi = false;
            for (i, fs) in figs.iter().enumerate() {
                let of: Vec<&&Figure> = fs.iter().filter(|f| f.metric == mode.name()).collect();
                let one = of.iter().find(|f| threads(f) == 1);
                single.push(one.map_or("-".into(), |f| cell(f, None)));
                let top = of
                    .iter()
                    .filter(|f| threads(f) > 1)
                    .max_by(|a, b| a.summary.median.total_cmp(&b.summary.median));
                any_multi |= top.is_some();
                best.push(top.map_or("-".into(), |f| cell(f, Some(threads(f)))));
                if let (Some(o), Some(t)) = (one, top) {
                    let modes = scales[i].get_or_insert_with(Vec::new);
                    if t.summary.median >= 1.25 * o.summary.median {
                        modes.push(mode.label().to_string());
                    }
                }
            }
            rows.push(single);
            if any_multi {
                rows.push(best);
            }
        }
        FsSummary { rows, scales }
    }
}

/// Colfax's Table 1 (2014) on the pages: one column per file system; properties, then each
/// mode at one thread and at its best thread count.
fn fs_summary(report: &Report, paths: &[String]) -> Table {
    let mut headers = vec!["GB/s".to_string()];
    headers.extend(paths.iter().cloned());
    let h: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut t = Table::new(&h, &[]);
    t.rows = FsSummary::of(report, paths, &|f, best| {
        let mut s = med_range(f);
        if let Some(n) = best {
            s.push_str(&format!(" N={n}"));
        }
        if f.ceiling.is_some() {
            s.push_str(&format!(", {} of ceiling", ratio_cell(f)));
        }
        s
    })
    .rows;
    t.notes.push(
        "After Colfax 2014, Table 1. GB/s = 10^9 B/s, median (min–max) over the repeats; \
         N=: the best thread count; x% of ceiling: the share of the copy of the same work \
         measured in this run (record-sized copies into or out of as many bytes per thread, \
         same thread count), the ceiling of memory-backed file systems and of page-cache \
         modes. write+sync and cold read on block or network file \
         systems have no ceiling here: their limit is the device or network."
            .into(),
    );
    t
}

pub(super) fn fs_section(report: &Report) -> Option<Section> {
    let paths = super::cells::fs_paths(report);
    if paths.is_empty() {
        return None;
    }
    let mut blocks = vec![Block::Table(fs_summary(report, &paths))];
    for (pi, path) in paths.iter().enumerate() {
        let figs: Vec<&Figure> = report
            .figures
            .iter()
            .filter(|f| is_fs_bench(f) && &f.param_str("path") == path)
            .collect();
        let first = figs[0];
        blocks.push(Block::Heading(format!(
            "{path}: {} ({}-backed)",
            first.param_str("fs_type"),
            first.param_str("backing")
        )));
        let mut series = Vec::new();
        let mut t = Table::new(&FS_PATH_HEADERS, &FS_PATH_HEADERS[1..]);
        let mut ceiling_pts: BTreeMap<u64, Point> = BTreeMap::new();
        for (mi, mode) in Mode::ALL.iter().enumerate() {
            let mut of: Vec<&&Figure> = figs.iter().filter(|f| f.metric == mode.name()).collect();
            if of.is_empty() {
                continue;
            }
            of.sort_by_key(|f| u64_param(f, "threads").unwrap_or(0));
            for f in &of {
                let n = u64_param(f, "threads").unwrap_or(0);
                t.rows.push(fs_path_row(*mode, f));
                if let Some(p) = ceiling_point(f, n as f64) {
                    ceiling_pts.entry(n).or_insert(Point {
                        tip: format!(
                            "{}: {} GB/s",
                            f.ceiling.as_ref().map_or("", |c| c.name.as_str()),
                            fmt_small(p.y)
                        ),
                        ..p
                    });
                }
            }
            series.push(Series {
                name: mode.label().into(),
                points: of
                    .iter()
                    .map(|f| point(f, u64_param(f, "threads").unwrap_or(0) as f64))
                    .collect(),
                dashed: false,
                color: mi,
                variant: mi,
            });
        }
        if !ceiling_pts.is_empty() {
            series.push(Series {
                name: "ceiling: the same copy, same threads".into(),
                points: ceiling_pts.into_values().collect(),
                dashed: true,
                color: BLACK,
                variant: 0,
            });
        }
        let plot = LinePlot {
            id: format!("plot-fs-{pi}"),
            title: format!("{path}: throughput vs threads"),
            x_label: "threads (one file each)".into(),
            y_label: "GB/s".into(),
            x_scale: XScale::Log2,
            series,
        };
        if plot.is_useful() {
            blocks.push(Block::Plot(Plot::Line(plot)));
        }
        let fsz = u64_param(first, "file_size").map_or(String::new(), format_size);
        let rec = u64_param(first, "record_size").map_or(String::new(), format_size);
        t.notes.push(format!(
            "One {fsz} file per thread, {rec} records; GB/s = total bytes / (last finish − \
             first start). Mounted at {} from {} ({}).",
            first.param_str("mount_point"),
            first.param_str("mount_source"),
            first.param_str("mount_options")
        ));
        blocks.push(Block::Table(t));
    }
    Some(Section {
        id: "fs".into(),
        title: "File systems".into(),
        blocks,
    })
}
