//! Tabular sinks: producers send Arrow record batches ([`crate::Producer::write_batch`]),
//! the merger appends them to an Arrow IPC file or a Parquet file.
//!
//! A batch travels as a [`BlockKind::ArrowIpc`] block: an Arrow IPC *stream* (schema
//! message, batch, end marker) serialized by the producer straight into its slot. The sink
//! decodes it and appends the batch with the `arrow-ipc` file writer or the `parquet`
//! Arrow writer. Every batch must have the sink's schema; a producer sending another is
//! cut off with [`MergeError::Rejected`] and the others go on.
//!
//! [`ArrowStreamSink`] writes an Arrow IPC *stream* instead, readable while the run goes
//! on: every batch is in the file (flushed) before its block is acknowledged, so a reader
//! such as `pyarrow.ipc.open_stream` sees every acknowledged batch; a batch being written
//! at that moment may show as a cut-off last message, which a reader treats as the end for
//! now. The file and Parquet outputs keep their index in a footer and are readable only
//! after close; for them an acknowledgement means the batch was accepted by the writer.
//! Parquet buffers the open row group in memory: [`ParquetOptions::row_group_bytes`]
//! bounds it, on top of the merger's slot budget.

use std::fs::File;
use std::io::{BufWriter, Cursor};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::{FileWriter, StreamWriter};
use arrow_schema::{Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use crate::container::BlockKind;
use crate::error::{MergeError, Result};
use crate::sink::{Block, Sink, SinkSummary};

/// Decodes the batches of one block, checking kind and schema.
fn batches(path: &Path, schema: &Schema, b: &Block<'_>) -> Result<Vec<arrow_array::RecordBatch>> {
    let reject = |reason: String| MergeError::Rejected {
        path: path.to_path_buf(),
        producer: b.producer,
        seq: b.seq,
        reason,
    };
    if b.kind != BlockKind::ArrowIpc {
        return Err(reject(format!(
            "a {} block where an arrow-ipc block was expected",
            b.kind.name()
        )));
    }
    let reader = StreamReader::try_new(Cursor::new(b.payload), None)
        .map_err(|e| reject(format!("not an arrow ipc stream: {e}")))?;
    if reader.schema().fields() != schema.fields() {
        return Err(reject(format!(
            "batch schema {:?} differs from the output's {:?}",
            reader.schema().fields(),
            schema.fields()
        )));
    }
    reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| reject(format!("undecodable arrow batch: {e}")))
}

/// Appends batches to an Arrow IPC file (the random-access "Feather v2" format).
pub struct ArrowIpcSink {
    path: PathBuf,
    schema: SchemaRef,
    writer: FileWriter<BufWriter<File>>,
    summary: SinkSummary,
}

impl std::fmt::Debug for ArrowIpcSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrowIpcSink")
            .field("path", &self.path)
            .field("summary", &self.summary)
            .finish()
    }
}

impl ArrowIpcSink {
    /// Creates (or truncates) `path` for batches of `schema`.
    pub fn create(path: impl AsRef<Path>, schema: SchemaRef) -> Result<ArrowIpcSink> {
        let path = path.as_ref().to_path_buf();
        let file = File::create(&path).map_err(|e| MergeError::file("creating", &path, e))?;
        let writer = FileWriter::try_new(BufWriter::with_capacity(1 << 20, file), &schema)
            .map_err(|e| arrow_err(&path, "starting", e))?;
        Ok(ArrowIpcSink {
            path,
            schema,
            writer,
            summary: SinkSummary {
                rows: Some(0),
                ..Default::default()
            },
        })
    }
}

fn arrow_err(path: &Path, what: &str, e: impl std::fmt::Display) -> MergeError {
    MergeError::Sink {
        path: path.to_path_buf(),
        reason: format!("{what}: {e}"),
    }
}

/// The end of both sinks' `finish`, once the footer is written: `file` synced if asked,
/// its size in the summary.
fn closed(
    path: &Path,
    file: &std::fs::File,
    sync: bool,
    mut s: SinkSummary,
) -> Result<SinkSummary> {
    if sync {
        file.sync_all()
            .map_err(|e| MergeError::file("syncing", path, e))?;
    }
    s.file_bytes = file.metadata().map_or(0, |m| m.len());
    Ok(s)
}

impl Sink for ArrowIpcSink {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self, b: &Block<'_>) -> Result<()> {
        for batch in batches(&self.path, &self.schema, b)? {
            self.writer
                .write(&batch)
                .map_err(|e| arrow_err(&self.path, "writing a batch", e))?;
            *self.summary.rows.get_or_insert(0) += batch.num_rows() as u64;
        }
        self.summary.blocks += 1;
        self.summary.payload_bytes += b.payload.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.writer
            .flush()
            .map_err(|e| arrow_err(&self.path, "flushing", e))?;
        self.writer
            .get_ref()
            .get_ref()
            .sync_data()
            .map_err(|e| MergeError::file("syncing", &self.path, e))
    }

    fn finish(mut self: Box<Self>, sync: bool) -> Result<SinkSummary> {
        self.writer
            .finish()
            .map_err(|e| arrow_err(&self.path, "writing the footer", e))?;
        let file = self
            .writer
            .into_inner()
            .map_err(|e| arrow_err(&self.path, "flushing", e))?
            .into_inner()
            .map_err(|e| MergeError::file("flushing", &self.path, e.into_error()))?;
        closed(&self.path, &file, sync, self.summary)
    }
}

