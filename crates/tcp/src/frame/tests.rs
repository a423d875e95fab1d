//! Unit tests of the wire format and the stream parser.

use std::io;

use accio_core::PAGE;

use super::*;

fn limits() -> Limits {
    Limits {
        max_message: 1 << 20,
        max_rma: 1 << 30,
    }
}

fn all_valid() -> Vec<Header> {
    vec![
        Header::message(0),
        Header::message(1 << 20),
        Header::write(7, 0x10_0000, 4096, true),
        Header::write(8, 1, 1, false),
        Header::read_request(9, 0x10_0010, 3),
        Header::read_data(9, 3),
        Header::signal(10, 0x10_0008, u64::MAX, true),
        Header::fence_request(11),
        Header::ack(u64::MAX),
        Header::register(0x10_0000, 5000, Access::READ_WRITE),
        Header::unregister(0x10_0000),
        Header::fault(12, FaultCode::AccessDenied, 0x10_0000, 8, Access::WRITE),
        Header::credit(1 << 20),
    ]
}

#[test]
fn every_constructor_round_trips() {
    for h in all_valid() {
        let b = h.encode();
        assert_eq!(decode_header(&b, &limits()), Ok(h), "{h:?}");
    }
}

#[test]
fn unknown_type_is_rejected_by_name() {
    let mut b = Header::ack(1).encode();
    for k in [0u8, 0x0c, 0x7f, 0xff] {
        b[0] = k;
        let e = decode_header(&b, &limits()).unwrap_err();
        assert_eq!(e, FrameError::UnknownKind(k));
    }
    b[0] = 0x7f;
    assert_eq!(
        decode_header(&b, &limits()).unwrap_err().to_string(),
        "frame type 0x7f is unknown"
    );
}

#[test]
fn oversized_lengths_are_rejected() {
    let e = decode_header(&Header::message((1 << 20) + 1).encode(), &limits()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "message frame of 1048577 bytes exceeds the 1048576-byte limit"
    );
    let mut b = Header::write(1, 4096, 1, false).encode();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        decode_header(&b, &limits()),
        Err(FrameError::TooLong { .. })
    ));
    let b = Header::read_data(1, (1 << 30) + 1).encode();
    assert!(matches!(
        decode_header(&b, &limits()),
        Err(FrameError::TooLong { .. })
    ));
}

#[test]
fn truncated_header_is_rejected() {
    let b = Header::ack(1).encode();
    for n in 0..HEADER_LEN {
        assert_eq!(
            decode_header(&b[..n], &limits()),
            Err(FrameError::Truncated {
                what: "frame header",
                need: HEADER_LEN,
                got: n
            })
        );
    }
}

#[test]
fn bad_fields_are_rejected() {
    let l = limits();
    let mut b = Header::message(3).encode();
    b[2] = 1;
    assert_eq!(
        decode_header(&b, &l),
        Err(FrameError::Reserved {
            kind: Kind::Message
        })
    );
    let mut b = Header::message(3).encode();
    b[1] = FLAG_ACK;
    assert!(matches!(
        decode_header(&b, &l),
        Err(FrameError::Flags { .. })
    ));
    let mut b = Header::message(3).encode();
    b[24] = 1;
    assert!(matches!(
        decode_header(&b, &l),
        Err(FrameError::UnusedField {
            field: "sequence",
            ..
        })
    ));
    for h in [
        Header::write(1, 0, 8, false),
        Header::signal(1, 0x1004, 1, false),
        Header::register(0x1001, 8, Access::READ),
        Header::write(1, u64::MAX - 2, 8, false),
    ] {
        assert!(
            matches!(
                decode_header(&h.encode(), &l),
                Err(FrameError::Offset { .. })
            ),
            "{h:?}"
        );
    }
    assert!(matches!(
        decode_header(&Header::write(1, 4096, 0, false).encode(), &l),
        Err(FrameError::Empty { .. })
    ));
    let mut b = Header::register(4096, 8, Access::READ).encode();
    b[4] = 4;
    assert!(matches!(
        decode_header(&b, &l),
        Err(FrameError::Access { .. })
    ));
    let mut b = Header::fault(1, FaultCode::OutOfWindow, 1, 1, Access::READ).encode();
    b[4] = 9;
    assert_eq!(decode_header(&b, &l), Err(FrameError::FaultCode(9)));
}

#[test]
fn hello_round_trips_and_rejects_strangers() {
    let h = Hello {
        max_message: 12345,
        recv_window: 1 << 26,
        nonce: [0xa5; 32],
    };
    assert_eq!(Hello::decode(&h.encode()), Ok(h));
    let e = Hello::decode(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap_err();
    assert!(matches!(e, FrameError::Magic(_)));
    assert!(e.to_string().starts_with("not an accio tcp peer"), "{e}");
    let mut b = h.encode();
    b[8] = 9;
    assert_eq!(
        Hello::decode(&b).unwrap_err().to_string(),
        "peer speaks accio tcp protocol version 9, this side speaks 2"
    );
    // An older accio is named from its first 10 bytes, without waiting for the rest.
    assert!(matches!(
        Hello::decode(&b[..10]),
        Err(FrameError::Version { theirs: 9 })
    ));
    assert!(matches!(
        Hello::decode(&b[..5]),
        Err(FrameError::Truncated { .. })
    ));
    let zero_window = Hello {
        recv_window: 0,
        ..h
    };
    assert!(matches!(
        Hello::decode(&zero_window.encode()),
        Err(FrameError::Greeting(_))
    ));
}

/// xorshift64*: enough randomness for a stable-Rust fuzz loop without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn assert_within_limits(h: &Header, l: &Limits) {
    match h.kind {
        Kind::Message => assert!(h.len <= l.max_message),
        Kind::Write | Kind::ReadRequest => {
            assert!(h.len >= 1 && h.len <= l.max_rma && h.offset != 0);
            assert!(h.offset.checked_add(h.len).is_some());
        }
        Kind::ReadData => assert!(h.len >= 1 && h.len <= l.max_rma),
        Kind::Register => {
            assert!(h.len >= 1 && h.len <= l.max_rma && h.offset.is_multiple_of(PAGE as u64));
            assert!(Access::from_bits(h.aux as u8).is_some() && h.aux < 4);
        }
        Kind::Signal => assert!(h.offset != 0 && h.offset.is_multiple_of(8)),
        Kind::Credit => assert!(h.len >= 1 && h.len <= MAX_CREDIT),
        _ => {}
    }
    assert!(h.payload_len() <= l.max_message.max(l.max_rma));
    // Whatever decodes re-encodes to the same bytes.
    assert_eq!(decode_header(&h.encode(), l), Ok(*h));
}

