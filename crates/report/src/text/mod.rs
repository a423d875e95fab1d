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

use crate::doc::Block;

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