/// Appends batches to an Arrow IPC stream, readable during the run (see the module docs).
pub struct ArrowStreamSink {
    path: PathBuf,
    schema: SchemaRef,
    writer: StreamWriter<BufWriter<File>>,
    summary: SinkSummary,
}

impl std::fmt::Debug for ArrowStreamSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArrowStreamSink")
            .field("path", &self.path)
            .field("summary", &self.summary)
            .finish()
    }
}

impl ArrowStreamSink {
    /// Creates (or truncates) `path` for batches of `schema`; the schema message is in the
    /// file when this returns, so a reader can open the stream at once.
    pub fn create(path: impl AsRef<Path>, schema: SchemaRef) -> Result<ArrowStreamSink> {
        let path = path.as_ref().to_path_buf();
        let file = File::create(&path).map_err(|e| MergeError::file("creating", &path, e))?;
        let mut writer = StreamWriter::try_new(BufWriter::with_capacity(1 << 20, file), &schema)
            .map_err(|e| arrow_err(&path, "starting", e))?;
        writer
            .flush()
            .map_err(|e| arrow_err(&path, "writing the schema", e))?;
        Ok(ArrowStreamSink {
            path,
            schema,
            writer,
            summary: SinkSummary {
                rows: Some(0),
                ..Default::default()
            },
        })
    }
}

impl Sink for ArrowStreamSink {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self, b: &Block<'_>) -> Result<()> {
        for batch in batches(&self.path, &self.schema, b)? {
            self.writer
                .write(&batch)
                .map_err(|e| arrow_err(&self.path, "writing a batch", e))?;
            *self.summary.rows.get_or_insert(0) += batch.num_rows() as u64;
        }
        // In the file before the acknowledgement: readers see every acknowledged batch.
        self.writer
            .flush()
            .map_err(|e| arrow_err(&self.path, "flushing a batch", e))?;
        self.summary.blocks += 1;
        self.summary.payload_bytes += b.payload.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.writer
            .get_ref()
            .get_ref()
            .sync_data()
            .map_err(|e| MergeError::file("syncing", &self.path, e))
    }

    fn finish(mut self: Box<Self>, sync: bool) -> Result<SinkSummary> {
        self.writer
            .finish()
            .map_err(|e| arrow_err(&self.path, "writing the end-of-stream marker", e))?;
        let file = self
            .writer
            .into_inner()
            .map_err(|e| arrow_err(&self.path, "flushing", e))?
            .into_inner()
            .map_err(|e| MergeError::file("flushing", &self.path, e.into_error()))?;
        closed(&self.path, &file, sync, self.summary)
    }
}

/// Options of the Parquet sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParquetOptions {
    /// Rows per row group at most (default 1 Mi, parquet's default).
    pub row_group_rows: usize,
    /// A row group is closed once its encoded size passes this (default 64 MiB): the
    /// memory the sink holds beyond the merger's budget.
    pub row_group_bytes: usize,
    /// Compress column chunks with Snappy (default on).
    pub snappy: bool,
}

impl Default for ParquetOptions {
    fn default() -> Self {
        ParquetOptions {
            row_group_rows: 1 << 20,
            row_group_bytes: 64 << 20,
            snappy: true,
        }
    }
}

/// Appends batches to a Parquet file, in row groups.
pub struct ParquetSink {
    path: PathBuf,
    schema: SchemaRef,
    writer: ArrowWriter<File>,
    opts: ParquetOptions,
    summary: SinkSummary,
}

impl std::fmt::Debug for ParquetSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParquetSink")
            .field("path", &self.path)
            .field("opts", &self.opts)
            .field("summary", &self.summary)
            .finish()
    }
}

impl ParquetSink {
    /// Creates (or truncates) `path` for batches of `schema`.
    pub fn create(
        path: impl AsRef<Path>,
        schema: SchemaRef,
        opts: ParquetOptions,
    ) -> Result<ParquetSink> {
        let path = path.as_ref().to_path_buf();
        let file = File::create(&path).map_err(|e| MergeError::file("creating", &path, e))?;
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(opts.row_group_rows.max(1)))
            .set_compression(if opts.snappy {
                Compression::SNAPPY
            } else {
                Compression::UNCOMPRESSED
            })
            .build();
        let writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(props))
            .map_err(|e| arrow_err(&path, "starting", e))?;
        Ok(ParquetSink {
            path,
            schema,
            writer,
            opts,
            summary: SinkSummary {
                rows: Some(0),
                ..Default::default()
            },
        })
    }
}

impl Sink for ParquetSink {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self, b: &Block<'_>) -> Result<()> {
        for batch in batches(&self.path, &self.schema, b)? {
            self.writer
                .write(&batch)
                .map_err(|e| arrow_err(&self.path, "writing a batch", e))?;
            *self.summary.rows.get_or_insert(0) += batch.num_rows() as u64;
            if self.writer.in_progress_size() >= self.opts.row_group_bytes {
                self.writer
                    .flush()
                    .map_err(|e| arrow_err(&self.path, "closing a row group", e))?;
            }
        }
        self.summary.blocks += 1;
        self.summary.payload_bytes += b.payload.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.writer
            .flush()
            .map_err(|e| arrow_err(&self.path, "closing a row group", e))?;
        self.writer
            .inner()
            .sync_data()
            .map_err(|e| MergeError::file("syncing", &self.path, e))
    }

    fn finish(self: Box<Self>, sync: bool) -> Result<SinkSummary> {
        let file = self
            .writer
            .into_inner()
            .map_err(|e| arrow_err(&self.path, "writing the footer", e))?;
        closed(&self.path, &file, sync, self.summary)
    }
}