#[test]
fn random_and_mutated_headers_never_panic_and_stay_within_limits() {
    let l = limits();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let valid = all_valid();
    let mut accepted = 0;
    for i in 0..200_000u32 {
        let mut b = [0u8; HEADER_LEN + 8];
        let n = (rng.next() % (HEADER_LEN as u64 + 9)) as usize;
        if i % 2 == 0 {
            for x in b.iter_mut() {
                *x = rng.next() as u8;
            }
            b[0] = (rng.next() % 13) as u8;
        } else {
            let base = valid[(rng.next() % valid.len() as u64) as usize].encode();
            b[..HEADER_LEN].copy_from_slice(&base);
            for _ in 0..=(rng.next() % 3) {
                let at = (rng.next() % HEADER_LEN as u64) as usize;
                match rng.next() % 3 {
                    0 => b[at] ^= 1 << (rng.next() % 8),
                    1 => b[at] = rng.next() as u8,
                    _ => b[at] = [0, 0xff, 0x80, 1][(rng.next() % 4) as usize],
                }
            }
        }
        let len = if i % 2 == 0 { n } else { HEADER_LEN };
        if let Ok(h) = decode_header(&b[..len], &l) {
            accepted += 1;
            assert_within_limits(&h, &l);
        }
        let _ = Hello::decode(&b[..n.min(HELLO_LEN)]);
    }
    assert!(accepted > 1000, "only {accepted} headers accepted");
}

/// A source that returns at most `chunk` bytes per read, to exercise partial reads.
struct Chunky<'a>(&'a [u8], usize);
impl Source for Chunky<'_> {
    unsafe fn read_raw(&mut self, bufs: &[RawBuf]) -> io::Result<usize> {
        let n = self.1.min(self.0.len());
        let mut part = &self.0[..n];
        // SAFETY: forwarded caller contract.
        let got = unsafe { part.read_raw(bufs) }?;
        self.0 = &self.0[got..];
        Ok(got)
    }
}

#[test]
fn reader_delivers_payloads_across_staging_boundaries() {
    let mut stream = Vec::new();
    let sizes = [
        0usize, 1, 39, 40, 41, 100, 5000, 70_000, 200_000, 3, 0, 65_536,
    ];
    for (i, &n) in sizes.iter().enumerate() {
        stream.extend_from_slice(&Header::message(n).encode());
        stream.extend((0..n).map(|j| (i * 31 + j) as u8));
        stream.extend_from_slice(&Header::ack(i as u64).encode());
    }
    for (chunk, staging) in [(usize::MAX, STAGING_LEN), (7, 64), (4096, 100), (1, 40)] {
        let mut r = FrameReader::with_staging(Chunky(&stream, chunk), limits(), staging);
        let mut v = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let h = r.next_header().unwrap().unwrap();
            assert_eq!(h, Header::message(n));
            r.read_payload_vec(&mut v, n, h.kind).unwrap();
            assert!(v.iter().enumerate().all(|(j, &b)| b == (i * 31 + j) as u8));
            assert_eq!(r.next_header().unwrap(), Some(Header::ack(i as u64)));
        }
        assert!(r.next_header().unwrap().is_none());
    }
}

#[test]
fn reader_skips_payloads_and_reports_truncation() {
    let mut stream = Header::write(1, 4096, 100_000, false).encode().to_vec();
    stream.extend(std::iter::repeat_n(7u8, 100_000));
    stream.extend_from_slice(&Header::ack(3).encode());
    stream.extend_from_slice(&Header::message(10).encode()[..20]);
    let mut r = FrameReader::with_staging(Chunky(&stream, 999), limits(), 128);
    let h = r.next_header().unwrap().unwrap();
    r.skip_payload(h.len, h.kind).unwrap();
    assert_eq!(r.next_header().unwrap(), Some(Header::ack(3)));
    let e = r.next_header().unwrap_err();
    assert_eq!(
        e.to_string(),
        "the connection ended in the middle of a frame header"
    );

    let mut stream = Header::message(10).encode().to_vec();
    stream.extend_from_slice(&[1, 2, 3]);
    let mut r = FrameReader::new(&stream[..], limits());
    let h = r.next_header().unwrap().unwrap();
    let mut v = Vec::new();
    let e = r.read_payload_vec(&mut v, 10, h.kind).unwrap_err();
    assert!(v.is_empty());
    assert_eq!(
        e.to_string(),
        "the connection ended in the middle of the payload of a message frame"
    );
}

#[test]
fn reader_rejects_a_bad_frame_before_reading_its_payload() {
    let mut stream = Header::message(1 << 21).encode().to_vec();
    stream.extend_from_slice(&[0; 64]);
    let mut r = FrameReader::new(&stream[..], limits());
    assert!(matches!(
        r.next_header(),
        Err(ReadError::Frame(FrameError::TooLong { .. }))
    ));
}
