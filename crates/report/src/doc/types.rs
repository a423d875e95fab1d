//! The pieces a document is made of: tables, plots, blocks and sections. Every exporter
//! (text, Markdown, HTML) reads these; nothing here decides what a report says.

use crate::bars::StackedBars;
use crate::svg::{Heatmap, LinePlot};

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
    /// Stacked bars (phases per rank).
    Bars(StackedBars),
    /// A plot drawn in full in another section, named here (the summary's pointers to the
    /// transport plots): the page links to it rather than drawing it twice, and the text
    /// exporters leave it out.
    Ref(PlotRef),
}

/// Where a plot drawn elsewhere on the page is.
#[derive(Clone, Debug, PartialEq)]
pub struct PlotRef {
    /// The plot's element id.
    pub id: String,
    /// The plot's title.
    pub title: String,
    /// Title of the section it is drawn in.
    pub section: String,
}

impl Plot {
    /// The plot's title.
    pub fn title(&self) -> &str {
        match self {
            Plot::Line(p) => &p.title,
            Plot::Heatmap(h) => &h.title,
            Plot::Bars(b) => &b.title,
            Plot::Ref(r) => &r.title,
        }
    }

    /// The plot's element id.
    pub fn id(&self) -> &str {
        match self {
            Plot::Line(p) => &p.id,
            Plot::Heatmap(h) => &h.id,
            Plot::Bars(b) => &b.id,
            Plot::Ref(r) => &r.id,
        }
    }

    /// Whether this only points at a plot shown in full elsewhere ([`Plot::Ref`]), which
    /// text exporters leave out.
    pub fn is_glance(&self) -> bool {
        matches!(self, Plot::Ref(_))
    }

    /// The plot as an `<svg>` element (empty for a [`Plot::Ref`], which draws nothing).
    pub fn svg(&self) -> String {
        match self {
            Plot::Line(p) => p.svg(),
            Plot::Heatmap(h) => h.svg(),
            Plot::Bars(b) => b.svg(),
            Plot::Ref(_) => String::new(),
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
