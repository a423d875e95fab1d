//! Text rendering of `fs` figures: one table per path and the Colfax-style summary (their
//! Table 1: one column per file system, properties rows, then each mode single-threaded and
//! at its best thread count). Both read only the [`Report`], so a saved JSON renders the
//! same way.

use accio_results::model::{Figure, Report};
use accio_results::num::fmt3;
use accio_results::size::format_size;

use super::table::render_fit;
use super::wrap::wrap;
use crate::doc::{fs_capacity as capacity, fs_path_row, ratio_cell, FsSummary, FS_PATH_HEADERS};

use accio_results::metric::fs::Mode;
use accio_results::num::median_range;

pub use crate::doc::fs_paths;

fn of_path<'a>(report: &'a Report, path: &'a str) -> impl Iterator<Item = &'a Figure> + 'a {
    report
        .figures
        .iter()
        .filter(move |f| f.bench == "fs" && f.param_str("path") == path)
}

fn threads(f: &Figure) -> u64 {
    f.params
        .get("threads")
        .and_then(|v| v.as_u64())
        .unwrap_or(0)
}

/// `x% of C` for a figure with a ceiling (the share as every table gives it: never above
/// 100%).
fn ceiling_part(f: &Figure) -> Option<String> {
    let c = f.ceiling.as_ref()?;
    Some(format!("{} of {}", ratio_cell(f), fmt3(c.value)))
}

/// The table for one path: every mode and thread count, with ceilings and the cache-drop
/// method of the cold reads below it.
pub fn path_table(report: &Report, path: &str) -> String {
    path_table_fit(report, path, usize::MAX)
}

/// [`path_table`] within `width` columns: the table stacked where it would be wider (see
/// [`render_fit`]), the lines around it wrapped at spaces.
pub fn path_table_fit(report: &Report, path: &str, width: usize) -> String {
    let figs: Vec<&Figure> = of_path(report, path).collect();
    let Some(first) = figs.first() else {
        return format!("{path}: no figures\n");
    };
    let mut out = wrap(
        &format!(
            "{path}: {} ({}-backed), {}, mounted at {} from {} ({})",
            first.param_str("fs_type"),
            first.param_str("backing"),
            capacity(first),
            first.param_str("mount_point"),
            first.param_str("mount_source"),
            first.param_str("mount_options"),
        ),
        width,
        "  ",
    );
    let mut rows = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    for mode in Mode::ALL {
        let mut of_mode: Vec<&&Figure> = figs.iter().filter(|f| f.metric == mode.name()).collect();
        of_mode.sort_by_key(|f| threads(f));
        for f in of_mode {
            rows.push(fs_path_row(mode, f));
            if let Some(m) = &f.method {
                let note = format!("{}: {m}", mode.label());
                if !notes.contains(&note) {
                    notes.push(note);
                }
            }
        }
    }
    let rec = first
        .params
        .get("record_size")
        .and_then(|v| v.as_u64())
        .map_or(String::new(), format_size);
    let fsz = first
        .params
        .get("file_size")
        .and_then(|v| v.as_u64())
        .map_or(String::new(), format_size);
    out.push_str(&wrap(
        &format!(
            "one {fsz} file per thread, {rec} records, GB/s = total bytes / (last finish - first \
             start)"
        ),
        width,
        "  ",
    ));
    out.push_str(&render_fit(&FS_PATH_HEADERS, &rows, width));
    for n in notes {
        out.push_str(&wrap(&format!("  {n}"), width, "    "));
    }
    out
}

/// The Colfax-style summary: one column per path; properties rows, then for each mode its
/// single-thread figure and its best multi-thread figure with the thread count.
pub fn summary_table(report: &Report) -> String {
    summary_table_fit(report, usize::MAX)
}

/// [`summary_table`] within `width` columns: stacked where it would be wider (see
/// [`render_fit`]), the notes wrapped at spaces.
pub fn summary_table_fit(report: &Report, width: usize) -> String {
    let paths = fs_paths(report);
    if paths.is_empty() {
        return "no file-system figures\n".into();
    }
    let FsSummary { mut rows, scales } = FsSummary::of(report, &paths, &cell);
    if scales.iter().any(Option::is_some) {
        rows.push(
            std::iter::once("scales with threads (>= 1.25x)".to_string())
                .chain(scales.iter().map(|s| match s {
                    None => "-".into(),
                    Some(m) if m.is_empty() => "no".into(),
                    Some(m) => m.join(", "),
                }))
                .collect(),
        );
    }
    let mut headers: Vec<&str> = vec!["GB/s"];
    headers.extend(paths.iter().map(String::as_str));
    let left = render_left(&headers, &rows);
    let mut out = if left.lines().all(|l| l.chars().count() <= width) {
        left
    } else {
        render_fit(&headers, &rows, width)
    };
    // Off a terminal, the notes as they always were (broken near 100 columns); on one, each
    // note one paragraph wrapped to its width.
    let notes = "GB/s = 10^9 B/s, median (min–max) over the repeats; N=: the best thread count.\n\
         x% of C: the median as a share of C (GB/s), the copy of the same work measured in this \
         run: record-sized\n  copies into (writes) or out of (reads) as many bytes per thread, \
         at the same thread count: the ceiling\n  of memory-backed file systems and of \
         page-cache modes (docs/CEILINGS.md).\n  write+sync and cold read on block or network file \
         systems have no ceiling here: their limit is\n  the device or network bandwidth, \
         which this bench does not measure.\n";
    if width == usize::MAX {
        out.push_str(notes);
    } else {
        for note in notes.split("\n  ").collect::<Vec<_>>().join(" ").lines() {
            out.push_str(&wrap(note, width, "  "));
        }
    }
    out
}

