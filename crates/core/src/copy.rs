//! The one copy routine every accio data path uses.
//!
//! Why not plain `memcpy`: on the CPUs accio is measured on (see `MACHINE_NOTES.md`, trait 1)
//! a copy whose destination lies a few bytes *after* the source within a 4 KiB page
//! (`(dst - src) mod 4096` in `1..64`) runs 4-30x slower, because every load falsely waits
//! for the store just issued to an address with the same low 12 bits ("4K aliasing"). glibc
//! copies forward (`rep movsb` or vector loops) for 2 KiB..~1 MiB and hits it. Copying such
//! ranges backward makes each load address lie *below* every pending store, so no load
//! aliases and the copy runs at full speed.
//!
//! Why `memcpy` in pieces from 2112 bytes: glibc switches from vector loops to `rep movsb`
//! there on this machine (`glibc.cpu.x86_rep_movsb_threshold`), and `rep movsb` copies
//! such sizes slower, above all from lines another core holds. Copies of 2112 bytes to
//! 16 KiB therefore go to `memcpy` 2 KiB at a time, each piece taking glibc's vector loop.
//! `accio bench transport --backend shm`, 4 runs each way interleaved with the build
//! before, close phase: one-way latency 3 KiB 0.45-0.48 us against 0.57, 4 KiB 0.55-0.58
//! against 0.69-0.71, 8 KiB 0.81-0.86 against 0.99-1.0; streaming 4 KiB 44-49 GB/s
//! against 36-38. A loop of our own with 64-byte vectors stayed 15-20% slower than
//! glibc's; from 16 KiB on, pieces were no faster than one `rep movsb`.
//!
//! Why `memcpy` in pieces again above 256 KiB: on AMD CPUs glibc (2.36 here) stops using
//! `rep movsb` at the L2 size and copies larger buffers with a vector loop through the
//! cache, which runs 15-25% slower (here, 1 MiB L2, two runs of a loop like
//! `examples/copy_sizes`: 1 MiB whole 59 GB/s against 71 in 256 KiB pieces, 2 MiB 54-55
//! against 63-64, 32 MiB 28 against 33-34; 512 KiB the same either way). Pieces of 256 KiB stay below the
//! smallest AMD L2 (512 KiB), so each takes `rep movsb`. On Intel CPUs glibc keeps
//! `rep movsb` up to its non-temporal threshold, so pieces change nothing there below it.
//! The shm ring moves 256 KiB records, so it copied in such pieces already: a 2 MiB stream
//! (58 GB/s end to end) then outran a single-thread 2 MiB copy taken whole (54), its own
//! ceiling. All other sizes go to `memcpy` whole.

/// Copies below this size are too short for aliasing to matter.
const ALIAS_MIN: usize = 2048;
/// `(dst - src) mod 4096` below this distance triggers the backward copy.
const ALIAS_WINDOW: usize = 64;
/// Copies of these sizes go to `memcpy` in pieces of [`PIECE`] bytes (module docs): from
/// glibc's `rep movsb` threshold here.
const IN_PIECES: std::ops::Range<usize> = 2112..16384;
/// Below that threshold.
const PIECE: usize = 2048;
/// Copies larger than this go to `memcpy` in pieces of this size (module docs): below
/// the L2 size where glibc stops using `rep movsb` on AMD CPUs.
const LARGE_PIECE: usize = 256 << 10;

/// Copies `n` bytes from `src` to `dst` (non-overlapping), avoiding the 4K-aliasing penalty.
///
/// # Safety
/// `src` must be valid for `n` reads, `dst` for `n` writes, and the ranges must not overlap.
#[inline]
pub unsafe fn copy_bytes(dst: *mut u8, src: *const u8, n: usize) {
    if n <= SMALL {
        // SAFETY: forwarded caller contract.
        unsafe { copy_small(dst, src, n) };
        return;
    }
    let skew = (dst as usize).wrapping_sub(src as usize) % 4096;
    if n >= ALIAS_MIN && skew != 0 && skew < ALIAS_WINDOW {
        // SAFETY: forwarded caller contract.
        unsafe { copy_backward(dst, src, n) }
    } else if IN_PIECES.contains(&n) {
        // SAFETY: forwarded caller contract.
        unsafe { copy_in_pieces(dst, src, n, PIECE) }
    } else if n > LARGE_PIECE {
        // SAFETY: forwarded caller contract.
        unsafe { copy_in_pieces(dst, src, n, LARGE_PIECE) }
    } else {
        // SAFETY: forwarded caller contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) }
    }
}

