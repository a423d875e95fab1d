//! Wire format of the communication cache's messages (little-endian throughout).
//!
//! Every message starts with an 8-byte header: magic `ACC1`, kind (u8), flags (u8), two
//! reserved bytes (zero).
//!
//! | kind | body after the header |
//! |---|---|
//! | `HELLO` (1) | window offset u64, window length u64, receiver id u32 (`u32::MAX`: none), 4 zero bytes |
//! | `WAY` (2) | line bytes u32, line count n u32, block offset u64 (window-relative); then n line indices u16 (index of the line within the block), zero-padded to 8 bytes; then, with flag `CHECKED`, n × (sender u32, destination u32, window offset u64); then n lines of data |
//! | `FLUSH` (3) | epoch u64, session u32, 4 zero bytes |
//! | `ACK` (4) | epoch u64, session u32, 4 zero bytes |
//! | `BYE` (5) | nothing |
//! | `SETUP` (6) | flags bit 0: pull; line bytes u32, lines per way u32, storage offset u64, storage length u64, session u32, 4 zero bytes |
//! | `EVICT` (7) | buffer offset u64 (in the sender's registered space), block offset u64 (window-relative), first line u32, last line u32, line count n u32, bitmap words w u32; then w u64 words of the way's valid-line bitmap, covering lines `64 * (first / 64)` on (w = 0: lines first..=last, all valid) |
//! | `FREE` (8) | buffer offset u64, session u32, 4 zero bytes |
//!
//! Sender to receiver: `SETUP` once, then `WAY` / `EVICT`, `FLUSH`, `BYE`. Receiver to
//! sender: `HELLO` once (before everything), then `FREE` and `ACK`. The session number
//! (chosen by each cache, echoed by the applier) lets a new cache on the same endpoint
//! pair recognize replies still addressed to an earlier one.
//!
//! **Push** (the sender copies): a `WAY` message carries the valid lines of one way whose
//! lines are not contiguous (or every way in checked mode); contiguous ways travel as one
//! RMA straight into the window and have no message. **Pull** (the receiver copies): an
//! `EVICT` names a way buffer in the sender's registered storage and which of its lines are
//! valid; the receiver copies them into its window and returns the buffer with `FREE`.
//! The receiver checks a message whole before applying any of it.

/// First bytes of every message.
pub(crate) const MAGIC: [u8; 4] = *b"ACC1";
/// Kinds.
pub(crate) const HELLO: u8 = 1;
pub(crate) const WAY: u8 = 2;
pub(crate) const FLUSH: u8 = 3;
pub(crate) const ACK: u8 = 4;
pub(crate) const BYE: u8 = 5;
pub(crate) const SETUP: u8 = 6;
pub(crate) const EVICT: u8 = 7;
pub(crate) const FREE: u8 = 8;
/// `SETUP` flag: the receiver pulls the lines.
pub(crate) const FLAG_PULL: u8 = 1;
/// Bytes before an `EVICT` message's bitmap.
pub(crate) const EVICT_HEADER: usize = 40;
/// `WAY` flag: per-line metadata follows the indices.
pub(crate) const FLAG_CHECKED: u8 = 1;
/// Bytes before a `WAY` message's indices.
pub(crate) const WAY_HEADER: usize = 24;
/// Bytes of one line's metadata in checked mode.
pub(crate) const META_BYTES: usize = 16;
/// Largest line a message may declare (the geometry's own limit is lower).
pub(crate) const MAX_LINE: usize = 1 << 20;

/// Where the parts of a `WAY` message of `n` lines of `line` bytes lie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WayLayout {
    pub meta_at: usize,
    pub data_at: usize,
    pub total: usize,
}

impl WayLayout {
    pub(crate) fn new(n: usize, line: usize, checked: bool) -> Option<WayLayout> {
        let idx_bytes = n.checked_mul(2)?.checked_add(7)? & !7;
        let meta_at = WAY_HEADER.checked_add(idx_bytes)?;
        let meta_bytes = if checked {
            n.checked_mul(META_BYTES)?
        } else {
            0
        };
        let data_at = meta_at.checked_add(meta_bytes)?;
        let total = data_at.checked_add(n.checked_mul(line)?)?;
        Some(WayLayout {
            meta_at,
            data_at,
            total,
        })
    }
}

/// Writes the 8-byte header.
pub(crate) fn header(buf: &mut [u8], kind: u8, flags: u8) {
    buf[..4].copy_from_slice(&MAGIC);
    buf[4] = kind;
    buf[5] = flags;
    buf[6] = 0;
    buf[7] = 0;
}

