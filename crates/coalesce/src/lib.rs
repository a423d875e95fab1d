//! # accio-coalesce
//!
//! Small writes waste an interconnect: every call has a fixed cost, so cache-line-sized
//! transfers reach a small fraction of what the link carries (seed 001: a few hundred MB/s
//! over SCIF, against 500–3000 MB/s for 16–64 KB messages). This crate turns many small
//! writes into few large transfers, over any [`accio_core::Endpoint`]:
//!
//! - [`CommCache`]: seed 001's `COMMUNICATION_CACHE`. Lines inserted for offsets of a peer
//!   window collect in a set-associative software cache; on a conflict miss the fullest
//!   way leaves as ONE transfer. [`CommCache::flush`] returns once the peer's window holds
//!   everything inserted, as if each line had been written by its own RMA.
//!   A way whose lines are contiguous goes as one RMA straight into the window; a
//!   scattered one ([`Transfer`]) as one message the peer's [`Applier`] copies in
//!   (**push**), or, where the peer's memory can be mapped (`shm`), the applier copies its
//!   lines out of the sender's registered way buffer while the sender goes on inserting
//!   with a spare one (**pull**).
//! - [`Aggregator`] / [`Deaggregator`]: per-destination buffers, as YGM and Conveyors do,
//!   with a bound on total memory and exactly-once, per-sender-ordered delivery.
//! - **Checked mode** for both (seed 001, section 6.2): each datum travels with its
//!   metadata — sender, destination, target offset or coordinate — and the receiver
//!   verifies it, so wrong-destination and wrong-region bugs become [`CheckError`]s.
//!
//! Lines are the unit: an insert is exactly one line at a line boundary, and the cache
//! never sends bytes of a line nobody wrote (a partial line would overwrite the peer's
//! bytes around it). Items smaller than 64 bytes use a line of their own size.
//!
//! ```
//! use std::time::Duration;
//! use accio_coalesce::{Applier, CacheConfig, CommCache, RemoteWindow};
//!
//! # fn main() -> accio_coalesce::Result<()> {
//! let name = format!("shm://coalesce-doc-{}", std::process::id());
//! let listener = accio::listen(&name)?;
//! let receiver = std::thread::spawn(move || -> accio_coalesce::Result<Vec<u8>> {
//!     let ep = listener.accept(Some(Duration::from_secs(5)))?;
//!     let window = ep.register(1 << 20, accio::Access::WRITE)?;
//!     let mut applier = Applier::new(&*ep, window);
//!     applier.announce()?;
//!     while applier.next_flush(Some(Duration::from_secs(5)))?.is_some() {}
//!     let mut line = vec![0u8; 64];
//!     applier.window().read_at(64 * 1000, &mut line)?;
//!     Ok(line)
//! });
//!
//! let ep = accio::connect(&name, Duration::from_secs(5))?;
//! let remote = RemoteWindow::receive(&*ep, Some(Duration::from_secs(5)))?;
//! let mut cache = CommCache::new(&*ep, remote, CacheConfig::new())?;
//! for i in (0..16384u64).rev() {
//!     cache.insert(i * 64, &[i as u8; 64])?; // 64-byte lines, window-relative offsets
//! }
//! let stats = cache.close()?; // flush, then tell the applier we are done
//! assert_eq!(receiver.join().unwrap()?, vec![(1000 % 256) as u8; 64]);
//! assert_eq!(stats.transfers, 32); // 1 MiB in 32 KiB ways
//! # Ok(())
//! # }
//! ```
//!
//! Dependencies: `accio-core` (the endpoint contract) and `thiserror`; nothing else.

pub mod aggregate;
pub mod applier;
mod buf;
pub mod cache;
mod error;
#[cfg(test)]
mod testutil;
mod wire;

pub use aggregate::{
    AggConfig, AggStats, Aggregator, Batch, Deaggregator, Delivered, BATCH_HEADER,
};
pub use applier::{Applier, ApplierStats, Polled};
pub use cache::{CacheConfig, CacheStats, CommCache, Geometry, Placement, RemoteWindow, Transfer};
pub use error::{CheckError, Error, Result};

/// Entry points for the fuzz targets in `fuzz/`; not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    use crate::wire::{self, Msg};

    /// Decodes one cache message exactly as the applier does and reads every part it
    /// declares (indices, metadata, lines, bitmap words); returns the message kind, or
    /// `None` when the decoder refuses it.
    pub fn cache_message(b: &[u8]) -> Option<u8> {
        let m = wire::parse(b).ok()?;
        Some(match m {
            Msg::Hello { .. } => wire::HELLO,
            Msg::Way(w) => {
                for i in 0..w.n {
                    assert_eq!(w.data(i).len(), w.line);
                    let _ = w.index(i);
                    if w.checked {
                        let _ = w.meta(i);
                    }
                }
                wire::WAY
            }
            Msg::Setup { .. } => wire::SETUP,
            Msg::Evict(e) => {
                assert!(e.lo <= e.hi && e.n >= 1 && e.n <= e.hi - e.lo + 1);
                for i in 0..e.words() {
                    let _ = e.word(i);
                }
                wire::EVICT
            }
            Msg::Free(..) => wire::FREE,
            Msg::Flush(..) => wire::FLUSH,
            Msg::Ack(..) => wire::ACK,
            Msg::Bye => wire::BYE,
        })
    }
}
