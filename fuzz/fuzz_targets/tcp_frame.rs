//! Fuzzes what the tcp backend decodes from the network: single headers, the greeting,
//! and a whole frame stream run through the same `FrameReader` the endpoint's reader
//! thread uses, with partial reads and a small staging buffer.
//!
//! Run: `cargo +nightly fuzz run tcp_frame -- -max_total_time=60` from the repository root.
#![no_main]

use std::io;

use accio_tcp::frame::{
    decode_header, FrameReader, Hello, Kind, Limits, RawBuf, Source, HEADER_LEN, MAX_CREDIT,
};
use libfuzzer_sys::fuzz_target;

/// Small limits, so that accepted frames are cheap to follow.
const LIMITS: Limits = Limits {
    max_message: 1 << 16,
    max_rma: 1 << 20,
};

/// Serves the input in chunks whose sizes come from the input itself.
struct Chunked<'a> {
    data: &'a [u8],
    sizes: &'a [u8],
    turn: usize,
}

impl Source for Chunked<'_> {
    unsafe fn read_raw(&mut self, bufs: &[RawBuf]) -> io::Result<usize> {
        let chunk = match self.sizes.get(self.turn % self.sizes.len().max(1)) {
            Some(&s) => usize::from(s) * 7 + 1,
            None => usize::MAX,
        };
        self.turn += 1;
        let n = chunk.min(self.data.len());
        let mut part = &self.data[..n];
        // SAFETY: forwarded caller contract.
        let got = unsafe { part.read_raw(bufs) }?;
        self.data = &self.data[got..];
        Ok(got)
    }
}

fuzz_target!(|data: &[u8]| {
    // 1. One header: never panics; what is accepted is within the limits and re-encodes
    //    to the same bytes.
    if let Ok(h) = decode_header(data, &LIMITS) {
        assert!(h.payload_len() <= LIMITS.max_message.max(LIMITS.max_rma));
        match h.kind {
            Kind::Message => assert!(h.len <= LIMITS.max_message),
            Kind::Write | Kind::ReadRequest | Kind::ReadData | Kind::Register => {
                assert!(h.len >= 1 && h.len <= LIMITS.max_rma)
            }
            Kind::Credit => assert!(h.len >= 1 && h.len <= MAX_CREDIT),
            _ => {}
        }
        assert_eq!(&h.encode()[..], &data[..HEADER_LEN]);
    }
    let _ = Hello::decode(data);

    // 2. A frame stream: the first bytes choose the read chunking and staging size.
    if data.len() < 3 {
        return;
    }
    let (ctl, rest) = data.split_at(3);
    let n_sizes = usize::from(ctl[0] % 8);
    let staging = HEADER_LEN + usize::from(ctl[1]) * 16;
    let (sizes, stream) = rest.split_at(n_sizes.min(rest.len()));
    let source = Chunked {
        data: stream,
        sizes,
        turn: 0,
    };
    let mut r = FrameReader::with_staging(source, LIMITS, staging);
    // Sometimes start with a recycled buffer, as the endpoint does.
    let mut buf = Vec::with_capacity(usize::from(ctl[2]) * 64);
    let mut window = vec![0u8; 4096];
    for i in 0.. {
        let h = match r.next_header() {
            Ok(Some(h)) => h,
            Ok(None) | Err(_) => break,
        };
        let len = h.payload_len() as usize;
        let res = match (h.kind, i % 3) {
            (k, _) if !k.has_payload() => Ok(()),
            (Kind::Message, _) => r.read_payload_vec(&mut buf, len, h.kind).map(|_| {
                assert_eq!(buf.len(), len);
            }),
            (_, 0) if len <= window.len() => {
                // SAFETY: `window` is writable for at least `len` bytes.
                unsafe { r.read_payload_raw(window.as_mut_ptr(), len, h.kind) }
            }
            _ => r.skip_payload(h.len, h.kind),
        };
        if res.is_err() {
            break;
        }
    }
});
