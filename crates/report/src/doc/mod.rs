//! The report as a document: sections of paragraphs, tables, lists and plots, built once
//! from a [`Report`] and rendered by each exporter ([`crate::markdown`], [`crate::html`]).
//! Everything a reader sees is decided here; the exporters only choose markup.

use accio_results::model::Report;

use crate::svg::{Heatmap, LinePlot};

mod cells;
mod generic;
mod mem_fs;
mod overview;
#[cfg(test)]
mod tests;
mod transport;

pub(crate) use cells::figure_table;
use cells::has_matrix_params;
pub use cells::{ceiling_cell, is_fs_bench, med_range, percent, ratio_cell, utc};
use generic::{generic_section, methods_section};
pub use mem_fs::mem_table;
pub(crate) use mem_fs::{fs_capacity, FsSummary};
use mem_fs::{fs_section, mem_section};
pub use overview::node_blocks;
use overview::{node_section, summary_section};
use transport::{matrix_section, transport_section};

/// A table: headers, rows of cells, and notes printed under it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows of cells, each as long as `headers`.
    pub rows: Vec<Vec<String>>,
    /// Columns to right-align (numbers).
    pub numeric: Vec<bool>,
    /// Lines under the table (what the columns mean, methods).
    pub notes: Vec<String>,
}

impl Table {
    /// A table with `headers`; a column is numeric when its header is listed in
    /// `numeric`.
    pub fn new(headers: &[&str], numeric: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            numeric: headers.iter().map(|h| numeric.contains(h)).collect(),
            notes: Vec::new(),
        }
    }
}

/// A plot.
#[derive(Clone, Debug, PartialEq)]
pub enum Plot {
    /// Lines against a parameter.
    Line(LinePlot),
    /// A matrix heat map.
    Heatmap(Heatmap),
}

impl Plot {
    /// The plot's title.
    pub fn title(&self) -> &str {
        match self {
            Plot::Line(p) => &p.title,
            Plot::Heatmap(h) => &h.title,
        }
    }

    /// The plot's element id.
    pub fn id(&self) -> &str {
        match self {
            Plot::Line(p) => &p.id,
            Plot::Heatmap(h) => &h.id,
        }
    }

    /// Whether this is a repeat of a plot shown in full further down (the summary's "at a
    /// glance" copies), which text exporters leave out.
    pub fn is_glance(&self) -> bool {
        self.id().starts_with("glance-")
    }

    /// The plot as an `<svg>` element.
    pub fn svg(&self) -> String {
        match self {
            Plot::Line(p) => p.svg(),
            Plot::Heatmap(h) => h.svg(),
        }
    }
}

/// One piece of a section.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    /// A sub-heading.
    Heading(String),
    /// A paragraph of plain text.
    Para(String),
    /// A bulleted list.
    List(Vec<String>),
    /// A table.
    Table(Table),
    /// A plot (HTML only; Markdown names it).
    Plot(Plot),
}

/// A top-level section.
#[derive(Clone, Debug, PartialEq)]
pub struct Section {
    /// Anchor id.
    pub id: String,
    /// Heading.
    pub title: String,
    /// Contents, in order.
    pub blocks: Vec<Block>,
}

/// The whole report.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// Page title.
    pub title: String,
    /// The line under the title: where and when it was measured.
    pub subtitle: String,
    /// The sections, in order.
    pub sections: Vec<Section>,
}

/// Builds the document for `report`.
pub fn document(report: &Report) -> Document {
    let host = &report.host;
    let mut sections = vec![summary_section(report)];
    if !report.warnings.is_empty() {
        sections.push(Section {
            id: "warnings".into(),
            title: "Warnings".into(),
            blocks: vec![Block::List(report.warnings.clone())],
        });
    }
    sections.push(node_section(report));
    sections.extend(mem_section(report));
    sections.extend(fs_section(report));
    sections.extend(transport_section(report));
    sections.extend(matrix_section(report));
    let mut others: Vec<String> = Vec::new();
    for f in &report.figures {
        if !["mem", "fs", "transport"].contains(&f.bench.as_str()) && !others.contains(&f.bench) {
            others.push(f.bench.clone());
        }
    }
    for b in others {
        // A bench whose figures are all matrix cells is shown in the matrix section only.
        if report
            .figures
            .iter()
            .any(|f| f.bench == b && !has_matrix_params(f))
        {
            sections.push(generic_section(report, &b));
        }
    }
    sections.push(methods_section(report));
    Document {
        title: format!("accio report: {}", host.hostname),
        subtitle: format!(
            "Measured on {} ({}, {} CPUs, {} memory{}) from {} with `{}` (accio {}, \
             {} schema version {}); {} figures.",
            host.hostname,
            host.cpu,
            host.cores,
            accio_results::size::human_bytes(host.memory_bytes),
            if host.kernel.is_empty() {
                String::new()
            } else {
                format!(", Linux {}", host.kernel)
            },
            utc(report.started_unix),
            report.command.join(" "),
            report.accio_version,
            report.schema,
            report.version,
            report.figures.len()
        ),
        sections,
    }
}
