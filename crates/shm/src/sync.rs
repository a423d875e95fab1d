//! The synchronization the rings and the link are built on, in one place so that loom can
//! stand in for it (tokio's `src/loom/` does the same).
//!
//! Normal builds re-export `std`'s atomics and call the Linux futex: the helpers here are
//! `#[inline(always)]` casts and calls, so the ring's hot path compiles to exactly what it
//! did when it used `std` directly. Built with `RUSTFLAGS="--cfg loom"` (`ci/loom.sh`), the
//! atomics are loom's, the futex is a loom condition variable, and every access to ring
//! data is reported to a loom cell per cache line, so that loom's model checker explores
//! the interleavings and weak-memory outcomes of the real ring and close code and flags a
//! read of ring bytes that does not happen after their write.
//!
//! Under loom, memory handed to [`crate::ring::RingMem::new`] or the link must first be
//! prepared with `place_*` (the `loom_models` module does this): a loom atomic is an
//! object, not 4 or 8 bytes at an address, so one is constructed at each offset the code
//! uses as an atomic word.

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

use std::time::Duration;

/// The atomic 64-bit word at `p`.
///
/// # Safety
/// `p` must be 8-byte aligned and valid for `'a`. Under loom, a model atomic must have
/// been placed at `p` with [`place_u64`].
#[inline(always)]
pub unsafe fn u64_at<'a>(p: *mut u8) -> &'a AtomicU64 {
    #[cfg(not(loom))]
    // SAFETY: forwarded to the caller; any aligned, valid u64 may be used atomically.
    let w = unsafe { AtomicU64::from_ptr(p.cast()) };
    #[cfg(loom)]
    // SAFETY: forwarded; a model atomic lives at `p`.
    let w = unsafe { &*p.cast::<AtomicU64>() };
    w
}

/// The atomic 32-bit word at `p`.
///
/// # Safety
/// As for [`u64_at`], 4-byte aligned, placed with [`place_u32`] under loom.
#[inline(always)]
pub unsafe fn u32_at<'a>(p: *mut u8) -> &'a AtomicU32 {
    #[cfg(not(loom))]
    // SAFETY: forwarded to the caller; any aligned, valid u32 may be used atomically.
    let w = unsafe { AtomicU32::from_ptr(p.cast()) };
    #[cfg(loom)]
    // SAFETY: forwarded; a model atomic lives at `p`.
    let w = unsafe { &*p.cast::<AtomicU32>() };
    w
}

/// Sleeps while `*word == expected`, at most `timeout`; spurious returns are allowed.
/// Under loom the sleep has no timeout, so a lost wake-up is a deadlock loom reports.
#[inline(always)]
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    #[cfg(not(loom))]
    crate::sys::futex_wait(word, expected, timeout);
    #[cfg(loom)]
    {
        let _ = timeout;
        model::futex_wait(word, expected);
    }
}

/// Wakes every thread sleeping on `word`.
#[inline(always)]
pub fn futex_wake(word: &AtomicU32) {
    #[cfg(not(loom))]
    crate::sys::futex_wake(word);
    #[cfg(loom)]
    model::futex_wake(word);
}

/// A compiler-only barrier: no reordering across it by the compiler, no instruction (under
/// loom, where no wake-up skips its fence, loom's fence).
#[inline(always)]
pub fn compiler_fence_seq_cst() {
    #[cfg(not(loom))]
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(loom)]
    fence(Ordering::SeqCst);
}

/// Whether this process receives [`fence_everyone`]'s barriers (registered for them,
/// `membarrier(2)`; the registration starts on the first call and is waited for up to
/// `wait`): a waker in it may then skip its own fence (see `ring::wake`). Never under
/// loom, whose models check the fenced handshake.
#[inline]
pub fn fenced_by_peers(wait: Duration) -> bool {
    #[cfg(not(loom))]
    return crate::sys::membarrier_registered(wait);
    #[cfg(loom)]
    {
        let _ = wait;
        false
    }
}

/// A full barrier on this thread and, where this process is registered for them
/// ([`fenced_by_peers`]), on every running thread of every registered process: a waker
/// there that skipped its fence is ordered as if it had fenced. `fence(SeqCst)` otherwise
/// (and should the call fail, a peer that skipped its fence may leave a sleeper to its
/// sleep's timeout).
pub fn fence_everyone() {
    #[cfg(not(loom))]
    if crate::sys::membarrier_registered(Duration::ZERO) && crate::sys::membarrier_global() {
        return;
    }
    fence(Ordering::SeqCst);
}

#[cfg(loom)]
pub use model::*;

#[cfg(loom)]
mod model {
    use loom::sync::{Condvar, Mutex};

    use super::{AtomicU32, AtomicU64, Ordering};

    /// Tracks accesses to one 64-byte line of ring data.
    pub type LineCell = loom::cell::UnsafeCell<()>;

    struct Futex {
        lock: Mutex<()>,
        sleepers: Condvar,
    }

    loom::lazy_static! {
        // One wait queue for every word, as the kernel hashes words into shared buckets:
        // a wake-up meant for another word is a spurious return, which callers allow.
        static ref FUTEX: Futex = Futex {
            lock: Mutex::new(()),
            sleepers: Condvar::new(),
        };
    }

    /// The kernel's FUTEX_WAIT: under the bucket lock, sleep only if the word still holds
    /// `expected`.
    pub fn futex_wait(word: &AtomicU32, expected: u32) {
        let guard = FUTEX.lock.lock().unwrap();
        if word.load(Ordering::Relaxed) == expected {
            drop(FUTEX.sleepers.wait(guard).unwrap());
        }
    }

    /// The kernel's FUTEX_WAKE.
    pub fn futex_wake(_word: &AtomicU32) {
        let _guard = FUTEX.lock.lock().unwrap();
        FUTEX.sleepers.notify_all();
    }

    const _: () = assert!(
        std::mem::size_of::<AtomicU64>() <= 64 && std::mem::align_of::<AtomicU64>() <= 8,
        "a loom atomic must fit the 64-byte slot of a shared word"
    );
    const _: () = assert!(std::mem::align_of::<LineCell>() <= 8);

    /// Constructs a model atomic holding `v` at `p`.
    ///
    /// # Safety
    /// `p` must be 8-byte aligned with 64 writable bytes that nothing else uses.
    pub unsafe fn place_u64(p: *mut u8, v: u64) {
        // SAFETY: forwarded; the size and alignment are checked above.
        unsafe { p.cast::<AtomicU64>().write(AtomicU64::new(v)) }
    }

    /// Constructs a model atomic holding `v` at `p`.
    ///
    /// # Safety
    /// As for [`place_u64`].
    pub unsafe fn place_u32(p: *mut u8, v: u32) {
        // SAFETY: forwarded; a loom AtomicU32 is no bigger than a loom AtomicU64.
        unsafe { p.cast::<AtomicU32>().write(AtomicU32::new(v)) }
    }

    /// Constructs `n` line cells at `p`.
    ///
    /// # Safety
    /// `p` must be 8-byte aligned with room for `n` cells that nothing else uses.
    pub unsafe fn place_cells(p: *mut u8, n: usize) {
        for i in 0..n {
            // SAFETY: forwarded; cell `i` lies inside the room the caller gave.
            unsafe { p.cast::<LineCell>().add(i).write(LineCell::new(())) }
        }
    }
}
