//! Plain-text tables with aligned columns (numbers right-aligned).

use crate::doc::Table;

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

/// A document table as text: [`render`] of its headers and rows, then its notes, one line
/// each. This is how the text exporter shows every table the pages show too.
pub fn table(t: &Table) -> String {
    let headers: Vec<&str> = t.headers.iter().map(String::as_str).collect();
    let mut out = render(&headers, &t.rows);
    for note in &t.notes {
        out.push_str(note);
        out.push('\n');
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
}
