//! Deterministic content: byte `i` of stream `seed` is a pure function of `(seed, i)`, so a
//! receiver can check any byte range of any transfer exactly, without keeping the source.
//!
//! Bytes come from splitmix64 of the 8-byte word that contains them; generating and
//! checking run a word at a time (several GB/s), which keeps 64 MiB transfers cheap.

use std::fmt;

/// A splitmix64 step: a bijective 64-bit mix.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Word `word` of stream `seed`.
pub fn word(seed: u64, word: u64) -> u64 {
    mix(mix(seed) ^ word)
}

/// Byte `index` of stream `seed`.
pub fn byte(seed: u64, index: u64) -> u8 {
    word(seed, index / 8).to_le_bytes()[(index % 8) as usize]
}

/// Fills `buf` with bytes `start..start + buf.len()` of stream `seed`.
pub fn fill(buf: &mut [u8], seed: u64, start: u64) {
    let head = ((8 - start % 8) % 8).min(buf.len() as u64) as usize;
    for (i, b) in buf[..head].iter_mut().enumerate() {
        *b = byte(seed, start + i as u64);
    }
    let first_word = (start + head as u64) / 8;
    let total = buf.len();
    let mut chunks = buf[head..].chunks_exact_mut(8);
    for (k, c) in (&mut chunks).enumerate() {
        c.copy_from_slice(&word(seed, first_word + k as u64).to_le_bytes());
    }
    let tail = chunks.into_remainder();
    let tail_start = start + (total - tail.len()) as u64;
    for (i, b) in tail.iter_mut().enumerate() {
        *b = byte(seed, tail_start + i as u64);
    }
}

/// `len` bytes of stream `seed` starting at `start`.
pub fn vec(len: usize, seed: u64, start: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(&mut v, seed, start);
    v
}

/// The first byte of a buffer that differs from its expected pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Position in the checked buffer.
    pub at: usize,
    /// Length of the checked buffer.
    pub len: usize,
    /// The byte expected there.
    pub expected: u8,
    /// The byte found there.
    pub found: u8,
    /// How many bytes from `at` on differ (up to the end of the buffer).
    pub differing: usize,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "byte {} of {} is {:#04x}, expected {:#04x} ({} of the bytes from there on differ)",
            self.at, self.len, self.found, self.expected, self.differing
        )
    }
}

/// Checks that `buf` holds bytes `start..` of stream `seed`.
pub fn check(buf: &[u8], seed: u64, start: u64) -> Result<(), Mismatch> {
    // Compare in blocks against freshly generated expectation; only on a difference look
    // for the exact byte.
    const BLOCK: usize = 64 * 1024;
    let mut expected = vec![0u8; BLOCK.min(buf.len())];
    let mut pos = 0;
    while pos < buf.len() {
        let n = BLOCK.min(buf.len() - pos);
        let exp = &mut expected[..n];
        fill(exp, seed, start + pos as u64);
        if exp[..] != buf[pos..pos + n] {
            let i = (0..n).find(|&i| exp[i] != buf[pos + i]).unwrap_or(0);
            let at = pos + i;
            let differing = buf[at..]
                .iter()
                .enumerate()
                .filter(|&(k, &b)| b != byte(seed, start + (at + k) as u64))
                .count();
            return Err(Mismatch {
                at,
                len: buf.len(),
                expected: exp[i],
                found: buf[at],
                differing,
            });
        }
        pos += n;
    }
    Ok(())
}

/// Checks `buf`, panicking with `what` and the first mismatch.
#[track_caller]
pub fn assert_matches(buf: &[u8], seed: u64, start: u64, what: &str) {
    if let Err(m) = check(buf, seed, start) {
        panic!("{what}: {m}");
    }
}

/// Message `seq` of stream `seed`, `len` bytes: the sequence number in its first 8 bytes
/// (when it has 8), the rest bytes `8..` (or `0..`) of a stream derived from `(seed, seq)`,
/// so a message delivered out of place fails both checks.
pub fn message(seed: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut v = vec(len, word(seed, seq), 0);
    if len >= 8 {
        v[..8].copy_from_slice(&seq.to_le_bytes());
    }
    v
}

/// Checks that `buf` is [`message`]`(seed, seq, len)`; the error says what is wrong.
pub fn check_message(buf: &[u8], seed: u64, seq: u64, len: usize) -> Result<(), String> {
    let carried = (buf.len() >= 8).then(|| u64::from_le_bytes(buf[..8].try_into().unwrap()));
    if buf.len() != len {
        return Err(format!(
            "message #{seq} has {} bytes, expected {len}{}",
            buf.len(),
            match carried {
                Some(c) => format!(" (it carries sequence number {c})"),
                None => String::new(),
            }
        ));
    }
    match carried {
        Some(c) if c != seq => Err(format!(
            "message #{seq} ({len} bytes) carries sequence number {c}: order or boundaries broken"
        )),
        Some(_) => check(&buf[8..], word(seed, seq), 8)
            .map_err(|m| format!("message #{seq} ({len} bytes): payload {m}")),
        None => {
            check(buf, word(seed, seq), 0).map_err(|m| format!("message #{seq} ({len} bytes): {m}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_agrees_with_byte_at_every_alignment() {
        for start in 0..17u64 {
            for len in [0usize, 1, 7, 8, 9, 15, 16, 17, 100] {
                let v = vec(len, 42, start);
                for (i, &b) in v.iter().enumerate() {
                    assert_eq!(
                        b,
                        byte(42, start + i as u64),
                        "start {start} len {len} i {i}"
                    );
                }
                assert_eq!(check(&v, 42, start), Ok(()));
            }
        }
    }

    #[test]
    fn check_names_first_differing_byte() {
        let mut v = vec(200_000, 7, 3);
        v[150_001] ^= 0x10;
        let m = check(&v, 7, 3).unwrap_err();
        assert_eq!(
            (m.at, m.found ^ m.expected, m.differing),
            (150_001, 0x10, 1)
        );
        assert!(check(&v, 8, 3).is_err(), "another seed must not match");
        assert!(
            check(&v[1..], 7, 3).is_err(),
            "a shifted start must not match"
        );
    }

    #[test]
    fn messages_detect_reordering_and_truncation() {
        for len in [0usize, 3, 8, 9, 5000] {
            let m = message(1, 5, len);
            assert_eq!(check_message(&m, 1, 5, len), Ok(()));
            if len > 0 {
                assert!(
                    check_message(&m, 1, 6, len).is_err(),
                    "len {len}: wrong seq"
                );
                assert!(check_message(&m[..len - 1], 1, 5, len).is_err());
            }
        }
    }
}
