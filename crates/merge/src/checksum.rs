//! CRC-32C (Castagnoli, the iSCSI polynomial), the checksum of every header, payload and
//! index in the container.
//!
//! Computed with `crc-fast`, which folds with carry-less multiplies (`VPCLMULQDQ` under
//! AVX-512 where the CPU has it, `PCLMULQDQ` otherwise, portable code elsewhere) instead
//! of the `crc32` instruction the `crc32c` crate uses three lanes of. A producer
//! checksums every block it commits, on the path of the copy, so its speed is the
//! merger's: on this machine's EPYC (`MACHINE_NOTES.md`) a 2 MiB buffer in cache takes
//! 37 µs against 78 (57 against 27 GB/s; 23 against 13 from memory), and a 60-byte header
//! 7.0 ns against 9.5. The fuzz target keeps `crc32c` as an independent check of both.

use crc_fast::{CrcAlgorithm, Digest};

/// CRC-32C of `data`.
pub(crate) fn crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// CRC-32C of a byte stream fed in pieces.
pub(crate) struct Crc32c(Digest);

impl Crc32c {
    pub(crate) fn new() -> Crc32c {
        Crc32c(Digest::new(CrcAlgorithm::Crc32Iscsi))
    }

    pub(crate) fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    pub(crate) fn finish(&self) -> u32 {
        self.0.finalize() as u32
    }
}

/// CRC-32C of the 60 bytes at each of four offsets of `buf` (the checksummed part of a
/// block header), computed side by side: the scan of a damaged range checks a header in
/// every slot that starts with a block magic, and a crafted file can put one in every
/// slot. One header is a chain of eight dependent `crc32` instructions (about 7 ns); four
/// independent chains overlap, so four cost little more than one. Portable code
/// elsewhere.
///
/// # Panics
/// If a header runs past the end of `buf`.
pub(crate) fn crc32c_headers(buf: &[u8], at: [usize; 4]) -> [u32; 4] {
    let last = at.iter().max().copied().unwrap_or(0);
    assert!(
        last.checked_add(60).is_some_and(|end| end <= buf.len()),
        "a header at {last} runs past the {}-byte buffer",
        buf.len()
    );
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2 (checked just above), and every header lies inside
        // `buf` (asserted above).
        return unsafe { crc32c_headers_sse42(buf, at) };
    }
    at.map(|a| crc32c(&buf[a..a + 60]))
}

/// # Safety
/// The CPU must have SSE4.2, and `buf[a..a + 60]` must be in bounds for every `a` in `at`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_headers_sse42(buf: &[u8], at: [usize; 4]) -> [u32; 4] {
    use std::arch::x86_64::{_mm_crc32_u32, _mm_crc32_u64};
    let p = buf.as_ptr();
    // SAFETY: the caller guarantees `a + 60 <= buf.len()` for the header at `a`, and every
    // read ends at or before `a + 60`; unaligned reads of plain bytes.
    let u64_at = |a: usize| unsafe { (p.add(a) as *const u64).read_unaligned() };
    // SAFETY: as above.
    let u32_at = |a: usize| unsafe { (p.add(a) as *const u32).read_unaligned() };
    // The instruction updates a reflected CRC-32C without the standard's inversions: start
    // from all ones, invert at the end.
    let mut c = [u64::from(u32::MAX); 4];
    for w in 0..7 {
        for (crc, a) in c.iter_mut().zip(at) {
            *crc = _mm_crc32_u64(*crc, u64::from_le(u64_at(a + w * 8)));
        }
    }
    let mut out = [0u32; 4];
    for ((o, crc), a) in out.iter_mut().zip(c).zip(at) {
        *o = !_mm_crc32_u32(crc as u32, u32::from_le(u32_at(a + 56)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_headers_side_by_side_match_one_at_a_time() {
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 131 % 251) as u8).collect();
        let at = [0, 61, 123, 240];
        let four = crc32c_headers(&bytes, at);
        for (got, a) in four.iter().zip(at) {
            assert_eq!(*got, crc32c(&bytes[a..a + 60]));
        }
    }

    #[test]
    fn matches_the_castagnoli_check_value_in_one_piece_and_in_many() {
        // The catalogue's check value of CRC-32/ISCSI.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let mut c = Crc32c::new();
        for piece in data.chunks(4093) {
            c.update(piece);
        }
        assert_eq!(c.finish(), crc32c(&data));
        assert_ne!(crc32c(&data[1..]), crc32c(&data));
    }
}
