//! # accio-merge
//!
//! The merging file service: many producers (threads, or processes) write blocks into ONE
//! output file through a merger, with a fixed memory budget, back-pressure, per-producer
//! order, and a file that stays readable after a crash.
//!
//! ```
//! use accio_merge::{container::ContainerReader, ContainerSink, Merger, Producer};
//!
//! # fn main() -> Result<(), accio_merge::MergeError> {
//! let path = std::env::temp_dir().join(format!("accio-merge-doc-{}.accio", std::process::id()));
//! let sink = ContainerSink::create(&path, Default::default())?;
//! let addr = format!("shm://accio-merge-doc-{}", std::process::id());
//! let merger = Merger::builder().budget(16 << 20).listen(&addr, Box::new(sink))?;
//!
//! let workers: Vec<_> = (0..4)
//!     .map(|i| {
//!         let addr = addr.clone();
//!         std::thread::spawn(move || -> Result<(), accio_merge::MergeError> {
//!             let mut p = Producer::connect(&addr)?;
//!             let mut buf = p.buffer()?; // a slot of the merger's memory, mapped here
//!             let text = format!("hello from worker {i}");
//!             buf.as_mut_slice()[..text.len()].copy_from_slice(text.as_bytes());
//!             buf.commit(text.len())?; // a small message; no copy of the payload
//!             p.write_record(b"records are packed for you")?;
//!             p.finish()?; // waits until every block is in the file
//!             Ok(())
//!         })
//!     })
//!     .collect();
//! for w in workers {
//!     w.join().unwrap()?;
//! }
//! merger.close()?;
//!
//! let file = ContainerReader::open(&path)?;
//! assert_eq!(file.blocks().len(), 8);
//! assert!(file.verify()?.is_whole());
//! # std::fs::remove_file(&path).unwrap();
//! # Ok(())
//! # }
//! ```
//!
//! ## Pieces
//!
//! - [`Merger`] ([`merger`] module docs: threads, slots, the budget, acknowledgements)
//!   listens on `shm://NAME` or `tcp://HOST:PORT` and owns one [`Sink`].
//! - [`Producer`]: `buffer()` + `commit()` (zero-copy on shm: the buffer is the merger's
//!   slot mapped into the producer, or with [`WriteMode::Direct`] room of the output file
//!   itself), `write_block()`, `write_record()` (packed), and with the `arrow` feature
//!   `write_batch()`.
//! - [`container`]: the file format (`docs/FORMAT.md`), its writer, reader, verifier and
//!   recovery.
//! - Sinks: [`ContainerSink`]; with the `arrow` feature (default) [`ArrowIpcSink`],
//!   [`ArrowStreamSink`] (readable during the run) and [`ParquetSink`].
//! - [`container::Follower`]: reads a container file while it is written.
//! - With the `hdf5` feature, `Hdf5Sink`: one extendable dataset of payloads and a table of
//!   blocks with a producer column, readable by h5py after close and after a crash.
//!
//! ## Failure behaviour
//!
//! - A producer that dies loses only its uncommitted buffer; its slots return to the pool
//!   (or, writing in place, its room becomes a hole that `verify` counts and readers skip:
//!   never a torn block), and everyone else goes on.
//! - A merger that dies leaves every acknowledged block in the file; `accio recover`
//!   gives the file its index back.
//! - A full file system fails the write: the file is cut back to its last whole block and
//!   every producer gets an error naming the file and the cause.
//! - Bytes that break the protocol cost only the connection that sent them.
//! - A producer that neither finishes nor dies holds up [`Merger::close`];
//!   [`Merger::close_within`] bounds that wait and cuts such producers off as lost, keeping
//!   what they committed.
//! - Over tcp, a client that connects and never greets waits aside: it does not hold up
//!   the producers connecting after it.

#[cfg(feature = "arrow")]
mod arrow;
mod checksum;
pub mod container;
mod error;
mod fs_type;
#[cfg(feature = "hdf5")]
mod hdf5;
mod helper;
mod insert;
pub mod merger;
mod producer;
mod sink;
pub mod wire;

#[cfg(feature = "arrow")]
pub use crate::arrow::{ArrowIpcSink, ArrowStreamSink, ParquetOptions, ParquetSink};
pub use error::{MergeError, Result};
#[cfg(feature = "hdf5")]
pub use hdf5::Hdf5Sink;
pub use merger::{Event, MergeSummary, Merger, MergerBuilder, MergerStats, SyncPolicy, WriteMode};
pub use producer::{Buffer, Producer, ProducerOptions, ProducerSummary};
pub use sink::{Block, ContainerSink, DirectBlock, DirectSink, Sink, SinkSummary};

/// The Arrow crates this crate was built with, for producers building batches.
#[cfg(feature = "arrow")]
pub mod arrow_reexports {
    pub use arrow_array;
    pub use arrow_schema;
}
