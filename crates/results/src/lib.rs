//! # accio-results
//!
//! What accio's benches measure, as data: one [`model::Report`] of [`model::Figure`]s (a
//! value with its unit, its samples summarized as median/min/max, the parameters and method,
//! and the ceiling it should be compared with), the facts of the node it was measured on
//! ([`node::NodeInfo`]), and the names figures are filed under ([`metric`]). Benches produce
//! into it (through a [`model::Recorder`], which rewrites the JSON after each figure, so a
//! killed run keeps what it measured); exporters (`accio-report`) read from it. Nothing here
//! renders a table or a page.
//!
//! ```
//! use accio_results::model::{CeilingSource, Figure, Report, Unit};
//!
//! let fig = Figure::new("transport", "stream_bw", Unit::GBps, vec![9.1, 9.4, 9.6])
//!     .unwrap()
//!     .param("backend", "shm")
//!     .param("size", 2u64 << 20)
//!     .ceiling("memcpy, 1 thread", 12.0, CeilingSource::Measured);
//! assert_eq!(fig.summary.median, 9.4);
//! let mut report = Report::new();
//! report.figures.push(fig);
//! let back = Report::from_json(&serde_json::to_vec(&report).unwrap(), "memory").unwrap();
//! assert_eq!(back.figures.len(), 1);
//! ```
//!
//! - [`model`]: figures, ceilings, the report and its JSON form (`docs/RESULTS.md`).
//! - [`stats`]: median, min, max and spread of samples.
//! - [`size`]: byte sizes, as written on the command line and as read by people.
//! - [`num`]: numbers with three significant digits, and `median (min–max)`.
//! - [`event`]: what a running bench reports (one event type for every bench).
//! - [`hazard`]: measurement hazards as typed values.
//! - [`metric`]: bench and metric names, and published reference points.
//! - [`node`]: what the node is (CPU, memory, NUMA, file systems, PCIe, GPUs).

pub mod event;
pub mod hazard;
pub mod metric;
pub mod model;
pub mod node;
pub mod num;
pub mod size;
pub mod stats;
