//! Plain-text tables with aligned columns (numbers right-aligned).

use super::wrap::wrap;
use crate::doc::types::Table;

/// Renders `rows` under left-aligned `headers`. A column whose cells all read as numbers
/// (optionally with a size suffix, a trailing `x` or `%`, or a `(min–max)` range; `-`,
/// `n/a` and empty cells do not count) is right-aligned; other columns are left-aligned.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let cols = headers.len();
    let mut width: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    let mut numeric = vec![true; cols];
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(cols) {
            width[i] = width[i].max(cell.chars().count());
            numeric[i] &= matches!(cell.as_str(), "" | "-" | "n/a") || is_numeric(cell);
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>, header: bool| {
        let mut l = String::new();
        for (i, c) in cells.enumerate().take(cols) {
            let pad = " ".repeat(width[i] - c.chars().count());
            if i > 0 {
                l.push_str("  ");
            }
            if numeric[i] && !header {
                l.push_str(&pad);
                l.push_str(c);
            } else {
                l.push_str(c);
                l.push_str(&pad);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied(), true);
    let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
    line(&mut rule.iter().map(String::as_str), true);
    for row in rows {
        line(&mut row.iter().map(String::as_str), false);
    }
    out
}

/// [`render`] within `width` columns: the table as it is when it fits; otherwise each row
/// stacked, its first cell on a line of its own and the other cells below it, indented, as
/// `header: cell`, as many to a line as fit, every line broken at spaces where it is still
/// too long (see [`wrap`]). A terminal then never wraps a row into noise (the headline
/// table is about 180 columns wide, a terminal often 80), and no cell is cut short.
pub fn render_fit(headers: &[&str], rows: &[Vec<String>], width: usize) -> String {
    let plain = render(headers, rows);
    if plain.lines().all(|l| l.chars().count() <= width) {
        return plain;
    }
    let mut out = String::new();
    for row in rows {
        let Some((first, rest)) = row.split_first() else {
            continue;
        };
        out.push_str(&wrap(first, width, "  "));
        let mut line = String::new();
        for (h, c) in headers.iter().skip(1).zip(rest) {
            if c.is_empty() || c == "-" {
                continue;
            }
            let item = if h.is_empty() {
                c.clone()
            } else {
                format!("{h}: {c}")
            };
            if !line.is_empty() && 4 + line.chars().count() + 3 + item.chars().count() > width {
                out.push_str(&wrap(&format!("    {line}"), width, "      "));
                line.clear();
            }
            if !line.is_empty() {
                line.push_str(" | ");
            }
            line.push_str(&item);
        }
        if !line.is_empty() {
            out.push_str(&wrap(&format!("    {line}"), width, "      "));
        }
    }
    out
}

/// A document table as text: [`render`] of its headers and rows, then its notes, one line
/// each. This is how the text exporter shows every table the pages show too.
pub fn table(t: &Table) -> String {
    table_fit(t, usize::MAX)
}

/// [`table`] within `width` columns: the rows through [`render_fit`], the notes wrapped at
/// spaces.
pub fn table_fit(t: &Table, width: usize) -> String {
    let headers: Vec<&str> = t.headers.iter().map(String::as_str).collect();
    let mut out = render_fit(&headers, &t.rows, width);
    for note in &t.notes {
        out.push_str(&wrap(note, width, ""));
    }
    out
}

/// True for `12.5`, `0.031x`, `95%`, `4K`, `1.2 (1.1–1.3)`.
fn is_numeric(s: &str) -> bool {
    s.split(['–', ' ', '(', ')'])
        .filter(|p| !p.is_empty())
        .all(|p| {
            let t = p.trim_end_matches(['x', '%', 'K', 'M', 'G', 'T']);
            !t.is_empty() && t.parse::<f64>().is_ok()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_text_left_and_numbers_right() {
        let t = render(
            &["backend", "size", "GB/s"],
            &[
                vec!["shm".into(), "2M".into(), "12.5".into()],
                vec!["tcp".into(), "8".into(), "0.031".into()],
            ],
        );
        assert_eq!(
            t,
            "backend  size  GB/s\n-------  ----  -----\nshm        2M   12.5\ntcp         8  0.031\n"
        );
    }

    #[test]
    fn placeholders_do_not_make_a_column_textual() {
        let t = render(
            &["a", "b"],
            &[
                vec!["1".into(), "n/a".into()],
                vec!["22".into(), "3".into()],
            ],
        );
        assert_eq!(t, "a   b\n--  ---\n 1  n/a\n22    3\n");
    }

    #[test]
    fn a_table_too_wide_for_the_terminal_is_stacked_row_by_row() {
        let rows = vec![
            vec![
                "coalesce shm item_rate pattern=random mode=cache item=64 (best)".to_string(),
                "108 (107–110) Mop/s".into(),
                "large-message bw / 64 B = 687 Mop/s".into(),
                "16%".into(),
            ],
            vec![
                "shm latency, 8 B".into(),
                "0.130 us".into(),
                "-".into(),
                "-".into(),
            ],
        ];
        let h = ["figure", "median (min–max)", "ceiling", "of ceiling"];
        // Wide enough: the plain table.
        assert_eq!(render_fit(&h, &rows, 200), render(&h, &rows));
        let t = render_fit(&h, &rows, 80);
        assert!(t.lines().all(|l| l.chars().count() <= 80), "{t}");
        assert_eq!(
            t,
            "coalesce shm item_rate pattern=random mode=cache item=64 (best)\n    \
             median (min–max): 108 (107–110) Mop/s\n    ceiling: large-message bw / 64 B = \
             687 Mop/s | of ceiling: 16%\nshm latency, 8 B\n    median (min–max): 0.130 us\n"
        );
        // Very narrow: long cells continue on the next line, indented, and keep every word.
        let t = render_fit(&h, &rows, 20);
        assert!(t.lines().all(|l| l.chars().count() <= 20), "{t}");
        assert!(t.starts_with("coalesce shm\n  item_rate\n"), "{t}");
        assert!(t.contains("\n      Mop/s"), "{t}");
    }
}
