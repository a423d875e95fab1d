//! # accio-report
//!
//! Renders accio's results (the `accio-results` model; this crate depends on nothing else of accio) — one [`Report`] (the JSON written by `accio bench`, see
//! `docs/RESULTS.md`) — as Markdown tables and as one self-contained HTML page with plots.
//! The JSON stays the truth: both exporters read only the [`Report`], so `accio report
//! RESULTS.json` draws the same pages from a saved file.
//!
//! ```
//! use accio_results::model::{CeilingSource, Figure, Report, Unit};
//!
//! let mut report = Report::new();
//! for (size, gbps) in [(4096u64, 3.1), (2 << 20, 9.4)] {
//!     report.figures.push(
//!         Figure::new("transport", "stream_bw", Unit::GBps, vec![gbps * 0.95, gbps, gbps * 1.02])
//!             .unwrap()
//!             .param("backend", "shm")
//!             .param("size", size)
//!             .ceiling("memcpy, 1 thread", 12.0, CeilingSource::Measured),
//!     );
//! }
//! let md = accio_report::markdown(&report);
//! assert!(md.contains("| shm stream, 2M | 9.40 |"));
//! let html = accio_report::html(&report);
//! assert!(html.contains("<svg") && html.contains("id=\"accio-results\""));
//! ```
//!
//! - [`markdown()`] and [`html()`]: the two page exporters, built on one [`doc::Document`];
//!   [`csv()`]: one row per figure.
//! - [`compare`]: two runs side by side, changes beyond the noise flagged.
//! - [`summary`]: the headline figures (also printed by `accio bench` at the end of a run).
//! - [`svg`]: the plots, hand-written SVG (why not a plotting crate: see its docs).
//! - [`text`]: the plain-text tables the CLI prints, one module per bench.
//! - [`warnings`]: measurement hazards found after a run, as advice on what to do.
//! - [`write()`]: both files into a folder.

pub mod bars;
pub mod compare;
pub mod csv;
pub mod doc;
pub mod html;
pub mod markdown;
pub mod summary;
pub mod svg;
pub mod text;
pub mod warnings;

use std::path::{Path, PathBuf};

use accio_results::model::Report;

pub use csv::csv;
pub use html::html;
pub use markdown::markdown;

/// File name of the Markdown report in a report folder.
pub const MARKDOWN_FILE: &str = "report.md";
/// File name of the HTML report in a report folder.
pub const HTML_FILE: &str = "report.html";

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file or the folder could not be written.
    #[error("writing {}: {cause}", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// The OS error (in the message, so not also a `source`, which would print it twice
        /// in an error chain).
        cause: std::io::Error,
    },
}

/// The files [`write()`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The Markdown report.
    pub markdown: PathBuf,
    /// The HTML report.
    pub html: PathBuf,
}

/// Writes [`MARKDOWN_FILE`] and [`HTML_FILE`] for `report` into `dir` (created if missing),
/// each through a temporary file and a rename, so a reader never sees half a page.
pub fn write(report: &Report, dir: &Path) -> Result<Written, Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Write {
        path: dir.to_path_buf(),
        cause: e,
    })?;
    let put = |name: &str, text: String| -> Result<PathBuf, Error> {
        let path = dir.join(name);
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| Error::Write {
                path: path.clone(),
                cause: e,
            })?;
        Ok(path)
    };
    Ok(Written {
        markdown: put(MARKDOWN_FILE, markdown(report))?,
        html: put(HTML_FILE, html(report))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_both_files_and_names_the_failing_path() {
        let dir = std::env::temp_dir().join(format!("accio-report-write-{}", std::process::id()));
        let w = write(&Report::new(), &dir).unwrap();
        assert_eq!(w.markdown, dir.join("report.md"));
        assert!(std::fs::read_to_string(&w.html)
            .unwrap()
            .starts_with("<!DOCTYPE html>"));
        assert!(std::fs::read_to_string(&w.markdown)
            .unwrap()
            .starts_with("# accio report"));
        std::fs::remove_dir_all(&dir).unwrap();
        let e = write(&Report::new(), Path::new("/proc/accio-no-such-dir")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("writing /proc/accio-no-such-dir: "),
            "{e}"
        );
    }
}
