//! The memcpy matrix: one row per buffer size, one column per thread count.

use accio_results::model::Report;

use super::table::table_fit;

/// The `mem` figures as a table: one row per size, one column per thread count, each cell
/// `median (min–max)` in GB/s of bytes copied (the table of the pages' Memory section).
pub fn mem_table(report: &Report) -> String {
    mem_table_fit(report, usize::MAX)
}

/// [`mem_table`] within `width` columns (see [`table_fit`]).
pub fn mem_table_fit(report: &Report, width: usize) -> String {
    crate::doc::mem_table(report).map_or_else(String::new, |t| table_fit(&t, width))
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::model::{Figure, Unit};

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
