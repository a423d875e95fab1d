//! # accio-bench
//!
//! Measurements of a node's data paths. Every bench produces [`model::Figure`]s — a value
//! with its unit, its samples summarized as median/min/max, the parameters and method, and
//! the ceiling it should be compared with — collected in one [`model::Report`], which is the
//! truth that tables (and later Markdown/HTML) are rendered from.
//!
//! - [`mem`]: memcpy bandwidth, the ceiling of every in-memory path.
//! - [`transport`]: latency, streaming and RMA bandwidth, connection and registration cost
//!   of each endpoint backend, measured between two processes.
//! - [`fs`]: file-system write / write+sync / cold read / re-read (Colfax methodology).
//! - [`coalesce`]: small-item rates with and without the coalescing layer.
//! - [`merge`]: many producers into one file through the merging file service.
//! - [`info`]: what the node is (CPU, memory, file systems, PCIe links, GPUs).
//! - [`warnings`]: measurement hazards found after a run, as advice on what to do.

pub mod cancel;
pub mod coalesce;
mod emit;
pub mod floors;
pub mod fs;
pub mod mem;
pub mod merge;
pub mod transport;
