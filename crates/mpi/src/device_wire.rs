//! The messages of the `mpi` backend's device-window protocol, and the owner's handling
//! of a request, apart from MPI: a rank decodes, checks and carries out a peer's bytes
//! here, and so does the fuzz target (`fuzz/fuzz_targets/mpi_device.rs`).
//!
//! A device window is served by its owner's CPU (MPI libraries without CUDA support cannot
//! put into GPU memory; see `imp::endpoint::device`). Every message starts with a 32-byte
//! little-endian [`Head`]:
//!
//! - a write: [`OP_WRITE`], flag [`LAST`] on its last chunk, the request's sequence
//!   number, the window offset of this chunk, its length, then the chunk (at most
//!   [`DEVICE_CHUNK`] bytes); only the last chunk is answered;
//! - a read: [`OP_READ`], the sequence number, offset and length (at most
//!   [`DEVICE_CHUNK`]), nothing after;
//! - an answer: how the request ended ([`DONE`], [`REFUSED`], [`DEVICE_FAILED`],
//!   [`MALFORMED`]), its sequence number and offset, and what follows: a read's bytes, or
//!   the failure's text (at most [`MAX_REASON`] bytes).

use std::sync::Arc;

use accio_core::{Access, DeviceMemory, Result, DEVICE_CHUNK};

/// Bytes of the header of a request and of an answer.
pub const HEADER: usize = 32;
/// The longest message of the protocol: a header and a chunk.
pub const MAX_MESSAGE: usize = HEADER + DEVICE_CHUNK;
/// Longest failure text an answer carries.
pub const MAX_REASON: usize = 512;

/// A write request (one chunk of it).
pub const OP_WRITE: u32 = 1;
/// A read request.
pub const OP_READ: u32 = 2;
/// A write's last chunk: the one answered.
pub const LAST: u32 = 1;

/// An answer: the request was carried out.
pub const DONE: u32 = 0;
/// An answer: the owner's table refused the range (bounds, rights, a withdrawn window).
pub const REFUSED: u32 = 1;
/// An answer: the device's driver failed the copy.
pub const DEVICE_FAILED: u32 = 2;
/// An answer: the request did not parse.
pub const MALFORMED: u32 = 3;

/// The header of a request (`op`: write or read; `flag`: [`LAST`]; `len`: the bytes to
/// read, or the bytes that follow) and of an answer (`op`: how it ended; `len`: the bytes
/// that follow). Little-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// What a request asks, or how an answered request ended.
    pub op: u32,
    /// [`LAST`] on a write's last chunk.
    pub flag: u32,
    /// The request's sequence number.
    pub seq: u64,
    /// The window offset the request is about.
    pub offset: u64,
    /// Bytes to read, or bytes that follow the header.
    pub len: u64,
}

