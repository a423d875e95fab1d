//! The report as a document: sections of paragraphs, tables, lists and plots, built once
//! from a [`Report`] and rendered by each exporter ([`crate::markdown()`], [`crate::html()`]).
//! Everything a reader sees is decided here; the exporters only choose markup.

use accio_results::model::Report;

pub(crate) mod cells;
mod generic;
mod laplace;
mod mem_fs;
mod overview;
#[cfg(test)]
mod plot_tests;
#[cfg(test)]
mod tests;
mod transport;
pub(crate) mod types;

use cells::has_matrix_params;
pub use cells::{
    ceiling_cell, cpu, cpu_details, fs_paths, huge_pages, is_fs_bench, link, link_name, med_range,
    percent, ratio_cell, ratio_x, utc,
};
use generic::{generic_section, methods_section};
use laplace::laplace_section;
pub use mem_fs::mem_table;
pub(crate) use mem_fs::{fs_capacity, fs_path_row, FsSummary, FS_PATH_HEADERS};
use mem_fs::{fs_section, mem_section};
pub use overview::node_blocks;
use overview::{node_section, summary_section};
use transport::{matrix_section, transport_section};
pub use types::{Block, Plot, PlotRef, Section, Table};

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
    sections.extend(laplace_section(report));
    let mut others: Vec<String> = Vec::new();
    for f in &report.figures {
        let own_section = [
            "mem",
            "fs",
            "transport",
            accio_results::metric::laplace::BENCH,
        ];
        if !own_section.contains(&f.bench.as_str()) && !others.contains(&f.bench) {
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
