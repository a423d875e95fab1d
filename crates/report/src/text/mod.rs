//! The plain-text exporter: the tables `accio` prints on a terminal, one module per bench,
//! each reading only a [`accio_results::model::Report`] (so a saved JSON prints the same
//! tables), all built with one table builder ([`table::render`]).

pub mod coalesce;
pub mod device;
pub mod fs;
pub mod info;
pub mod mem;
pub mod merge;
pub mod table;
pub mod transport;
pub mod wrap;

pub use wrap::{fit, wrap};

use accio_results::event::Event;
use accio_results::model::Figure;
use accio_results::num::median_range;

use crate::doc::Block;

/// One line for a figure in progress output: its bench's own form where it has one
/// (transport, coalesce), else `label: median (min–max) unit`, with its share of the
/// ceiling.
pub fn describe(f: &Figure) -> String {
    match f.bench.as_str() {
        accio_results::metric::transport::BENCH => transport::describe(f),
        accio_results::metric::coalesce::BENCH => coalesce::describe(f),
        _ => {
            let mut line = format!("{}: {} {}", f.label(), median_range(&f.summary), f.unit);
            if let Some((c, r)) = f.ceiling.as_ref().and_then(|c| Some((c, c.ratio?))) {
                line.push_str(&format!(", {:.0}% of {}", r * 100.0, c.name));
            }
            line
        }
    }
}

/// A bench event as one line of plain progress output (`warning: ...`, `skipped: ...`,
/// `note: ...`, a step, a figure); `None` for the events that only move a progress bar.
pub fn event_line(e: &Event<'_>) -> Option<String> {
    match e {
        Event::Step(s) => Some(s.to_string()),
        Event::Figure(f) => Some(describe(f)),
        Event::Warning(h) => Some(format!("warning: {}", h.text)),
        Event::Skipped(s) => Some(format!("skipped: {s}")),
        Event::Note(s) => Some(format!("note: {s}")),
        _ => None,
    }
}

/// Document blocks as text: headings on their own line after a blank one, paragraphs and
/// list items as lines, tables through [`table::table`] (a table without headers, such as
/// a list of facts, prints without its header rule), plots left out.
pub fn blocks(blocks: &[Block]) -> String {
    blocks_fit(blocks, usize::MAX)
}

/// [`blocks`] within `width` columns: paragraphs and list items wrapped at spaces (an item's
/// continuation lines under its text), tables through [`table::table_fit`], and a list of
/// facts with its values continued under the value column.
pub fn blocks_fit(blocks: &[Block], width: usize) -> String {
    let mut out = String::new();
    for b in blocks {
        match b {
            Block::Heading(h) => out.push_str(&format!("\n{}", wrap(h, width, ""))),
            Block::Para(p) => out.push_str(&wrap(p, width, "")),
            Block::List(items) => {
                for i in items {
                    out.push_str(&wrap(&format!("- {i}"), width, "  "));
                }
            }
            Block::Table(t) if t.headers.iter().all(String::is_empty) => {
                let headers: Vec<&str> = t.headers.iter().map(String::as_str).collect();
                let text = table::render(&headers, &t.rows);
                // Header and rule lines are blank and dashes only: drop them. The values
                // continue under their column.
                let key = t
                    .rows
                    .iter()
                    .map(|r| r.first().map_or(0, |c| c.chars().count()))
                    .max()
                    .unwrap_or(0);
                let indent = " ".repeat(key + 2);
                for l in text.lines().skip(2) {
                    out.push_str(&wrap(l, width, &indent));
                }
                for note in &t.notes {
                    out.push_str(&wrap(note, width, ""));
                }
            }
            Block::Table(t) => out.push_str(&table::table_fit(t, width)),
            Block::Plot(_) => {}
        }
    }
    out
}