/// `memcpy` of `n` bytes, `piece` bytes at a time.
///
/// # Safety
/// As [`copy_bytes`].
#[inline]
unsafe fn copy_in_pieces(dst: *mut u8, src: *const u8, n: usize, piece: usize) {
    let mut i = 0;
    while i < n {
        let k = (n - i).min(piece);
        // SAFETY: `i + k <= n`: inside both ranges, which do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), k) };
        i += k;
    }
}

/// Copies up to this size are done inline: a call into `memcpy` and its size dispatch
/// cost as much as the copy (~8% of a 64 B shm `write_to`, `examples/put_rate` under
/// callgrind).
const SMALL: usize = 64;

/// `n <= SMALL` bytes as two possibly overlapping unaligned loads and stores of the
/// largest width that fits, as `memcpy` does for small sizes.
///
/// # Safety
/// As [`copy_bytes`].
#[inline(always)]
unsafe fn copy_small(dst: *mut u8, src: *const u8, n: usize) {
    use std::ptr::{read_unaligned as rd, write_unaligned as wr};
    // SAFETY: each access lies within the first or last `n` bytes of the ranges the caller
    // vouched for; both loads happen before the stores.
    unsafe {
        if n >= 32 {
            let (a, b) = (
                rd(src as *const [u8; 32]),
                rd(src.add(n - 32) as *const [u8; 32]),
            );
            wr(dst as *mut [u8; 32], a);
            wr(dst.add(n - 32) as *mut [u8; 32], b);
        } else if n >= 16 {
            let (a, b) = (rd(src as *const u128), rd(src.add(n - 16) as *const u128));
            wr(dst as *mut u128, a);
            wr(dst.add(n - 16) as *mut u128, b);
        } else if n >= 8 {
            let (a, b) = (rd(src as *const u64), rd(src.add(n - 8) as *const u64));
            wr(dst as *mut u64, a);
            wr(dst.add(n - 8) as *mut u64, b);
        } else if n >= 4 {
            let (a, b) = (rd(src as *const u32), rd(src.add(n - 4) as *const u32));
            wr(dst as *mut u32, a);
            wr(dst.add(n - 4) as *mut u32, b);
        } else {
            for i in 0..n {
                *dst.add(i) = *src.add(i);
            }
        }
    }
}

/// Copies shorter than this go through the cache even when streaming is asked for: the
/// fence and the partial lines at both ends would cost more than the stores save. (A
/// stream of 1 KiB shm messages between far cores: 2.4 GB/s streaming, 1.7 cached.)
const STREAM_MIN: usize = 1024;

/// [`copy_bytes`] with non-temporal stores: the destination lines are written whole to
/// memory, neither read first nor kept in this core's cache. For data its reader will not
/// touch before other work has evicted it, copied into memory another core holds in its
/// cache: a cached store first reads each line from that core (a "read for ownership"
/// per 64 bytes, slow between the cores of a VM that the host may place far apart),
/// a streaming store only invalidates it. Ends with a store fence, so the bytes are
/// visible before any later store (a completion signal) is. Shorter than 1 KiB, a skew
/// that 4K-aliases, or not x86-64: [`copy_bytes`].
///
/// # Safety
/// As [`copy_bytes`].
pub unsafe fn copy_streaming(dst: *mut u8, src: *const u8, n: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let skew = (dst as usize).wrapping_sub(src as usize) % 4096;
        if n >= STREAM_MIN && !(skew != 0 && skew < ALIAS_WINDOW) {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
            // Up to the first 64-byte boundary of the destination through the cache.
            let head = (dst as usize).wrapping_neg() % 64;
            // SAFETY: `head < 64 <= n`; forwarded caller contract.
            unsafe { copy_bytes(dst, src, head) };
            let mut i = head;
            while i + 64 <= n {
                // SAFETY: `i + 64 <= n`, so the line is inside both ranges; `dst + i` is
                // 64-byte aligned (so each 16-byte store is aligned, as `movntdq` needs);
                // SSE2 is part of the x86-64 baseline.
                unsafe {
                    let s = src.add(i) as *const __m128i;
                    let d = dst.add(i) as *mut __m128i;
                    let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
                    let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
                    _mm_stream_si128(d, a);
                    _mm_stream_si128(d.add(1), b);
                    _mm_stream_si128(d.add(2), c);
                    _mm_stream_si128(d.add(3), e);
                }
                i += 64;
            }
            // SAFETY: the last `n - i < 64` bytes; forwarded caller contract. The fence
            // orders the streaming stores before every later store.
            unsafe {
                copy_bytes(dst.add(i), src.add(i), n - i);
                _mm_sfence();
            }
            return;
        }
    }
    // SAFETY: forwarded caller contract.
    unsafe { copy_bytes(dst, src, n) }
}

