//! The HDF5 sink (cargo feature `hdf5`, over the system's libhdf5 through `hdf5-metno`).
//!
//! # Layout: one extendable dataset for all producers, with a producer column
//!
//! - `/data`: `uint8`, one dimension, chunked (1 MiB), unlimited: every block's payload,
//!   concatenated in commit order.
//! - `/blocks`: `uint64`, `N × 5`, chunked (1024 rows), unlimited rows: one row per block,
//!   `[producer, seq, kind, offset in /data, length]`.
//! - Root attribute `accio_layout` = `"blocks-v1"`.
//!
//! Why one dataset and not one per producer: the file must stay readable after a crash up
//! to the last flushed block, and every block's append must be cheap. One dataset per
//! producer means creating objects (links in the root group, object headers) while the run
//! goes on, each a metadata change that can be torn by a crash and that HDF5's
//! single-writer/multiple-reader mode forbids altogether; two fixed datasets only grow.
//! Producers come and go by the hundred (the seed ran 240), where one dataset each would
//! also mean as many chunk indexes and as many small last chunks. A reader wanting one
//! producer's data selects its rows of `/blocks` (h5py: `b[b[:, 0] == p]`), as a
//! `producer` column in a table is read.
//!
//! # Durability and readers
//!
//! Each block is appended to `/data`, then its row to `/blocks`, then the file is flushed
//! (`H5Fflush`: data and metadata written to the file) before the block is acknowledged:
//! the row is the block's commit record. A process that reads `/blocks` and then the
//! `/data` ranges its rows name sees whole blocks only. After a crash of the merger the
//! file holds every acknowledged block: h5py opens it (the superblock of the default
//! format version keeps no "open for writing" flag to clear) and reads the rows flushed
//! last. While the run goes on, readers must open the file without HDF5's file locking
//! (`HDF5_USE_FILE_LOCKING=FALSE`: the writer holds the file locked), and a read that
//! races an append may fail and is retried; HDF5's SWMR mode would make such reads safe,
//! but needs the 1.10 file format, whose open-for-writing flag leaves a crashed file
//! unreadable until `h5clear -s`, and it is not exposed by `hdf5-metno`.

use std::path::{Path, PathBuf};

use hdf5_metno as h5;

use crate::error::{MergeError, Result};
use crate::sink::{Block, Sink, SinkSummary};

/// Columns of `/blocks`.
const COLS: usize = 5;

/// Writes blocks into an HDF5 file (see the module docs for the layout).
pub struct Hdf5Sink {
    path: PathBuf,
    file: h5::File,
    data: h5::Dataset,
    blocks: h5::Dataset,
    data_len: usize,
    rows: usize,
    summary: SinkSummary,
}

impl std::fmt::Debug for Hdf5Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hdf5Sink")
            .field("path", &self.path)
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

fn h5_err(path: &Path, what: &str, e: impl std::fmt::Display) -> MergeError {
    MergeError::Sink {
        path: path.to_path_buf(),
        reason: format!("{what}: {e}"),
    }
}

impl Hdf5Sink {
    /// Creates (or truncates) the HDF5 file at `path`.
    pub fn create(path: impl AsRef<Path>) -> Result<Hdf5Sink> {
        let path = path.as_ref().to_path_buf();
        let err = |what: &'static str| {
            let path = path.clone();
            move |e: h5::Error| h5_err(&path, what, e)
        };
        let file = h5::File::create(&path).map_err(err("creating the hdf5 file"))?;
        let data = file
            .new_dataset::<u8>()
            .chunk(1 << 20)
            .shape((0..,))
            .create("data")
            .map_err(err("creating /data"))?;
        let blocks = file
            .new_dataset::<u64>()
            .chunk((1024, COLS))
            .shape((0.., COLS))
            .create("blocks")
            .map_err(err("creating /blocks"))?;
        let layout: h5::types::VarLenUnicode = "blocks-v1".parse().expect("plain text");
        file.new_attr::<h5::types::VarLenUnicode>()
            .create("accio_layout")
            .and_then(|a| a.write_scalar(&layout))
            .map_err(err("writing the layout attribute"))?;
        file.flush().map_err(err("flushing"))?;
        Ok(Hdf5Sink {
            path,
            file,
            data,
            blocks,
            data_len: 0,
            rows: 0,
            summary: SinkSummary::default(),
        })
    }
}

impl Sink for Hdf5Sink {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self, b: &Block<'_>) -> Result<()> {
        let path = self.path.clone();
        let err = |what: &'static str| {
            let path = path.clone();
            move |e: h5::Error| h5_err(&path, what, e)
        };
        let (at, len) = (self.data_len, b.payload.len());
        if len > 0 {
            self.data.resize(at + len).map_err(err("growing /data"))?;
            self.data
                .write_slice(b.payload, at..at + len)
                .map_err(err("writing a block to /data"))?;
        }
        let row = [
            u64::from(b.producer),
            b.seq,
            u64::from(b.kind.code()),
            at as u64,
            len as u64,
        ];
        self.blocks
            .resize((self.rows + 1, COLS))
            .map_err(err("growing /blocks"))?;
        self.blocks
            .write_slice(&row[..], (self.rows, ..))
            .map_err(err("writing a row of /blocks"))?;
        // The row is the commit record: in the file before the acknowledgement.
        self.file.flush().map_err(err("flushing"))?;
        self.data_len += len;
        self.rows += 1;
        self.summary.blocks += 1;
        self.summary.payload_bytes += len as u64;
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.file
            .flush()
            .map_err(|e| h5_err(&self.path, "flushing", e))?;
        std::fs::File::open(&self.path)
            .and_then(|f| f.sync_data())
            .map_err(|e| MergeError::file("syncing", &self.path, e))
    }

    fn finish(self: Box<Self>, sync: bool) -> Result<SinkSummary> {
        let Hdf5Sink {
            path,
            file,
            data,
            blocks,
            mut summary,
            ..
        } = *self;
        drop((data, blocks));
        file.close()
            .map_err(|e| h5_err(&path, "closing the hdf5 file", e))?;
        let f = std::fs::File::open(&path).map_err(|e| MergeError::file("opening", &path, e))?;
        if sync {
            f.sync_all()
                .map_err(|e| MergeError::file("syncing", &path, e))?;
        }
        summary.file_bytes = f.metadata().map_or(0, |m| m.len());
        Ok(summary)
    }
}
