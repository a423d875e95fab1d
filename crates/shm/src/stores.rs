//! How the ring producer writes large payloads: through the cache, or past it with
//! non-temporal stores, whichever the host's placement of the two cores favours now.
//!
//! A cached store of a ring line first takes the line from the consumer's cache, which
//! read it one lap earlier; the consumer then reads it back from the producer's. Between
//! cores close together both transfers are cheap (4 KiB messages stream at 35-50 GB/s end
//! to end here). When the host puts this VM's two vCPUs far apart (`MACHINE_NOTES.md`,
//! trait 7), every line that changes hands costs so much that a stream of 1 KiB to 4 MiB
//! messages crawls at about 2 GB/s, UCX's as much as ours. A non-temporal store only
//! invalidates the consumer's copy and sends the line to memory, which the consumer then
//! streams from: in that phase 2.3 GB/s at 1 KiB, 2.8 at 2 KiB, 6.8 at 4 KiB, 16 at 16 KiB
//! (against 1.7, 2.0, 2.0 and 2.4 cached). Between close cores it loses badly (1 KiB: 4
//! against 31 GB/s), so it has to follow the phase.
//!
//! The producer sees the phase in its own cached copies, which wait for the lines to come
//! from the consumer's core: 2-7 GB/s from a far core, 9 and more from a close one. So one
//! large payload in [`Stores::SAMPLE`] is copied through the cache, fenced (the stores of
//! a short copy could otherwise still wait in the store buffer) and timed with the time
//! stamp counter (a `clock_gettime` there, with the fences it takes to order the read,
//! cost a third of the 4 KiB stream between close cores); two in a row below
//! [`Stores::SLOW_GBPS`] switch the payloads in between to streaming stores, one above it
//! switches them back. What the producer cannot see is the consumer's side alone: a 1 or
//! 2 KiB ping-pong whose lap is long enough for the lines to leave the consumer's cache
//! stays cached (0.88 and 1.4 us one way between far cores, 0.73 and 0.83 streaming).

use accio_core::copy_bytes;

/// How a shm endpoint writes message payloads of 1 KiB and more into its ring
/// ([`crate::ShmOptions::stores`], `ACCIO_SHM_STORES=auto|cached|streaming`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ShmStores {
    /// Follow the host's placement of the two cores (see the module docs).
    #[default]
    Auto,
    /// Always through the cache.
    Cached,
    /// Always with non-temporal stores.
    Streaming,
}

impl std::str::FromStr for ShmStores {
    type Err = String;

    fn from_str(s: &str) -> Result<ShmStores, String> {
        match s {
            "auto" => Ok(ShmStores::Auto),
            "cached" => Ok(ShmStores::Cached),
            "streaming" => Ok(ShmStores::Streaming),
            _ => Err(format!(
                "unknown shm store mode {s:?} (auto, cached or streaming)"
            )),
        }
    }
}

/// The store policy of one ring producer.
#[derive(Debug, Default)]
pub(crate) struct Stores {
    mode: ShmStores,
    streaming: bool,
    /// Large payloads copied so far (wrapping).
    large: u32,
    /// Timed cached copies in a row that were slow.
    slow: u8,
}

impl Stores {
    pub(crate) fn new(mode: ShmStores) -> Stores {
        Stores {
            mode,
            streaming: mode == ShmStores::Streaming,
            ..Stores::default()
        }
    }

    /// Payloads from this size up follow the policy; smaller ones always go through the
    /// cache (a few lines the consumer waits for, which any cache hands over sooner than
    /// memory; `copy_streaming` copies them so anyway).
    const MIN: usize = 1024;
    /// One large payload in this many is a timed cached copy.
    const SAMPLE: u32 = 64;
    /// A cached copy slower than this many bytes per nanosecond means a far consumer.
    const SLOW_GBPS: f64 = 8.0;

