//! The accio container format: one file, many producers' blocks, readable after a crash.
//!
//! Layout (the full specification is `docs/FORMAT.md`):
//!
//! ```text
//! file header (64 B) | pad to align | block | block | ... | index | trailer (64 B)
//! block = block header (64 B: magic, producer, kind, seq, len, payload CRC32C, header CRC32C)
//!         | pad to align | payload | pad to align
//! ```
//!
//! Blocks are only ever appended, each with one `pwritev`; the index and trailer are
//! written at close. A file cut short anywhere (crash, `kill -9`, full disk) still has
//! every complete block, which a reader finds by scanning when the trailer is missing.
//!
//! **Alignment.** Blocks start at multiples of the file's alignment (default 4096), and
//! the payload starts one aligned header slot after its header. With 4096, payloads are
//! page-aligned in the file: the copy from a page-aligned slot into the page cache has no
//! 4 KiB aliasing (`MACHINE_NOTES.md` trait 1), and O_DIRECT readers can read payloads in
//! place. The cost is up to 2 × 4 KiB of padding per block, 0.4% of a 2 MiB block; files
//! of many small blocks should use an alignment of 64.

mod follow;
mod format;
mod headers;
mod lock;
mod reader;
mod writer;

pub use follow::Follower;
pub use format::{
    block_extent, round_up, BlockHeader, BlockKind, FileHeader, IndexEntry, Trailer, DEFAULT_ALIGN,
    FILE_MOVED, HEADER_BYTES, MAX_ALIGN, MIN_ALIGN, TRAILER_CLEAN, VERSION,
};
pub use headers::ClaimMode;
pub use lock::LockHolder;
pub use reader::{
    recover, recover_image, split_records, ContainerReader, Damage, Hole, Layout, ProducerStats,
    Recovery, Verification,
};
pub use writer::{ContainerOptions, ContainerSummary, ContainerWriter, Rest};

#[cfg(test)]
mod tests;
