//! The plain-text exporter: the tables `accio` prints on a terminal, one module per bench,
//! each reading only a [`accio_results::model::Report`] (so a saved JSON prints the same
//! tables), all built with one table builder ([`table::render`]).

pub mod coalesce;
pub mod fs;
pub mod info;
pub mod mem;
pub mod merge;
pub mod table;
pub mod transport;

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
    let mut out = String::new();
    for b in blocks {
        match b {
            Block::Heading(h) => out.push_str(&format!("\n{h}\n")),
            Block::Para(p) => out.push_str(&format!("{p}\n")),
            Block::List(items) => {
                for i in items {
                    out.push_str(&format!("- {i}\n"));
                }
            }
            Block::Table(t) if t.headers.iter().all(String::is_empty) => {
                let text = table::table(t);
                // Header and rule lines are blank and dashes only: drop them.
                out.extend(text.lines().skip(2).map(|l| format!("{l}\n")));
            }
            Block::Table(t) => out.push_str(&table::table(t)),
            Block::Plot(_) => {}
        }
    }
    out
}