/// Like [`render`] but every column left-aligned: summary cells mix figures and words
/// (`4.00 (3.00–5.00) N=2, 25% of 16.0`), and one alignment per column reads better.
fn render_left(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let l: Vec<String> = cells
            .zip(&width)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        format!("{}\n", l.join("  ").trim_end())
    };
    let mut out = line(&mut headers.iter().copied());
    let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&line(&mut rule.iter().map(String::as_str)));
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// `median (min–max)`, then `N=n` for a multi-thread figure, then the ceiling share.
fn cell(f: &Figure, n: Option<u64>) -> String {
    let mut s = median_range(&f.summary);
    if let Some(n) = n {
        s.push_str(&format!(" N={n}"));
    }
    if let Some(c) = ceiling_part(f) {
        s.push_str(&format!(", {c}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::model::{CeilingSource, Unit};

    fn fig(path: &str, ty: &str, mode: Mode, n: u64, s: &[f64], ceil: Option<f64>) -> Figure {
        let mem = ty != "ext4";
        let mut f = Figure::new("fs", mode.name(), Unit::GBps, s.to_vec())
            .unwrap()
            .param("path", path)
            .param("threads", n)
            .param("file_size", 32u64 << 20)
            .param("record_size", 4u64 << 20)
            .param("fs_type", ty)
            .param("backing", if mem { "memory" } else { "block" })
            .param("persistent", !mem)
            .param("shared", false)
            .param("root_to_mount", ty != "tmpfs")
            .param("mount_point", path)
            .param("mount_source", ty)
            .param("mount_options", "rw")
            .param(
                "capacity_bytes",
                if ty == "ramfs" {
                    None
                } else {
                    Some(1u64 << 30)
                },
            )
            .param(
                "free_bytes",
                if ty == "ramfs" {
                    None
                } else {
                    Some(1u64 << 29)
                },
            );
        if let Some(c) = ceil {
            f = f.ceiling("memcpy 4M", c, CeilingSource::Measured);
        }
        f
    }

    fn report() -> Report {
        let mut r = Report::new();
        r.figures = vec![
            fig(
                "/dev/shm",
                "tmpfs",
                Mode::Write,
                1,
                &[2.0, 1.0, 3.0],
                Some(10.0),
            ),
            fig(
                "/dev/shm",
                "tmpfs",
                Mode::Write,
                2,
                &[4.0, 3.0, 5.0],
                Some(16.0),
            ),
            fig(
                "/dev/shm",
                "tmpfs",
                Mode::ReRead,
                1,
                &[6.0, 6.0, 6.0],
                Some(10.0),
            ),
            fig(
                "/dev/shm",
                "tmpfs",
                Mode::ReRead,
                2,
                &[6.5, 6.0, 7.0],
                Some(16.0),
            ),
            fig(
                "/mnt/ram",
                "ramfs",
                Mode::Write,
                1,
                &[2.5, 2.5, 2.5],
                Some(10.0),
            ),
            fig(
                "/mnt/ram",
                "ramfs",
                Mode::Write,
                2,
                &[2.0, 2.0, 2.0],
                Some(16.0),
            ),
            fig("/mnt/e", "ext4", Mode::ColdRead, 1, &[0.5, 0.4, 0.6], None)
                .method("sync + echo 3 > /proc/sys/vm/drop_caches"),
        ];
        r
    }

    #[test]
    fn summary_table_from_fixed_figures() {
        let t = summary_table(&report());
        let expected = "\
GB/s                            /dev/shm                           /mnt/ram                           /mnt/e
------------------------------  ---------------------------------  ---------------------------------  --------------------
type                            tmpfs                              ramfs                              ext4
backing                         memory                             memory                             block
capacity                        1 GiB (512 MiB free)               no limit (RAM)                     1 GiB (512 MiB free)
persistent across reboot        no                                 no                                 yes
shared across hosts             no                                 no                                 no
root needed to mount            no                                 yes                                yes
write, 1 thread                 2.00 (1.00–3.00), 20% of 10.0      2.50 (2.50–2.50), 25% of 10.0      -
write, best N threads           4.00 (3.00–5.00) N=2, 25% of 16.0  2.00 (2.00–2.00) N=2, 12% of 16.0  -
cold read, 1 thread             -                                  -                                  0.500 (0.400–0.600)
re-read, 1 thread               6.00 (6.00–6.00), 60% of 10.0      -                                  -
re-read, best N threads         6.50 (6.00–7.00) N=2, 41% of 16.0  -                                  -
scales with threads (>= 1.25x)  write                              no                                 -
";
        let body: String = t.lines().take(14).map(|l| format!("{l}\n")).collect();
        assert_eq!(body, expected, "got:\n{t}");
        assert!(t.contains("have no ceiling here"));
    }

    #[test]
    fn path_table_lists_modes_threads_and_methods() {
        let r = report();
        assert_eq!(fs_paths(&r), vec!["/dev/shm", "/mnt/ram", "/mnt/e"]);
        let t = path_table(&r, "/dev/shm");
        assert!(
            t.starts_with("/dev/shm: tmpfs (memory-backed), 1 GiB (512 MiB free)"),
            "{t}"
        );
        assert!(
            t.contains("\nwrite          2  4.00  3.00–5.00          16.0         25%\n"),
            "{t}"
        );
        let t = path_table(&r, "/mnt/e");
        assert!(
            t.contains("cold read: sync + echo 3 > /proc/sys/vm/drop_caches"),
            "{t}"
        );
        assert!(
            t.contains("\ncold read        1  0.500  0.400–0.600             -           -\n"),
            "{t}"
        );
    }
}