impl Head {
    /// The header's 32 bytes.
    pub fn encode(&self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[0..4].copy_from_slice(&self.op.to_le_bytes());
        b[4..8].copy_from_slice(&self.flag.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// The header `msg` starts with; `None` when `msg` is shorter than one.
    pub fn decode(msg: &[u8]) -> Option<Head> {
        let b = msg.get(..HEADER)?;
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(Head {
            op: u32_at(0),
            flag: u32_at(4),
            seq: u64_at(8),
            offset: u64_at(16),
            len: u64_at(24),
        })
    }

    /// Whether `msg`, which starts with this header, carries `len` bytes after it.
    pub fn carries_len(&self, msg: &[u8]) -> bool {
        msg.len() >= HEADER && self.len == (msg.len() - HEADER) as u64
    }
}

/// An answer: `how` a request ended and what follows its header.
pub fn answer(how: u32, seq: u64, offset: u64, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER + body.len());
    v.extend_from_slice(
        &Head {
            op: how,
            flag: 0,
            seq,
            offset,
            len: body.len() as u64,
        }
        .encode(),
    );
    v.extend_from_slice(body);
    v
}

/// The answer to a request of `n` bytes, longer than the protocol allows (its bytes were
/// never read).
pub fn oversized(n: usize) -> Vec<u8> {
    malformed(
        0,
        0,
        &format!("a request of {n} bytes (the protocol's longest is {MAX_MESSAGE})"),
    )
}

fn malformed(seq: u64, offset: u64, why: &str) -> Vec<u8> {
    answer(MALFORMED, seq, offset, &reason(&why))
}

/// A failure's text, cut to [`MAX_REASON`] bytes at a character boundary.
fn reason(e: &dyn std::fmt::Display) -> Vec<u8> {
    let s = e.to_string();
    let mut end = s.len().min(MAX_REASON);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.as_bytes()[..end].to_vec()
}

/// The device memory under a window range, and where the range starts in it: the owner's
/// table lookup (`offset`, `len`, the rights needed), refusing as a host window would.
pub type Find<'a> = &'a dyn Fn(u64, u64, Access) -> Result<(Arc<dyn DeviceMemory>, usize)>;

/// What the owner keeps between requests: the write whose chunk failed, how and why (its
/// later chunks are skipped, its last one answered with the failure).
#[derive(Debug, Default)]
pub struct Owner {
    failed: Option<(u64, u32, Vec<u8>)>,
}

impl Owner {
    /// Carries out request `msg` (at most [`MAX_MESSAGE`] bytes: the caller refuses longer
    /// ones unread, with [`oversized`]) on the windows `find` looks up; its answer, if it
    /// gets one now. `buffer(n)` gives an empty buffer with room for `n` bytes, for a
    /// read's answer.
    pub fn handle(
        &mut self,
        msg: &[u8],
        find: Find<'_>,
        buffer: &mut dyn FnMut(usize) -> Vec<u8>,
    ) -> Option<Vec<u8>> {
        let Some(h) = Head::decode(msg) else {
            return Some(malformed(
                0,
                0,
                &format!("a request of {} bytes, shorter than its header", msg.len()),
            ));
        };
        match h.op {
            OP_WRITE if !h.carries_len(msg) || h.len > DEVICE_CHUNK as u64 => Some(malformed(
                h.seq,
                h.offset,
                &format!(
                    "a write of {} bytes that carries {} (at most {DEVICE_CHUNK} per chunk)",
                    h.len,
                    msg.len() - HEADER
                ),
            )),
            OP_WRITE => {
                if self.failed.as_ref().is_some_and(|f| f.0 != h.seq) {
                    // A failed write whose last chunk never came: its initiator gave up.
                    self.failed = None;
                }
                if self.failed.is_none() {
                    if let Err((how, why)) = write(find, h.offset, &msg[HEADER..]) {
                        self.failed = Some((h.seq, how, why));
                    }
                }
                if h.flag & LAST == 0 {
                    return None;
                }
                Some(match self.failed.take() {
                    Some((_, how, why)) => answer(how, h.seq, h.offset, &why),
                    None => answer(DONE, h.seq, h.offset, &[]),
                })
            }
            OP_READ => Some(read(find, &h, msg.len(), buffer)),
            op => Some(malformed(
                h.seq,
                h.offset,
                &format!("an unknown request {op}"),
            )),
        }
    }
}

fn write(find: Find<'_>, offset: u64, data: &[u8]) -> std::result::Result<(), (u32, Vec<u8>)> {
    let (m, at) =
        find(offset, data.len() as u64, Access::WRITE).map_err(|e| (REFUSED, reason(&e)))?;
    m.write(at, data).map_err(|e| (DEVICE_FAILED, reason(&e)))
}

fn read(find: Find<'_>, h: &Head, n: usize, buffer: &mut dyn FnMut(usize) -> Vec<u8>) -> Vec<u8> {
    if n != HEADER || h.len > DEVICE_CHUNK as u64 {
        let why = format!(
            "a read of {} bytes in a request of {n} (at most {DEVICE_CHUNK} per request, \
             nothing after the header)",
            h.len
        );
        return malformed(h.seq, h.offset, &why);
    }
    let (m, at) = match find(h.offset, h.len, Access::READ) {
        Ok(found) => found,
        Err(e) => return answer(REFUSED, h.seq, h.offset, &reason(&e)),
    };
    let len = h.len as usize;
    let mut v = buffer(HEADER + len);
    v.clear();
    v.extend_from_slice(
        &Head {
            op: DONE,
            flag: 0,
            ..*h
        }
        .encode(),
    );
    v.resize(HEADER + len, 0);
    match m.read(at, &mut v[HEADER..]) {
        Ok(()) => v,
        Err(e) => answer(DEVICE_FAILED, h.seq, h.offset, &reason(&e)),
    }
}

/// The header of answer `msg` to request `seq`, or what is wrong with it.
pub fn parse_answer(msg: &[u8], seq: u64) -> std::result::Result<Head, String> {
    if msg.len() > MAX_MESSAGE {
        return Err(format!("an answer of {} bytes", msg.len()));
    }
    match Head::decode(msg) {
        Some(h) if h.seq == seq && h.carries_len(msg) => Ok(h),
        Some(h) if h.seq == seq => Err(format!(
            "an answer of {} bytes whose header says {} follow",
            msg.len(),
            h.len
        )),
        Some(h) => Err(format!(
            "it answered request {} when request {seq} was due",
            h.seq
        )),
        None => Err(format!(
            "an answer of {} bytes, shorter than its header",
            msg.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_core::{DeviceShare, Error};
    use std::sync::Mutex;

    #[derive(Debug)]
    struct Mem(Mutex<Vec<u8>>);

    impl DeviceMemory for Mem {
        fn len(&self) -> usize {
            self.0.lock().unwrap().len()
        }
        fn kind(&self) -> &'static str {
            "test"
        }
        fn device(&self) -> u32 {
            0
        }
        fn address(&self) -> u64 {
            0
        }
        fn read(&self, at: usize, dst: &mut [u8]) -> Result<()> {
            dst.copy_from_slice(&self.0.lock().unwrap()[at..at + dst.len()]);
            Ok(())
        }
        fn write(&self, at: usize, src: &[u8]) -> Result<()> {
            if src.first() == Some(&0xEE) {
                return Err(Error::invalid("device write", "the test driver fails"));
            }
            self.0.lock().unwrap()[at..at + src.len()].copy_from_slice(src);
            Ok(())
        }
        fn share(&self) -> Result<DeviceShare> {
            Err(Error::invalid("share", "test"))
        }
    }

    type Lookup = Box<dyn Fn(u64, u64, Access) -> Result<(Arc<dyn DeviceMemory>, usize)>>;

    /// One read-write window of 64 bytes at offset 0x1000.
    fn window() -> (Arc<Mem>, Lookup) {
        let m = Arc::new(Mem(Mutex::new(vec![0; 64])));
        let mem = m.clone();
        let find = move |off: u64, len: u64, need: Access| {
            let mut t = accio_core::WindowTable::default();
            t.insert(
                accio_core::WindowDesc {
                    offset: 0x1000,
                    len: 64,
                    access: Access::READ_WRITE,
                },
                (),
            )?;
            let (d, _) = t.find(off, len, need, accio_core::Side::Local, &"mpi://0:1")?;
            Ok((
                mem.clone() as Arc<dyn DeviceMemory>,
                (off - d.offset) as usize,
            ))
        };
        (m, Box::new(find))
    }

    fn request(op: u32, flag: u32, seq: u64, offset: u64, len: u64, body: &[u8]) -> Vec<u8> {
        let mut v = Head {
            op,
            flag,
            seq,
            offset,
            len,
        }
        .encode()
        .to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn a_write_in_chunks_is_answered_once_and_a_read_returns_its_bytes() {
        let (m, find) = window();
        let mut o = Owner::default();
        let mut buf = |n| Vec::with_capacity(n);
        assert_eq!(
            o.handle(
                &request(OP_WRITE, 0, 7, 0x1008, 4, b"abcd"),
                &find,
                &mut buf
            ),
            None
        );
        let a = o
            .handle(
                &request(OP_WRITE, LAST, 7, 0x100c, 2, b"ef"),
                &find,
                &mut buf,
            )
            .unwrap();
        assert_eq!(parse_answer(&a, 7).unwrap().op, DONE);
        assert_eq!(&m.0.lock().unwrap()[8..14], b"abcdef");
        let a = o
            .handle(&request(OP_READ, 0, 8, 0x1009, 3, b""), &*find, &mut buf)
            .unwrap();
        let h = parse_answer(&a, 8).unwrap();
        assert_eq!((h.op, &a[HEADER..]), (DONE, &b"bcd"[..]));
    }

    #[test]
    fn refusals_failures_and_garbage_are_answered_and_change_nothing() {
        let (m, find) = window();
        let mut o = Owner::default();
        let mut buf = |n| Vec::with_capacity(n);
        let mut ask = |msg: Vec<u8>| o.handle(&msg, &*find, &mut buf).unwrap();
        let op = |a: &[u8]| Head::decode(a).unwrap().op;
        // Past the window's end, and a read past it.
        assert_eq!(
            op(&ask(request(OP_WRITE, LAST, 1, 0x103e, 4, b"wxyz"))),
            REFUSED
        );
        assert_eq!(op(&ask(request(OP_READ, 0, 2, 0x1000, 65, b""))), REFUSED);
        // Offsets that would wrap.
        assert_eq!(
            op(&ask(request(OP_WRITE, LAST, 3, u64::MAX - 1, 4, b"wxyz"))),
            REFUSED
        );
        // A length that lies, a read with a body, a read larger than a chunk, an unknown
        // request, a short one.
        assert_eq!(
            op(&ask(request(OP_WRITE, LAST, 4, 0x1000, 9, b"wxyz"))),
            MALFORMED
        );
        assert_eq!(op(&ask(request(OP_READ, 0, 5, 0x1000, 4, b"x"))), MALFORMED);
        assert_eq!(
            op(&ask(request(OP_READ, 0, 6, 0x1000, 1 << 40, b""))),
            MALFORMED
        );
        assert_eq!(op(&ask(request(9, 0, 7, 0x1000, 0, b""))), MALFORMED);
        assert_eq!(op(&ask(vec![1, 2, 3])), MALFORMED);
        // The driver fails: the failure's text comes back.
        let a = ask(request(OP_WRITE, LAST, 8, 0x1000, 2, &[0xEE, 1]));
        assert_eq!(op(&a), DEVICE_FAILED);
        assert!(String::from_utf8_lossy(&a[HEADER..]).contains("the test driver fails"));
        assert!(m.0.lock().unwrap().iter().all(|&b| b == 0));
        assert!(oversized(MAX_MESSAGE + 1).len() <= HEADER + MAX_REASON);
    }

    #[test]
    fn a_write_whose_chunk_failed_skips_its_other_chunks_and_answers_the_failure() {
        let (m, find) = window();
        let mut o = Owner::default();
        let mut buf = |n| Vec::with_capacity(n);
        assert_eq!(
            o.handle(
                &request(OP_WRITE, 0, 1, 0x1000, 2, &[0xEE, 1]),
                &find,
                &mut buf
            ),
            None
        );
        assert_eq!(
            o.handle(&request(OP_WRITE, 0, 1, 0x1002, 2, b"ok"), &*find, &mut buf),
            None
        );
        let a = o
            .handle(
                &request(OP_WRITE, LAST, 1, 0x1004, 2, b"ok"),
                &find,
                &mut buf,
            )
            .unwrap();
        assert_eq!(Head::decode(&a).unwrap().op, DEVICE_FAILED);
        assert!(m.0.lock().unwrap().iter().all(|&b| b == 0));
        // The next write starts clean.
        let a = o
            .handle(
                &request(OP_WRITE, LAST, 2, 0x1000, 2, b"ok"),
                &find,
                &mut buf,
            )
            .unwrap();
        assert_eq!(Head::decode(&a).unwrap().op, DONE);
    }

    #[test]
    fn answers_that_do_not_fit_their_request_are_named() {
        let a = answer(DONE, 3, 0, b"abc");
        assert!(parse_answer(&a, 3).is_ok());
        assert!(parse_answer(&a, 4)
            .unwrap_err()
            .contains("request 3 when request 4"));
        assert!(parse_answer(&a[..HEADER + 1], 3)
            .unwrap_err()
            .contains("says 3 follow"));
        assert!(parse_answer(&a[..5], 3)
            .unwrap_err()
            .contains("shorter than its header"));
    }
}
