//! The Markdown exporter: the [`Document`](crate::doc::Document) as GitHub-flavoured
//! Markdown tables. Plots are named, not drawn (they are in the HTML page).

use accio_results::model::Report;

use crate::doc::{document, Block, Table};

/// Escapes a table cell: pipes would end the cell, newlines the row.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn table(out: &mut String, t: &Table) {
    let row = |cells: &mut dyn Iterator<Item = String>| {
        let v: Vec<String> = cells.collect();
        format!("| {} |\n", v.join(" | "))
    };
    out.push_str(&row(&mut t.headers.iter().map(|h| cell(h))));
    out.push_str(&row(&mut t.numeric.iter().map(|&n| {
        if n {
            "---:".to_string()
        } else {
            "---".to_string()
        }
    })));
    for r in &t.rows {
        out.push_str(&row(&mut r.iter().map(|c| cell(c))));
    }
    for n in &t.notes {
        out.push('\n');
        out.push_str(n);
        out.push('\n');
    }
}

/// The report as Markdown.
pub fn markdown(report: &Report) -> String {
    let doc = document(report);
    let mut out = format!("# {}\n\n{}\n", doc.title, doc.subtitle);
    out.push_str("\nContents: ");
    let toc: Vec<String> = doc
        .sections
        .iter()
        .map(|s| {
            format!(
                "[{}](#{})",
                s.title,
                s.title.to_lowercase().replace(' ', "-")
            )
        })
        .collect();
    out.push_str(&toc.join(" · "));
    out.push('\n');
    for s in &doc.sections {
        out.push_str(&format!("\n## {}\n", s.title));
        for b in &s.blocks {
            out.push('\n');
            match b {
                Block::Heading(h) => out.push_str(&format!("### {h}\n")),
                Block::Para(p) => {
                    out.push_str(p);
                    out.push('\n');
                }
                Block::List(items) => {
                    for i in items {
                        out.push_str(&format!("- {}\n", i.replace('\n', " ")));
                    }
                }
                Block::Table(t) => table(&mut out, t),
                Block::Plot(p) if p.is_glance() => {}
                Block::Plot(p) => out.push_str(&format!("*Plot in report.html: {}.*\n", p.title())),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_escape_pipes_and_newlines() {
        let mut t = Table::new(&["a|b", "n"], &["n"]);
        t.rows.push(vec!["x\ny".into(), "1".into()]);
        let mut out = String::new();
        table(&mut out, &t);
        assert_eq!(out, "| a\\|b | n |\n| --- | ---: |\n| x y | 1 |\n");
    }
}
