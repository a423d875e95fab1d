//! The [`Sink`] seam: where the merger puts the blocks it receives.

use std::path::{Path, PathBuf};

use crate::container::{BlockKind, ContainerOptions, ContainerWriter};
use crate::error::Result;

/// One committed block, as the merger hands it to its sink.
#[derive(Clone, Copy, Debug)]
pub struct Block<'a> {
    /// The producer's id.
    pub producer: u32,
    /// The producer's sequence number (0, 1, 2, ...).
    pub seq: u64,
    /// What the payload holds.
    pub kind: BlockKind,
    /// The payload (slot memory, valid for the call).
    pub payload: &'a [u8],
    /// CRC32C of the payload as computed by the producer.
    pub crc: u32,
}

/// What a sink wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SinkSummary {
    /// Blocks written.
    pub blocks: u64,
    /// Payload bytes received.
    pub payload_bytes: u64,
    /// Size of the output file.
    pub file_bytes: u64,
    /// Rows written (tabular sinks).
    pub rows: Option<u64>,
}

/// The output of a merger. The merger calls it from one thread, blocks of one producer in
/// sequence order; a failing `write` makes the merger refuse every later commit.
pub trait Sink: Send {
    /// The output file (named in error messages).
    fn path(&self) -> &Path;

    /// Writes one block. When this returns, the block is in the file (the page cache);
    /// the merger acknowledges it to the producer then, or after [`Sink::sync`].
    fn write(&mut self, block: &Block<'_>) -> Result<()>;

    /// Makes what was written durable (`fdatasync`).
    fn sync(&mut self) -> Result<()>;

    /// Closes the output (index, footer) and, with `sync`, makes it durable.
    fn finish(self: Box<Self>, sync: bool) -> Result<SinkSummary>;
}

/// Writes blocks into an accio container file (see [`crate::container`]).
#[derive(Debug)]
pub struct ContainerSink {
    writer: ContainerWriter,
    path: PathBuf,
}

impl ContainerSink {
    /// Creates (or truncates) the container file at `path`.
    pub fn create(path: impl AsRef<Path>, opts: ContainerOptions) -> Result<ContainerSink> {
        let writer = ContainerWriter::create(path.as_ref(), opts)?;
        Ok(ContainerSink {
            path: writer.path().to_path_buf(),
            writer,
        })
    }
}

impl Sink for ContainerSink {
    fn path(&self) -> &Path {
        &self.path
    }

    fn write(&mut self, b: &Block<'_>) -> Result<()> {
        self.writer
            .append_with_crc(b.producer, b.seq, b.kind, b.payload, b.crc)
            .map(|_| ())
    }

    fn sync(&mut self) -> Result<()> {
        self.writer.sync()
    }

    fn finish(self: Box<Self>, sync: bool) -> Result<SinkSummary> {
        let s = self.writer.finish(sync)?;
        Ok(SinkSummary {
            blocks: s.blocks,
            payload_bytes: s.payload_bytes,
            file_bytes: s.file_bytes,
            rows: None,
        })
    }
}