    /// Copies `n` bytes of a ring payload from `src` to `dst`; a streaming copy ends with
    /// a store fence, so the payload is ordered before the stamp's release store.
    ///
    /// # Safety
    /// As [`copy_bytes`].
    #[inline]
    pub(crate) unsafe fn copy(&mut self, dst: *mut u8, src: *const u8, n: usize) {
        if cfg!(loom) || n < Self::MIN || self.mode == ShmStores::Cached || !clock::usable() {
            // SAFETY: forwarded caller contract.
            return unsafe { copy_bytes(dst, src, n) };
        }
        self.large = self.large.wrapping_add(1);
        if self.mode == ShmStores::Auto && self.large.is_multiple_of(Self::SAMPLE) {
            let t = clock::ticks();
            // SAFETY: forwarded caller contract.
            unsafe { copy_bytes(dst, src, n) };
            // The stores of a short copy could still sit in the store buffer, waiting for
            // their lines: the fence makes the time include them.
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            self.judge(n, clock::ns(clock::ticks().wrapping_sub(t)));
        } else if self.streaming {
            // SAFETY: forwarded caller contract.
            unsafe { accio_core::copy_streaming(dst, src, n) };
        } else {
            // SAFETY: forwarded caller contract.
            unsafe { copy_bytes(dst, src, n) };
        }
    }

    /// Takes a timed cached copy of `n` bytes in `ns` nanoseconds into account: two slow
    /// ones in a row turn streaming stores on, a fast one turns them off.
    fn judge(&mut self, n: usize, ns: f64) {
        if (n as f64) < Self::SLOW_GBPS * ns {
            self.slow = self.slow.saturating_add(1);
        } else {
            self.slow = 0;
        }
        self.streaming = self.slow >= 2;
    }
}

/// The time stamp counter, read without ordering fences, and its rate, measured once per
/// process against the monotonic clock (a 50 us spin at the first large payload). On a
/// CPU whose counter does not tick at a constant rate the policy judges with a skewed
/// clock; it only ever chooses between two correct copies.
mod clock {
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    /// Ticks per nanosecond; 0 where there is no counter to read (not x86-64).
    fn rate() -> f64 {
        static RATE: OnceLock<f64> = OnceLock::new();
        *RATE.get_or_init(|| {
            if !cfg!(target_arch = "x86_64") {
                return 0.0;
            }
            // 50 us against the monotonic clock: a rate within 0.1%, once.
            let (t0, c0) = (Instant::now(), ticks());
            while t0.elapsed() < Duration::from_micros(50) {
                std::hint::spin_loop();
            }
            let (dt, dc) = (t0.elapsed(), ticks().wrapping_sub(c0));
            dc as f64 / dt.as_nanos().max(1) as f64
        })
    }

    /// Whether there is a counter to time copies with (x86-64, where the streaming copy
    /// also exists).
    #[inline]
    pub(super) fn usable() -> bool {
        rate() > 0.0
    }

    #[inline]
    pub(super) fn ticks() -> u64 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: RDTSC is part of the x86-64 baseline.
        return unsafe { std::arch::x86_64::_rdtsc() };
        #[cfg(not(target_arch = "x86_64"))]
        0
    }

    /// Nanoseconds in `ticks`.
    #[inline]
    pub(super) fn ns(ticks: u64) -> f64 {
        ticks as f64 / rate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_slow_copies_in_a_row_turn_streaming_on_and_one_fast_turns_it_off() {
        let mut s = Stores::new(ShmStores::Auto);
        let (n, slow, fast) = (4096, 4096.0 / 2.0, 4096.0 / 30.0);
        s.judge(n, slow);
        assert!(!s.streaming, "one slow copy may be a preemption");
        s.judge(n, fast);
        s.judge(n, slow);
        assert!(!s.streaming, "slow copies must come in a row");
        s.judge(n, slow);
        assert!(s.streaming);
        s.judge(n, slow);
        assert!(s.streaming);
        s.judge(n, fast);
        assert!(!s.streaming);
    }

    #[test]
    fn every_mode_copies_every_size_and_alignment_exactly() {
        let src: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + 3) as u8).collect();
        for mode in [ShmStores::Auto, ShmStores::Cached, ShmStores::Streaming] {
            let mut s = Stores::new(mode);
            for n in [
                0, 1, 63, 64, 1023, 1024, 1500, 4095, 4096, 4097, 65_536, 65_600,
            ] {
                for off in [0, 1, 17, 64] {
                    let mut dst = vec![0u8; n + 128];
                    // SAFETY: `dst` holds `n` bytes from `off`, `src` holds `n` bytes from
                    // 3; two distinct vectors.
                    unsafe { s.copy(dst.as_mut_ptr().add(off), src.as_ptr().add(3), n) };
                    assert_eq!(&dst[off..off + n], &src[3..3 + n], "{mode:?} {n} @ {off}");
                    assert!(dst[..off].iter().chain(&dst[off + n..]).all(|&b| b == 0));
                }
            }
        }
    }
}
