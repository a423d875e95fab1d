//! The memcpy matrix: one row per buffer size, one column per thread count.

use accio_results::model::{Figure, Report};
use accio_results::num::median_range;
use accio_results::size::format_size;

use super::table::render;

/// The `mem` figures as a table: one row per size, one column per thread count, each cell
/// `median (min–max)` in GB/s of bytes copied.
pub fn mem_table(report: &Report) -> String {
    let figs: Vec<&Figure> = report.select("mem", "memcpy").collect();
    let num = |f: &Figure, k: &str| f.params.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    let mut sizes: Vec<u64> = figs.iter().map(|f| num(f, "size")).collect();
    let mut threads: Vec<u64> = figs.iter().map(|f| num(f, "threads")).collect();
    sizes.sort_unstable();
    sizes.dedup();
    threads.sort_unstable();
    threads.dedup();
    let headers: Vec<String> = std::iter::once("size".to_string())
        .chain(
            threads
                .iter()
                .map(|t| format!("{t} thread{}", if *t == 1 { "" } else { "s" })),
        )
        .collect();
    let rows: Vec<Vec<String>> = sizes
        .iter()
        .map(|&s| {
            std::iter::once(format_size(s))
                .chain(threads.iter().map(|&t| {
                    figs.iter()
                        .rev()
                        .find(|f| num(f, "size") == s && num(f, "threads") == t)
                        .map_or("-".into(), |f| median_range(&f.summary))
                }))
                .collect()
        })
        .collect();
    let h: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut out = render(&h, &rows);
    out.push_str(
        "memcpy GB/s = 10^9 bytes copied per second, median (min–max); memory traffic is twice \
         that (read + write)\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::model::Unit;

    #[test]
    fn mem_table_rows_are_sizes_and_columns_threads() {
        let mut r = Report::new();
        for (s, t, v) in [
            (65536u64, 1usize, 10.0),
            (65536, 2, 19.0),
            (1 << 20, 1, 8.0),
        ] {
            r.figures.push(
                Figure::new("mem", "memcpy", Unit::GBps, vec![v, v - 1.0, v + 1.0])
                    .unwrap()
                    .param("size", s)
                    .param("threads", t),
            );
        }
        let t = mem_table(&r);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "size  1 thread          2 threads");
        assert_eq!(lines[2], " 64K  10.0 (9.00–11.0)  19.0 (18.0–20.0)");
        assert_eq!(lines[3], "  1M  8.00 (7.00–9.00)                 -");
        assert!(lines[4].contains("traffic is twice"));
    }
}
