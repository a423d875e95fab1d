//! The [`Sink`] seam: where the merger puts the blocks it receives.

use std::path::{Path, PathBuf};

use crate::container::{block_extent, BlockKind, ContainerOptions, ContainerWriter, Rest};
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

    /// The in-place interface, for sinks whose file producers on this machine may write
    /// into directly (one copy in all; see [`crate::merger`]). `None` (the default): the
    /// merger hands every block to [`Sink::write`].
    fn direct(&mut self) -> Option<&mut dyn DirectSink> {
        None
    }
}

/// A sink whose payload bytes producers write in place, into room the merger reserves in
/// the file; the merger writes only the metadata (headers: the commit records).
pub trait DirectSink {
    /// The output file's path, for messages (producers never open it: they are handed
    /// [`DirectSink::lend`]'s descriptor).
    fn file_path(&self) -> &Path;

    /// A descriptor of the output for producers to write in place, which the merger hands
    /// them over its connection ([`accio::Endpoint::send_file`]): a new open file
    /// description of the same file, readable and writable, so that the writer's own
    /// (the one holding the file's lock) never leaves this process.
    fn lend(&self) -> std::io::Result<std::fs::File>;

    /// `Ok` when producers can write the file in place here and it pays off; otherwise
    /// why not (the merger then copies).
    fn support(&self) -> std::result::Result<(), String>;

    /// Whether reading a block back from the file while producers write the next ones
    /// costs them nothing, so that the merger may checksum blocks committed without one
    /// (see [`DirectSink::commit`]). Default: no.
    fn reads_back_cheaply(&self) -> bool {
        false
    }

    /// The granularity of reservations (the file's block alignment).
    fn reserve_align(&self) -> u64;

    /// Reserves room for up to `bytes` payload bytes (a multiple of
    /// [`DirectSink::reserve_align`]); returns the file offset where the payload goes.
    fn reserve(&mut self, bytes: u64) -> Result<u64>;

    /// Records the block written into the room of `bytes` whose payload starts at
    /// `payload_at`: its length, kind and the checksum of its bytes, which are in the file
    /// already (and which the sink reads to compute it when the block comes without one).
    /// The rest of the room, if the block leaves any, becomes what `rest` says: still
    /// reserved ([`Rest::Lent`]: its producer writes its next blocks there,
    /// [`crate::wire::room_rest`]) or a hole.
    fn commit(
        &mut self,
        payload_at: u64,
        bytes: u64,
        block: &DirectBlock,
        rest: Rest,
    ) -> Result<()>;

    /// Marks reserved room that will not be committed as a hole. `released`: its producer
    /// gave it back (unmapped) rather than vanished, so the room may be cut off the end
    /// of the file at close; room of a producer that may still have it mapped is kept
    /// (cutting it would turn that producer's next store into a `SIGBUS`).
    fn abandon(&mut self, payload_at: u64, bytes: u64, released: bool) -> Result<()>;
}

/// A block written in place (see [`DirectSink::commit`]).
#[derive(Clone, Copy, Debug)]
pub struct DirectBlock {
    /// The producer's id.
    pub producer: u32,
    /// The producer's sequence number.
    pub seq: u64,
    /// What the payload holds.
    pub kind: BlockKind,
    /// Payload length.
    pub len: u64,
    /// CRC32C of the payload, computed by the producer over the bytes it wrote; `None`:
    /// the sink computes it from the file.
    pub crc: Option<u32>,
}

/// Writes blocks into an accio container file (see [`crate::container`]).
#[derive(Debug)]
pub struct ContainerSink {
    writer: ContainerWriter,
    path: PathBuf,
}

impl ContainerSink {
    /// Creates (or truncates) the container file at `path`, holding its lock for the
    /// sink's life: a file another writer holds is refused with
    /// [`crate::MergeError::Locked`] (see [`ContainerWriter::create`]) and left as it was.
    pub fn create(path: impl AsRef<Path>, opts: ContainerOptions) -> Result<ContainerSink> {
        let writer = ContainerWriter::create(path.as_ref(), opts)?;
        // Producers in other working directories reopen the file by this name.
        let path = std::fs::canonicalize(writer.path()).unwrap_or_else(|_| writer.path().into());
        Ok(ContainerSink { path, writer })
    }

