//! # accio-bench
//!
//! Measurements of a node's data paths. Every bench has one shape: options in (a builder or
//! an options struct), [`accio_results::event::Event`]s out through one callback (its plan,
//! steps, each figure as it is recorded, hazards, skips), and figures recorded into an
//! [`accio_results::model::Recorder`] as they arrive, each beside the ceiling of the same
//! work (`docs/CEILINGS.md`). Rendering them (tables, Markdown, HTML) is `accio-report`'s
//! job; Ctrl-C for all of them is [`cancel`].
//!
//! - [`mem`]: memcpy bandwidth, the ceiling of every in-memory path.
//! - [`transport`]: latency, streaming and RMA bandwidth, connection and registration cost
//!   of each endpoint backend, measured between two processes.
//! - [`fs`]: file-system write / write+sync / cold read / re-read (Colfax methodology).
//! - [`coalesce`]: small-item rates with and without the coalescing layer.
//! - [`merge`]: many producers into one file through the merging file service.
//! - [`floors`]: the latency floors of a pair of cores (a cache line, a raw socket).
//! - [`cancel`]: one Ctrl-C flag and handler for every bench.

pub mod cancel;
pub mod coalesce;
mod emit;
pub mod floors;
pub mod fs;
pub mod mem;
pub mod merge;
mod scratch;
pub mod transport;

/// How many times a ceiling (or a latency floor) that a figure passes beyond the noise is
/// measured again before the figure is read against the best of them: the ceiling met a
/// slower phase of the machine than the figure (`docs/CEILINGS.md`), and a slow phase can
/// outlast one retry.
pub(crate) const CEILING_RETRIES: usize = 3;