/// Safe wrapper of [`copy_bytes`] for two slices of equal length.
///
/// # Panics
/// If the lengths differ.
pub fn copy_slice(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_slice: lengths differ");
    // SAFETY: distinct Rust slices of equal length cannot overlap.
    unsafe { copy_bytes(dst.as_mut_ptr(), src.as_ptr(), src.len()) }
}

#[cfg(target_arch = "x86_64")]
unsafe fn copy_backward(dst: *mut u8, src: *const u8, n: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
    let mut i = n;
    while i >= 64 {
        i -= 64;
        // SAFETY: i + 64 <= n, so every 16-byte access is inside both ranges; SSE2 is part
        // of the x86_64 baseline; unaligned loads/stores are used.
        unsafe {
            let s = src.add(i) as *const __m128i;
            let d = dst.add(i) as *mut __m128i;
            let a = _mm_loadu_si128(s);
            let b = _mm_loadu_si128(s.add(1));
            let c = _mm_loadu_si128(s.add(2));
            let e = _mm_loadu_si128(s.add(3));
            _mm_storeu_si128(d.add(3), e);
            _mm_storeu_si128(d.add(2), c);
            _mm_storeu_si128(d.add(1), b);
            _mm_storeu_si128(d, a);
        }
    }
    // SAFETY: the first `i` (< 64) bytes remain; the ranges do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, i) }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn copy_backward(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: forwarded caller contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, n) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_copies_every_size_and_skew_exactly() {
        let src: Vec<u8> = (0..70_000u32).map(|i| (i * 13 + i / 241) as u8).collect();
        let mut dst = vec![0u8; 70_200];
        for n in [0usize, 1, 63, 4095, 4096, 4097, 4160, 32_768, 65_537] {
            for skew in [0usize, 1, 8, 31, 63, 64, 100, 4096 - 8] {
                dst.fill(0xEE);
                // SAFETY: both ranges are in bounds and belong to different vectors.
                unsafe { copy_streaming(dst.as_mut_ptr().add(skew), src.as_ptr(), n) };
                assert_eq!(&dst[skew..skew + n], &src[..n], "n={n} skew={skew}");
                assert!(dst[..skew].iter().all(|&b| b == 0xEE), "wrote before dst");
                assert!(dst[skew + n..].iter().all(|&b| b == 0xEE), "wrote past dst");
            }
        }
    }

    #[test]
    fn copies_every_size_and_skew_exactly() {
        let src: Vec<u8> = (0..600_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let mut dst = vec![0u8; 600_100];
        // Every size of the inline path (0..=64, each width's edges), then memcpy's, in
        // small pieces and whole, then in large pieces (the last one whole or short).
        let large = [
            LARGE_PIECE,
            LARGE_PIECE + 1,
            2 * LARGE_PIECE,
            2 * LARGE_PIECE + 4097,
        ];
        let sizes = (0usize..=65)
            .chain([
                2047, 2048, 2049, 2111, 2112, 4095, 4096, 4097, 5000, 16_383, 16_384, 19_999,
                65_537,
            ])
            .chain(large);
        for n in sizes {
            for skew in [0usize, 1, 8, 31, 63, 64, 100] {
                dst.fill(0xEE);
                // SAFETY: both ranges are in bounds and belong to different vectors.
                unsafe { copy_bytes(dst.as_mut_ptr().add(skew), src.as_ptr(), n) };
                assert_eq!(&dst[skew..skew + n], &src[..n], "n={n} skew={skew}");
                assert!(dst[..skew].iter().all(|&b| b == 0xEE), "wrote before dst");
                assert!(dst[skew + n..].iter().all(|&b| b == 0xEE), "wrote past dst");
            }
        }
    }
}
