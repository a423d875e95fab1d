//! The report as a document: sections of paragraphs, tables, lists and plots, built once
//! from a [`Report`] and rendered by each exporter ([`crate::markdown`], [`crate::html`]).
//! Everything a reader sees is decided here; the exporters only choose markup.

use std::collections::BTreeMap;

use accio_results::metric::fs::Mode;
use accio_results::metric::transport::{SEED_004_CONNECT_US, SEED_004_REGISTER_US};
use accio_results::model::{distinct_param, CeilingSource, Figure, Report, Unit};
use accio_results::node::NodeInfo;
use accio_results::num::{fmt3, fmt_small, median_range};
use accio_results::size::format_size;

use serde_json::Value;

use crate::summary;
use crate::svg::{Heatmap, LinePlot, Point, Series, XScale};

/// A table: headers, rows of cells, and notes printed under it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows of cells, each as long as `headers`.
    pub rows: Vec<Vec<String>>,
    /// Columns to right-align (numbers).
    pub numeric: Vec<bool>,
    /// Lines under the table (what the columns mean, methods).
    pub notes: Vec<String>,
}

impl Table {
    /// A table with `headers`; a column is numeric when its header is listed in
    /// `numeric`.
    pub fn new(headers: &[&str], numeric: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            numeric: headers.iter().map(|h| numeric.contains(h)).collect(),
            notes: Vec::new(),
        }
    }
}

/// A plot.
#[derive(Clone, Debug, PartialEq)]
pub enum Plot {
    /// Lines against a parameter.
    Line(LinePlot),
    /// A matrix heat map.
    Heatmap(Heatmap),
}

impl Plot {
    /// The plot's title.
    pub fn title(&self) -> &str {
        match self {
            Plot::Line(p) => &p.title,
            Plot::Heatmap(h) => &h.title,
        }
    }

    /// The plot's element id.
    pub fn id(&self) -> &str {
        match self {
            Plot::Line(p) => &p.id,
            Plot::Heatmap(h) => &h.id,
        }
    }

    /// Whether this is a repeat of a plot shown in full further down (the summary's "at a
    /// glance" copies), which text exporters leave out.
    pub fn is_glance(&self) -> bool {
        self.id().starts_with("glance-")
    }

    /// The plot as an `<svg>` element.
    pub fn svg(&self) -> String {
        match self {
            Plot::Line(p) => p.svg(),
            Plot::Heatmap(h) => h.svg(),
        }
    }
}

/// One piece of a section.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    /// A sub-heading.
    Heading(String),
    /// A paragraph of plain text.
    Para(String),
    /// A bulleted list.
    List(Vec<String>),
    /// A table.
    Table(Table),
    /// A plot (HTML only; Markdown names it).
    Plot(Plot),
}

/// A top-level section.
#[derive(Clone, Debug, PartialEq)]
pub struct Section {
    /// Anchor id.
    pub id: String,
    /// Heading.
    pub title: String,
    /// Contents, in order.
    pub blocks: Vec<Block>,
}

/// The whole report.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// Page title.
    pub title: String,
    /// The line under the title: where and when it was measured.
    pub subtitle: String,
    /// The sections, in order.
    pub sections: Vec<Section>,
}

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

/// The figure's share of its ceiling ([`percent`]), or `-`.
pub fn ratio_cell(f: &Figure) -> String {
    f.ceiling
        .as_ref()
        .and_then(|c| c.ratio)
        .map_or_else(|| "-".into(), percent)
}