/// Writes a `WAY` header (the indices, metadata and data are written by the caller).
pub(crate) fn way_header(buf: &mut [u8], checked: bool, line: usize, n: usize, block_off: u64) {
    header(buf, WAY, if checked { FLAG_CHECKED } else { 0 });
    buf[8..12].copy_from_slice(&(line as u32).to_le_bytes());
    buf[12..16].copy_from_slice(&(n as u32).to_le_bytes());
    buf[16..24].copy_from_slice(&block_off.to_le_bytes());
}

/// A `HELLO` message.
pub(crate) fn hello(offset: u64, len: u64, receiver: Option<u32>) -> [u8; 32] {
    let mut b = [0u8; 32];
    header(&mut b, HELLO, 0);
    b[8..16].copy_from_slice(&offset.to_le_bytes());
    b[16..24].copy_from_slice(&len.to_le_bytes());
    b[24..28].copy_from_slice(&receiver.unwrap_or(u32::MAX).to_le_bytes());
    b
}

/// A `FLUSH` or `ACK` message.
pub(crate) fn epoch_msg(kind: u8, epoch: u64, session: u32) -> [u8; 24] {
    let mut b = [0u8; 24];
    header(&mut b, kind, 0);
    b[8..16].copy_from_slice(&epoch.to_le_bytes());
    b[16..20].copy_from_slice(&session.to_le_bytes());
    b
}

/// A `SETUP` message.
pub(crate) fn setup(
    pull: bool,
    line: usize,
    lpw: usize,
    off: u64,
    len: u64,
    session: u32,
) -> [u8; 40] {
    let mut b = [0u8; 40];
    header(&mut b, SETUP, if pull { FLAG_PULL } else { 0 });
    b[8..12].copy_from_slice(&(line as u32).to_le_bytes());
    b[12..16].copy_from_slice(&(lpw as u32).to_le_bytes());
    b[16..24].copy_from_slice(&off.to_le_bytes());
    b[24..32].copy_from_slice(&len.to_le_bytes());
    b[32..36].copy_from_slice(&session.to_le_bytes());
    b
}

/// Writes an `EVICT` header (the bitmap words are written by the caller).
#[allow(clippy::too_many_arguments)]
pub(crate) fn evict_header(
    buf: &mut [u8],
    buf_off: u64,
    block_off: u64,
    lo: usize,
    hi: usize,
    n: usize,
    words: usize,
) {
    header(buf, EVICT, 0);
    buf[8..16].copy_from_slice(&buf_off.to_le_bytes());
    buf[16..24].copy_from_slice(&block_off.to_le_bytes());
    buf[24..28].copy_from_slice(&(lo as u32).to_le_bytes());
    buf[28..32].copy_from_slice(&(hi as u32).to_le_bytes());
    buf[32..36].copy_from_slice(&(n as u32).to_le_bytes());
    buf[36..40].copy_from_slice(&(words as u32).to_le_bytes());
}

/// A `FREE` message.
pub(crate) fn free(buf_off: u64, session: u32) -> [u8; 24] {
    let mut b = [0u8; 24];
    header(&mut b, FREE, 0);
    b[8..16].copy_from_slice(&buf_off.to_le_bytes());
    b[16..20].copy_from_slice(&session.to_le_bytes());
    b
}

/// A `BYE` message.
pub(crate) fn bye() -> [u8; 8] {
    let mut b = [0u8; 8];
    header(&mut b, BYE, 0);
    b
}

/// A decoded message, borrowing the received bytes.
#[derive(Debug)]
pub(crate) enum Msg<'a> {
    Hello {
        offset: u64,
        len: u64,
        // Read by tests; kept in the format so a sender can log whom it talks to.
        #[allow(dead_code)]
        receiver: Option<u32>,
    },
    Way(WayMsg<'a>),
    Setup {
        pull: bool,
        line: usize,
        lpw: usize,
        off: u64,
        len: u64,
        session: u32,
    },
    Evict(EvictMsg<'a>),
    /// Buffer offset, session.
    Free(u64, u32),
    /// Epoch, session.
    Flush(u64, u32),
    /// Epoch, session.
    Ack(u64, u32),
    Bye,
}

/// The lines of one way, as received.
#[derive(Debug)]
pub(crate) struct WayMsg<'a> {
    pub line: usize,
    pub n: usize,
    pub block_off: u64,
    pub checked: bool,
    idx: &'a [u8],
    meta: &'a [u8],
    data: &'a [u8],
}

impl<'a> WayMsg<'a> {
    /// Index within the block of line `i`.
    pub(crate) fn index(&self, i: usize) -> u64 {
        u64::from(u16::from_le_bytes([self.idx[2 * i], self.idx[2 * i + 1]]))
    }