    /// How the file's room is claimed when producers write in place
    /// ([`crate::container::ClaimMode::for_file`]).
    pub fn claim_mode(&self) -> crate::container::ClaimMode {
        self.writer.claim_mode()
    }

    fn start_of(&self, payload_at: u64) -> u64 {
        payload_at - block_extent(0, 0, self.writer.align()).0
    }
}

/// File systems where producers write the output in place: each holds shared writable
/// mappings of regular files and `fallocate` (which the producers use to claim their room
/// up front, so a full disk is an error, not a `SIGBUS`). Elsewhere (NFS, FUSE, 9p,
/// overlayfs, ...) mappings may be refused, unsafe to share between machines, or slow to
/// write back, and the merger copies.
const DIRECT_FS: [(u64, &str); 4] = [
    (crate::fs_type::TMPFS, "tmpfs"),
    (0xEF53, "ext2/3/4"),
    (0x5846_5342, "xfs"),
    (0x9123_683E, "btrfs"),
];

impl DirectSink for ContainerSink {
    fn file_path(&self) -> &Path {
        &self.path
    }

    fn lend(&self) -> std::io::Result<std::fs::File> {
        // Our own file, reopened: the same file whatever became of its path since.
        accio::reopen(self.writer.file(), true)
    }

    fn support(&self) -> std::result::Result<(), String> {
        // SAFETY: sysconf only reads a constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u32;
        if self.writer.align() < page {
            return Err(format!(
                "the block alignment {} is below the page size {page}: payloads cannot be mapped",
                self.writer.align()
            ));
        }
        let fd = self.writer.raw_fd();
        let ty = crate::fs_type::magic(fd).map_err(|e| format!("fstatfs: {e}"))?;
        let Some((_, name)) = DIRECT_FS.iter().find(|(t, _)| *t == ty) else {
            return Err(format!(
                "file system type {ty:#x} is not one known to take shared writable mappings \
                 ({})",
                DIRECT_FS.map(|f| f.1).join(", ")
            ));
        };
        // SAFETY: maps the first page of our own file shared and writable, then unmaps it
        // without touching it: only asks whether the kernel allows the mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!(
                "{name} refused a shared writable mapping: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: `p` is the mapping made just above, of that length.
        unsafe { libc::munmap(p, page as usize) };
        Ok(())
    }

    /// On tmpfs. On ext4 the merger's read faults on the pages being written slowed one
    /// producer writing in place 1.6x (`accio bench merge` into an ext4 loop device,
    /// synced at close, 5 interleaved runs: 1.01-1.59 GB/s against 1.35-2.30).
    fn reads_back_cheaply(&self) -> bool {
        self.writer.claim_mode() == crate::container::ClaimMode::HeaderPages
    }

    fn reserve_align(&self) -> u64 {
        u64::from(self.writer.align())
    }

    fn reserve(&mut self, bytes: u64) -> Result<u64> {
        let start = self.writer.reserve(bytes)?;
        Ok(block_extent(start, 0, self.writer.align()).0)
    }

    fn commit(&mut self, payload_at: u64, bytes: u64, b: &DirectBlock, rest: Rest) -> Result<()> {
        let start = self.start_of(payload_at);
        let crc = match b.crc {
            Some(c) => c,
            None => self.writer.reserved_payload_crc(start, b.len)?,
        };
        self.writer
            .commit_reserved(start, bytes, b.producer, b.seq, b.kind, b.len, crc, rest)
            .map(|_| ())
    }

    fn abandon(&mut self, payload_at: u64, bytes: u64, released: bool) -> Result<()> {
        let start = self.start_of(payload_at);
        self.writer.abandon_reserved(start, bytes, released)
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

    fn direct(&mut self) -> Option<&mut dyn DirectSink> {
        Some(self)
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