/// `memcpy 2M, 1 thread = 10.5 GB/s`, marked `(theoretical)` when it was not measured in
/// the run; `-` without a ceiling.
pub fn ceiling_cell(f: &Figure) -> String {
    f.ceiling.as_ref().map_or_else(
        || "-".into(),
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

fn u64_param(f: &Figure, key: &str) -> Option<u64> {
    f.params.get(key).and_then(Value::as_u64)
}

/// A figure of the fs bench proper: not one another bench measured as its own ceiling
/// (those carry `for`, e.g. the merge bench's `for = "merge ceiling"`).
pub fn is_fs_bench(f: &Figure) -> bool {
    f.bench == "fs" && !f.params.contains_key("for")
}

/// Whether `f` was measured for `bench` (its `for` parameter names it first).
fn measured_for(f: &Figure, bench: &str) -> bool {
    f.param_str("for")
        .split_whitespace()
        .next()
        .is_some_and(|b| b == bench)
}

fn has_matrix_params(f: &Figure) -> bool {
    f.params.contains_key("src") && f.params.contains_key("dst")
}

fn point(f: &Figure, x: f64) -> Point {
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

fn ceiling_point(f: &Figure, x: f64) -> Option<Point> {
    let c = f.ceiling.as_ref()?;
    Some(Point {
        x,
        y: c.value,
        lo: c.value,
        hi: c.value,
        tip: format!("ceiling of {}: {}", f.label(), ceiling_cell(f)),
    })
}

/// Builds the document for `report`.
pub fn document(report: &Report) -> Document {
    let host = &report.host;
    let mut sections = vec![summary_section(report)];
    if !report.warnings.is_empty() {
        sections.push(Section {
            id: "warnings".into(),
            title: "Warnings".into(),
            blocks: vec![Block::List(report.warnings.clone())],
        });
    }
    sections.push(node_section(report));
    sections.extend(mem_section(report));
    sections.extend(fs_section(report));
    sections.extend(transport_section(report));
    sections.extend(matrix_section(report));
    let mut others: Vec<String> = Vec::new();
    for f in &report.figures {
        if !["mem", "fs", "transport"].contains(&f.bench.as_str()) && !others.contains(&f.bench) {
            others.push(f.bench.clone());
        }
    }
    for b in others {
        // A bench whose figures are all matrix cells is shown in the matrix section only.
        if report
            .figures
            .iter()
            .any(|f| f.bench == b && !has_matrix_params(f))
        {
            sections.push(generic_section(report, &b));
        }
    }
    sections.push(methods_section(report));
    Document {
        title: format!("accio report: {}", host.hostname),
        subtitle: format!(
            "Measured on {} ({}, {} CPUs, {} memory{}) from {} with `{}` (accio {}, \
             {} schema version {}); {} figures.",
            host.hostname,
            host.cpu,
            host.cores,
            accio_results::size::human_bytes(host.memory_bytes),
            if host.kernel.is_empty() {
                String::new()
            } else {
                format!(", Linux {}", host.kernel)
            },
            utc(report.started_unix),
            report.command.join(" "),
            report.accio_version,
            report.schema,
            report.version,
            report.figures.len()
        ),
        sections,
    }
}

fn summary_section(report: &Report) -> Section {
    let heads = summary::headlines(report);
    let mut blocks = Vec::new();
    if report.figures.is_empty() {
        blocks.push(Block::Para("No figures were recorded.".into()));
    } else if heads.is_empty() {
        blocks.push(Block::Para(
            "None of this run's figures is a headline figure (memory, file systems, \
             transports, or a bench's best figure); they are all in the sections below."
                .into(),
        ));
    } else {
        blocks.push(Block::Para(
            "The headline figures, each beside the ceiling it should be read against. \
             \"Of ceiling\" is median / ceiling for bandwidths and rates, and ceiling / median \
             for times (a time's ceiling is a floor), so 100% is at the limit."
                .into(),
        ));
        blocks.push(Block::Table(summary::table(&heads)));
        // At a glance: the transport plots again, next to the numbers they come from.
        for mut p in transport_plots(report) {
            p.id = format!("glance-{}", p.id);
            blocks.push(Block::Plot(Plot::Line(p)));
        }
    }
    Section {
        id: "summary".into(),
        title: "Summary".into(),
        blocks,
    }
}

fn node_section(report: &Report) -> Section {
    let mut blocks = Vec::new();
    let Some(info) = &report.info else {
        let h = &report.host;
        let mut t = Table::new(&["", ""], &[]);
        t.rows = vec![
            vec!["host".into(), h.hostname.clone()],
            vec!["cpu".into(), format!("{} ({} CPUs)", h.cpu, h.cores)],
            vec![
                "memory".into(),
                accio_results::size::human_bytes(h.memory_bytes),
            ],
            vec!["kernel".into(), h.kernel.clone()],
        ];
        blocks.push(Block::Table(t));
        blocks.push(Block::Para(
            "This run did not record node details (file systems, PCIe links, GPUs); \
             `accio info` shows them."
                .into(),
        ));
        return Section {
            id: "node".into(),
            title: "Node".into(),
            blocks,
        };
    };
    blocks.extend(node_blocks(info));
    Section {
        id: "node".into(),
        title: "Node".into(),
        blocks,
    }
}

/// The node facts as blocks (also what `accio info` would print, in tables).
pub fn node_blocks(info: &NodeInfo) -> Vec<Block> {
    let human = accio_results::size::human_bytes;
    let mut blocks = Vec::new();
    let mut t = Table::new(&["", ""], &[]);
    t.rows.push(vec!["host".into(), info.hostname.clone()]);
    t.rows
        .push(vec!["cpu".into(), crate::text::info::cpu(&info.cpu)]);
    t.rows.push(vec!["memory".into(), human(info.memory_bytes)]);
    t.rows.push(vec![
        "NUMA".into(),
        if info.numa.is_empty() {
            "no NUMA information".into()
        } else {
            info.numa
                .iter()
                .map(|n| {
                    format!(
                        "node{}: cpus {}{}",
                        n.id,
                        n.cpus,
                        n.memory_bytes
                            .map_or(String::new(), |m| format!(", {}", human(m)))
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        },
    ]);
    t.rows.push(vec!["kernel".into(), info.kernel.clone()]);
    blocks.push(Block::Table(t));
    if !info.mounts.is_empty() {
        blocks.push(Block::Heading("File systems".into()));
        let mut t = Table::new(
            &["mount", "type", "backing", "size", "free", "source"],
            &["size", "free"],
        );
        for m in &info.mounts {
            t.rows.push(vec![
                m.mount_point.clone(),
                format!("{}{}", m.fs_type, if m.read_only { " (ro)" } else { "" }),
                m.backing.clone(),
                m.size_bytes.map_or("-".into(), human),
                m.free_bytes.map_or("-".into(), human),
                m.source.clone(),
            ]);
        }
        blocks.push(Block::Table(t));
    }
    blocks.push(Block::Heading("PCIe".into()));
    let linked: Vec<_> = info
        .pci
        .iter()
        .filter(|d| d.current_link.is_some() || d.max_link.is_some())
        .collect();
    if linked.is_empty() {
        blocks.push(Block::Para(format!(
            "{} PCI devices, none with PCIe link information in sysfs.",
            info.pci.len()
        )));
    } else {
        let mut t = Table::new(
            &[
                "address", "class", "device", "link now", "GB/s now", "link max", "GB/s max",
            ],
            &["GB/s now", "GB/s max"],
        );
        for d in &linked {
            let link = |l: Option<&accio_results::node::Link>| match l {
                Some(l) => (crate::text::info::link_name(l), fmt3(l.gbps)),
                None => ("-".into(), "-".into()),
            };
            let (now, now_gb) = link(d.current_link.as_ref());
            let (max, max_gb) = link(d.max_link.as_ref());
            t.rows.push(vec![
                d.address.clone(),
                d.class_name.clone(),
                d.name(),
                now,
                now_gb,
                max,
                max_gb,
            ]);
        }
        t.notes.push(
            "GB/s: theoretical bandwidth per direction, lanes × GT/s × encoding / 8 (8b/10b \
             for Gen1–2, 128b/130b for Gen3–5, FLIT 242/256 for Gen6+), as seed 000 computes \
             16 × 5 GT/s × 8/10 = 8 GB/s for PCIe 2.0 x16."
                .into(),
        );
        t.notes.push(format!(
            "{} of {} PCI devices report a link.",
            linked.len(),
            info.pci.len()
        ));
        blocks.push(Block::Table(t));
    }
    blocks.push(Block::Heading("GPUs".into()));
    if info.gpus.is_empty() {
        blocks.push(Block::Para("None found.".into()));
    } else {
        let mut t = Table::new(
            &["address", "name", "memory", "driver", "PCIe link", "GB/s"],
            &["GB/s"],
        );
        for g in &info.gpus {
            t.rows.push(vec![
                g.address.clone(),
                g.name.clone(),
                g.memory_bytes.map_or("-".into(), human),
                g.driver.clone().unwrap_or_else(|| "-".into()),
                g.current_link
                    .as_ref()
                    .map_or("-".into(), crate::text::info::link),
                g.current_link.as_ref().map_or("-".into(), |l| fmt3(l.gbps)),
            ]);
        }
        blocks.push(Block::Table(t));
    }
    if !info.notes.is_empty() {
        blocks.push(Block::List(info.notes.clone()));
    }
    blocks
}

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

fn mem_section(report: &Report) -> Option<Section> {
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
            s.push_str(&format!(", {} of memcpy", ratio_cell(f)));
        }
        s
    })
    .rows;
    t.notes.push(
        "After Colfax 2014, Table 1. GB/s = 10^9 B/s, median (min–max) over the repeats; \
         N=: the best thread count; x% of memcpy: the share of memcpy bandwidth measured in \
         this run at the same record size and thread count, the ceiling of memory-backed file \
         systems and of page-cache modes. write+sync and cold read on block or network file \
         systems have no ceiling here: their limit is the device or network."
            .into(),
    );
    t
}

fn fs_section(report: &Report) -> Option<Section> {
    let paths = crate::text::fs::fs_paths(report);
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
        let mut t = Table::new(
            &[
                "mode",
                "threads",
                "GB/s",
                "min–max",
                "ceiling GB/s",
                "of ceiling",
            ],
            &["threads", "GB/s", "min–max", "ceiling GB/s", "of ceiling"],
        );
        let mut ceiling_pts: BTreeMap<u64, Point> = BTreeMap::new();
        for (mi, mode) in Mode::ALL.iter().enumerate() {
            let mut of: Vec<&&Figure> = figs.iter().filter(|f| f.metric == mode.name()).collect();
            if of.is_empty() {
                continue;
            }
            of.sort_by_key(|f| u64_param(f, "threads").unwrap_or(0));
            for f in &of {
                let n = u64_param(f, "threads").unwrap_or(0);
                t.rows.push(vec![
                    mode.label().into(),
                    n.to_string(),
                    fmt_small(f.summary.median),
                    format!("{}–{}", fmt_small(f.summary.min), fmt_small(f.summary.max)),
                    f.ceiling
                        .as_ref()
                        .map_or("-".into(), |c| fmt_small(c.value)),
                    ratio_cell(f),
                ]);
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
            });
        }
        if !ceiling_pts.is_empty() {
            series.push(Series {
                name: "ceiling: memcpy, same threads".into(),
                points: ceiling_pts.into_values().collect(),
                dashed: true,
                color: 6,
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

/// Bandwidth and latency against message size, one line per backend (and per streaming
/// and RMA), the memcpy ceiling (or, for latency, the one-copy floor) dashed.
fn transport_plots(report: &Report) -> Vec<LinePlot> {
    let backends = transport_backends(report);
    let of = |b: &str, m: &str| transport_figures(report, b, m);
    let mut plots = Vec::new();
    // Bandwidth vs size: stream and RMA per backend, the memcpy ceiling dashed.
    let mut bw = Vec::new();
    let mut lat = Vec::new();
    for (bi, b) in backends.iter().enumerate() {
        for (m, what) in [("stream_bw", "stream"), ("rma_write_bw", "RMA write")] {
            let figs = of(b, m);
            if figs.is_empty() {
                continue;
            }
            bw.push(Series {
                name: format!("{b} {what}"),
                points: figs
                    .iter()
                    .map(|f| point(f, u64_param(f, "size").unwrap_or(0) as f64))
                    .collect(),
                dashed: false,
                color: bi * 2 + usize::from(m == "rma_write_bw"),
            });
        }
        let mem = of(b, "memcpy");
        if !mem.is_empty() {
            bw.push(Series {
                name: format!("{b} ceiling: memcpy"),
                points: mem
                    .iter()
                    .map(|f| point(f, u64_param(f, "size").unwrap_or(0) as f64))
                    .collect(),
                dashed: true,
                color: bi * 2,
            });
        }
        let l = of(b, "latency");
        if !l.is_empty() {
            lat.push(Series {
                name: format!("{b} latency"),
                points: l
                    .iter()
                    .map(|f| point(f, u64_param(f, "size").unwrap_or(0) as f64))
                    .collect(),
                dashed: false,
                color: bi * 2,
            });
            let floor: Vec<Point> = l
                .iter()
                .filter_map(|f| ceiling_point(f, u64_param(f, "size").unwrap_or(0) as f64))
                .collect();
            if !floor.is_empty() {
                lat.push(Series {
                    name: format!("{b} floor: one memcpy"),
                    points: floor,
                    dashed: true,
                    color: bi * 2,
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

fn transport_section(report: &Report) -> Option<Section> {
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
        &["backend", "what", "size", "us", "seed 004 (SCIF) us"],
        &["size", "us", "seed 004 (SCIF) us"],
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
            "Seed 004 measured SCIF over PCIe on a Xeon Phi: a reference point, not a ceiling."
                .into(),
        );
        blocks.push(Block::Table(t));
    }
    Some(Section {
        id: "transport".into(),
        title: "Transports".into(),
        blocks,
    })
}

/// Groups of figures that form a matrix: same bench, metric and other parameters, over
/// (`src`, `dst`) pairs.
fn matrices(report: &Report) -> Vec<(String, Vec<&Figure>)> {
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

fn matrix_section(report: &Report) -> Option<Section> {
    let groups = matrices(report);
    if groups.is_empty() {
        return None;
    }
    let mut blocks = vec![Block::Para(
        "Ping-pong between every pair of endpoints, as seed 003 tabulates Intel MPI \
         PingPong between CPUs and coprocessors: rows are the sending endpoint, columns the \
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
];

fn generic_section(report: &Report, bench: &str) -> Section {
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
        let key = (f.metric.clone(), f.unit, f.param_str("path"));
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    for (gi, (metric, unit, path)) in groups.iter().enumerate() {
        let group: Vec<&Figure> = figs
            .iter()
            .copied()
            .filter(|f| &f.metric == metric && f.unit == *unit && &f.param_str("path") == path)
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
            let name = if keys.is_empty() {
                metric.clone()
            } else {
                keys.iter()
                    .map(|k| match f.params.get(*k) {
                        Some(Value::String(v)) => v.clone(),
                        _ => format!("{k}={}", f.param_str(k)),
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
        let bytes = x == "size" || x == "item_size" || x == "item";
        let plot = LinePlot {
            id: format!("plot-{bench}-{gi}"),
            title: format!("{bench} {metric} vs {x}{on}"),
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

fn methods_section(report: &Report) -> Section {
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

#[cfg(test)]
mod tests {
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
}
