//! Text within a terminal's width: lines broken at spaces, continuation lines indented, so
//! that the terminal never wraps a line mid-word (a warning of 477 characters used to). A
//! width of `usize::MAX` (off a terminal) leaves every line as it is, so files and pipes get
//! the same bytes as before.

/// `text` (one paragraph) as lines of at most `width` columns, each ending in a newline:
/// broken at spaces, every line after the first starting with `indent`. A word longer than
/// a whole line is split where the line ends. Text that fits is returned unchanged (its own
/// spacing kept; empty text is an empty line).
pub fn wrap(text: &str, width: usize, indent: &str) -> String {
    if text.chars().count() <= width {
        return format!("{text}\n");
    }
    // At least one column of text on a continuation line, whatever the indent.
    let width = width.max(indent.chars().count() + 1);
    // The text's own leading spaces, at most half the line.
    let lead = " ".repeat(
        text.chars()
            .take_while(|c| *c == ' ')
            .count()
            .min(width / 2),
    );
    let mut out = String::new();
    let mut line = lead;
    let mut len = line.chars().count();
    // Whether `line` holds a word yet (leading spaces and the indent do not count).
    let mut has_word = false;
    let new_line = |out: &mut String, line: &mut String, len: &mut usize| {
        out.push_str(line.trim_end());
        out.push('\n');
        *line = indent.to_string();
        *len = indent.chars().count();
    };
    for word in text.split_whitespace() {
        let mut w = word;
        let mut wlen = w.chars().count();
        if has_word && len + 1 + wlen > width {
            new_line(&mut out, &mut line, &mut len);
            has_word = false;
        }
        if has_word {
            line.push(' ');
            len += 1;
        }
        // A word longer than the room left on an empty line: split it.
        while len + wlen > width {
            let take = width - len;
            let cut = w.char_indices().nth(take).map_or(w.len(), |(i, _)| i);
            line.push_str(&w[..cut]);
            w = &w[cut..];
            wlen -= take;
            new_line(&mut out, &mut line, &mut len);
        }
        line.push_str(w);
        len += wlen;
        has_word = true;
    }
    if has_word {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Every line of `text` within `width` columns ([`wrap`] of each line longer than that, its
/// continuation lines indented two columns past the line's own indent); lines that fit are
/// left as they are.
pub fn fit(text: &str, width: usize) -> String {
    let mut out = String::new();
    for l in text.lines() {
        if l.chars().count() <= width {
            out.push_str(l);
            out.push('\n');
        } else {
            let own = l.chars().take_while(|c| *c == ' ').count();
            out.push_str(&wrap(l, width, &" ".repeat(own + 2)));
        }
    }
    // `lines` drops what follows a last newline; a text without one keeps none.
    if !text.ends_with('\n') && out.ends_with('\n') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breaks_at_spaces_with_the_indent_after_the_first_line() {
        assert_eq!(wrap("aa bb cc dd", 5, ""), "aa bb\ncc dd\n");
        assert_eq!(
            wrap("warning: one two three four", 14, "  "),
            "warning: one\n  two three\n  four\n"
        );
        assert_eq!(wrap("", 5, ""), "\n");
    }

    #[test]
    fn text_that_fits_is_unchanged_and_unlimited_width_changes_nothing() {
        assert_eq!(wrap("a  b", 4, ""), "a  b\n");
        let long = "x ".repeat(300);
        assert_eq!(wrap(&long, usize::MAX, "    "), format!("{long}\n"));
        assert_eq!(fit("a\n\nb c d e f\n", usize::MAX), "a\n\nb c d e f\n");
    }

    #[test]
    fn a_word_longer_than_the_line_is_split_and_no_line_is_wider() {
        let t = wrap("see /a/very/long/path/that/does/not/fit ok", 12, "  ");
        assert!(t.lines().all(|l| l.chars().count() <= 12), "{t}");
        let letters = |s: &str| s.split_whitespace().collect::<String>();
        assert_eq!(
            letters(&t),
            letters("see /a/very/long/path/that/does/not/fit ok")
        );
        // Characters, not bytes: a dash of three bytes counts as one column.
        let t = wrap("a–b–c–d–e–f–g–h–i–j k", 10, "");
        assert!(t.lines().all(|l| l.chars().count() <= 10), "{t}");
    }

    #[test]
    fn fit_indents_continuations_past_the_line_own_indent() {
        assert_eq!(
            fit("    median: 1 2 3 4 5\nok\n", 14),
            "    median: 1\n      2 3 4 5\nok\n"
        );
    }
}