    /// Metadata of line `i` (sender, destination, offset); checked messages only.
    pub(crate) fn meta(&self, i: usize) -> (u32, u32, u64) {
        let m = &self.meta[i * META_BYTES..(i + 1) * META_BYTES];
        (
            u32::from_le_bytes(m[0..4].try_into().expect("4 bytes")),
            u32::from_le_bytes(m[4..8].try_into().expect("4 bytes")),
            u64::from_le_bytes(m[8..16].try_into().expect("8 bytes")),
        )
    }

    /// Data of line `i`.
    pub(crate) fn data(&self, i: usize) -> &'a [u8] {
        &self.data[i * self.line..(i + 1) * self.line]
    }
}

/// A way buffer the receiver is to pull from.
#[derive(Debug)]
pub(crate) struct EvictMsg<'a> {
    pub buf_off: u64,
    pub block_off: u64,
    pub lo: usize,
    pub hi: usize,
    pub n: usize,
    bitmap: &'a [u8],
}

impl EvictMsg<'_> {
    /// True when lines `lo..=hi` are all valid (no bitmap).
    pub(crate) fn contiguous(&self) -> bool {
        self.bitmap.is_empty()
    }

    /// Bitmap word `i` (covering lines `64 * (lo / 64 + i)` on).
    pub(crate) fn word(&self, i: usize) -> u64 {
        u64_at(self.bitmap, 8 * i)
    }

    /// Number of bitmap words.
    pub(crate) fn words(&self) -> usize {
        self.bitmap.len() / 8
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Decodes one message, checking every length; the error says what is wrong.
pub(crate) fn parse(b: &[u8]) -> Result<Msg<'_>, String> {
    if b.len() < 8 {
        return Err(format!(
            "message of {} bytes is shorter than a header",
            b.len()
        ));
    }
    if b[..4] != MAGIC {
        return Err(format!(
            "message starts with {:02x?}, not the cache magic \"ACC1\"",
            &b[..4]
        ));
    }
    let (kind, flags) = (b[4], b[5]);
    let want = |n: usize| -> Result<(), String> {
        if b.len() == n {
            Ok(())
        } else {
            Err(format!(
                "message of kind {kind} is {} bytes, expected {n}",
                b.len()
            ))
        }
    };
    match kind {
        HELLO => {
            want(32)?;
            let id = u32_at(b, 24);
            Ok(Msg::Hello {
                offset: u64_at(b, 8),
                len: u64_at(b, 16),
                receiver: (id != u32::MAX).then_some(id),
            })
        }
        FLUSH => {
            want(24)?;
            Ok(Msg::Flush(u64_at(b, 8), u32_at(b, 16)))
        }
        ACK => {
            want(24)?;
            Ok(Msg::Ack(u64_at(b, 8), u32_at(b, 16)))
        }
        BYE => {
            want(8)?;
            Ok(Msg::Bye)
        }
        SETUP => {
            want(40)?;
            if flags & !FLAG_PULL != 0 {
                return Err(format!("setup message has unknown flags {flags:#04x}"));
            }
            let (line, lpw) = (u32_at(b, 8) as usize, u32_at(b, 12) as usize);
            if !line.is_power_of_two() || line > MAX_LINE || !lpw.is_power_of_two() || lpw > 65536 {
                return Err(format!(
                    "setup declares {lpw} lines of {line} bytes per way (powers of two, lines up to {MAX_LINE} bytes, up to 65536 lines)"
                ));
            }
            Ok(Msg::Setup {
                pull: flags & FLAG_PULL != 0,
                line,
                lpw,
                off: u64_at(b, 16),
                len: u64_at(b, 24),
                session: u32_at(b, 32),
            })
        }
        FREE => {
            want(24)?;
            Ok(Msg::Free(u64_at(b, 8), u32_at(b, 16)))
        }
        EVICT => {
            if b.len() < EVICT_HEADER {
                return Err(format!(
                    "evict message of {} bytes is shorter than its {EVICT_HEADER}-byte header",
                    b.len()
                ));
            }
            let (lo, hi) = (u32_at(b, 24) as usize, u32_at(b, 28) as usize);
            let (n, words) = (u32_at(b, 32) as usize, u32_at(b, 36) as usize);
            if lo > hi || n == 0 || n > hi - lo + 1 {
                return Err(format!(
                    "evict message declares {n} valid lines in {lo}..={hi}"
                ));
            }
            let want_words = if n == hi - lo + 1 {
                0
            } else {
                hi / 64 - lo / 64 + 1
            };
            if words != want_words || b.len() != EVICT_HEADER + 8 * words {
                return Err(format!(
                    "evict message of {} bytes for {n} lines in {lo}..={hi} carries {words} bitmap words ({want_words} expected)",
                    b.len()
                ));
            }
            let m = EvictMsg {
                buf_off: u64_at(b, 8),
                block_off: u64_at(b, 16),
                lo,
                hi,
                n,
                bitmap: &b[EVICT_HEADER..],
            };
            if words > 0 {
                let first = 64 * (lo / 64);
                let mut count = 0usize;
                for i in 0..words {
                    let mut w = m.word(i);
                    // Bits outside lo..=hi must be clear.
                    let base = first + 64 * i;
                    if base < lo {
                        w &= u64::MAX << (lo - base);
                    }
                    if base + 63 > hi {
                        w &= u64::MAX >> (base + 63 - hi);
                    }
                    if w != m.word(i) {
                        return Err(format!("evict bitmap marks lines outside {lo}..={hi}"));
                    }
                    count += w.count_ones() as usize;
                }
                if count != n {
                    return Err(format!(
                        "evict bitmap marks {count} lines, the message declares {n}"
                    ));
                }
            }
            Ok(Msg::Evict(m))
        }
        WAY => {
            if b.len() < WAY_HEADER {
                return Err(format!(
                    "way message of {} bytes is shorter than its {WAY_HEADER}-byte header",
                    b.len()
                ));
            }
            if flags & !FLAG_CHECKED != 0 {
                return Err(format!("way message has unknown flags {flags:#04x}"));
            }
            let checked = flags & FLAG_CHECKED != 0;
            let line = u32_at(b, 8) as usize;
            let n = u32_at(b, 12) as usize;
            let block_off = u64_at(b, 16);
            if line == 0 || line > MAX_LINE {
                return Err(format!(
                    "way message declares {line}-byte lines (1..={MAX_LINE} allowed)"
                ));
            }
            let layout = WayLayout::new(n, line, checked)
                .ok_or_else(|| format!("way message declares {n} lines of {line} bytes"))?;
            if layout.total != b.len() {
                return Err(format!(
                    "way message of {} bytes declares {n} lines of {line} bytes ({} bytes)",
                    b.len(),
                    layout.total
                ));
            }
            Ok(Msg::Way(WayMsg {
                line,
                n,
                block_off,
                checked,
                idx: &b[WAY_HEADER..WAY_HEADER + 2 * n],
                meta: &b[layout.meta_at..layout.data_at],
                data: &b[layout.data_at..],
            }))
        }
        k => Err(format!("message has unknown kind {k}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_round_trip() {
        match parse(&hello(0x10_0000, 4096, Some(7))).unwrap() {
            Msg::Hello {
                offset,
                len,
                receiver,
            } => assert_eq!((offset, len, receiver), (0x10_0000, 4096, Some(7))),
            m => panic!("{m:?}"),
        }
        match parse(&hello(1, 2, None)).unwrap() {
            Msg::Hello { receiver, .. } => assert_eq!(receiver, None),
            m => panic!("{m:?}"),
        }
        assert!(matches!(
            parse(&epoch_msg(FLUSH, 9, 4)).unwrap(),
            Msg::Flush(9, 4)
        ));
        assert!(matches!(
            parse(&epoch_msg(ACK, 3, 5)).unwrap(),
            Msg::Ack(3, 5)
        ));
        assert!(matches!(parse(&bye()).unwrap(), Msg::Bye));
    }

    #[test]
    fn setup_and_free_round_trip() {
        match parse(&setup(true, 64, 512, 0x20_0000, 1 << 20, 3)).unwrap() {
            Msg::Setup {
                pull,
                line,
                lpw,
                off,
                len,
                session,
            } => assert_eq!(
                (pull, line, lpw, off, len, session),
                (true, 64, 512, 0x20_0000, 1 << 20, 3)
            ),
            m => panic!("{m:?}"),
        }
        assert!(parse(&setup(false, 48, 512, 0, 0, 1))
            .unwrap_err()
            .contains("512 lines of 48 bytes"));
        assert!(matches!(
            parse(&free(0x4000, 2)).unwrap(),
            Msg::Free(0x4000, 2)
        ));
    }

    fn evict(lo: usize, hi: usize, n: usize, words: &[u64]) -> Vec<u8> {
        let mut b = vec![0u8; EVICT_HEADER + 8 * words.len()];
        evict_header(&mut b, 0x1000, 0x8000, lo, hi, n, words.len());
        for (i, w) in words.iter().enumerate() {
            b[EVICT_HEADER + 8 * i..EVICT_HEADER + 8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    #[test]
    fn evict_messages_are_checked_against_their_bitmap() {
        let b = evict(3, 9, 7, &[]);
        let Msg::Evict(m) = parse(&b).unwrap() else {
            panic!()
        };
        assert!(m.contiguous());
        assert_eq!(
            (m.buf_off, m.block_off, m.lo, m.hi, m.n),
            (0x1000, 0x8000, 3, 9, 7)
        );
        // Lines 62 and 65: two words.
        let b = evict(62, 65, 2, &[1 << 62, 1 << 1]);
        let Msg::Evict(m) = parse(&b).unwrap() else {
            panic!()
        };
        assert!(!m.contiguous());
        assert_eq!((m.words(), m.word(0), m.word(1)), (2, 1 << 62, 2));
        let e = parse(&evict(62, 65, 2, &[1 << 61, 1 << 1])).unwrap_err();
        assert!(e.contains("outside 62..=65"), "{e}");
        let e = parse(&evict(62, 65, 3, &[1 << 62, 1 << 1])).unwrap_err();
        assert!(e.contains("marks 2 lines"), "{e}");
        let e = parse(&evict(62, 65, 2, &[1 << 62])).unwrap_err();
        assert!(e.contains("2 expected"), "{e}");
        assert!(parse(&evict(5, 4, 1, &[])).is_err());
    }

    #[test]
    fn way_message_round_trips_with_metadata() {
        let (n, line) = (3usize, 8usize);
        let l = WayLayout::new(n, line, true).unwrap();
        assert_eq!((l.meta_at, l.data_at, l.total), (32, 80, 104));
        let mut b = vec![0u8; l.total];
        way_header(&mut b, true, line, n, 0x8000);
        for i in 0..n {
            b[WAY_HEADER + 2 * i..WAY_HEADER + 2 * i + 2]
                .copy_from_slice(&(10 * i as u16 + 1).to_le_bytes());
            let m = l.meta_at + META_BYTES * i;
            b[m..m + 4].copy_from_slice(&5u32.to_le_bytes());
            b[m + 4..m + 8].copy_from_slice(&6u32.to_le_bytes());
            b[m + 8..m + 16].copy_from_slice(&(0x8000 + 8 * i as u64).to_le_bytes());
            b[l.data_at + line * i..l.data_at + line * (i + 1)].fill(i as u8 + 1);
        }
        let Msg::Way(w) = parse(&b).unwrap() else {
            panic!("not a way")
        };
        assert_eq!((w.line, w.n, w.block_off, w.checked), (8, 3, 0x8000, true));
        assert_eq!(w.index(2), 21);
        assert_eq!(w.meta(1), (5, 6, 0x8008));
        assert_eq!(w.data(2), &[3u8; 8]);
    }

    #[test]
    fn truncated_or_padded_messages_are_rejected_with_their_sizes() {
        let l = WayLayout::new(2, 64, false).unwrap();
        let mut b = vec![0u8; l.total];
        way_header(&mut b, false, 64, 2, 0);
        assert!(parse(&b).is_ok());
        let e = parse(&b[..b.len() - 1]).unwrap_err();
        assert!(e.contains("declares 2 lines of 64 bytes"), "{e}");
        b.push(0);
        assert!(parse(&b).is_err());
        assert!(parse(&b[..7])
            .unwrap_err()
            .contains("shorter than a header"));
        let mut bad = epoch_msg(FLUSH, 1, 1);
        bad[0] = b'X';
        assert!(parse(&bad).unwrap_err().contains("magic"));
        let mut unknown = bye();
        unknown[4] = 99;
        assert!(parse(&unknown).unwrap_err().contains("unknown kind 99"));
    }

    #[test]
    fn random_bytes_never_panic_the_decoder() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut ways = 0;
        for round in 0..20_000 {
            let len = (next() % 200) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if round % 2 == 0 && len >= 24 {
                // Valid-looking headers reach the length checks.
                b[..4].copy_from_slice(&MAGIC);
                b[4] = WAY;
                b[5] &= FLAG_CHECKED;
                b[8..12].copy_from_slice(&((next() % 9) as u32).to_le_bytes());
                b[12..16].copy_from_slice(&((next() % 5) as u32).to_le_bytes());
            }
            if let Ok(Msg::Way(w)) = parse(&b) {
                ways += 1;
                for i in 0..w.n {
                    assert_eq!(w.data(i).len(), w.line);
                    assert!(w.index(i) <= u64::from(u16::MAX));
                    if w.checked {
                        let _ = w.meta(i);
                    }
                }
            }
        }
        assert!(ways > 0, "the generator reached valid way messages");
    }
}
