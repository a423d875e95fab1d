//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use accio_core::{Addr, Endpoint, Error, ErrorKind, Listener};
use accio_tcp::auth::{proof, Role};
use accio_tcp::frame::{
    decode_header, Header, Hello, Limits, HEADER_LEN, HELLO_LEN, VERDICT_LEN, VERDICT_OK,
};
use accio_tcp::{TcpEndpoint, TcpListener, TcpOptions};

pub const T: Duration = Duration::from_secs(5);

pub fn loopback() -> Addr {
    "tcp://127.0.0.1:0".parse().unwrap()
}

/// A connected pair: (accepted, connected).
pub fn pair_with(opts: TcpOptions) -> (TcpEndpoint, TcpEndpoint) {
    let l = TcpListener::bind_with(&loopback(), opts.clone()).unwrap();
    let addr = l.local_addr().clone();
    let t = std::thread::spawn(move || l.accept_tcp(Some(T)).unwrap());
    let c = TcpEndpoint::connect_with(&addr, T, opts).unwrap();
    (t.join().unwrap(), c)
}

pub fn pair() -> (TcpEndpoint, TcpEndpoint) {
    pair_with(TcpOptions::default())
}

#[track_caller]
pub fn expect_kind<T: std::fmt::Debug>(r: Result<T, Error>, kind: ErrorKind) -> Error {
    match r {
        Err(e) if e.kind() == kind => e,
        other => panic!("expected {kind:?}, got {other:?}"),
    }
}

pub fn send_u64(ep: &dyn Endpoint, v: u64) {
    ep.send(&v.to_le_bytes()).unwrap();
}

pub fn recv_u64(ep: &dyn Endpoint) -> u64 {
    let mut b = Vec::new();
    assert_eq!(ep.recv_timeout(&mut b, Some(T)).unwrap(), 8);
    u64::from_le_bytes(b[..8].try_into().unwrap())
}

/// Deterministic test bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The secret the hand-driven peers hold.
pub const TEST_SECRET: &[u8] = b"accio tcp test secret, 32 bytes";

/// Speaks the connecting side's greeting by hand on `s` with `secret`; returns the
/// listener's verdict.
pub fn raw_greeting(s: &mut TcpStream, secret: &[u8]) -> [u8; VERDICT_LEN] {
    let mut server = [0u8; HELLO_LEN];
    s.read_exact(&mut server).unwrap();
    Hello::decode(&server).unwrap();
    let client = Hello {
        max_message: 1 << 30,
        recv_window: 1 << 30,
        nonce: [7; 32],
    }
    .encode();
    s.write_all(&client).unwrap();
    s.write_all(&proof(secret, Role::Client, &server, &client))
        .unwrap();
    let mut verdict = [0u8; VERDICT_LEN];
    s.read_exact(&mut verdict).unwrap();
    verdict
}

/// A hand-driven peer speaking the wire protocol directly: it can lie.
pub struct RawPeer {
    pub s: TcpStream,
}

impl RawPeer {
    /// Accepts on an accio listener with `opts` (and [`TEST_SECRET`]), connecting a raw
    /// socket to it.
    pub fn pair_with(opts: TcpOptions) -> (TcpEndpoint, RawPeer) {
        let l = TcpListener::bind_with(&loopback(), opts.secret(TEST_SECRET)).unwrap();
        let Addr::Tcp { port, .. } = l.local_addr().clone() else {
            unreachable!()
        };
        let t = std::thread::spawn(move || l.accept_tcp(Some(T)).unwrap());
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let verdict = raw_greeting(&mut s, TEST_SECRET);
        assert_eq!(verdict[..8], VERDICT_OK);
        (t.join().unwrap(), RawPeer { s })
    }

    pub fn send(&mut self, h: &Header, payload: &[u8]) {
        self.send_bytes(&h.encode());
        self.send_bytes(payload);
    }

    pub fn send_bytes(&mut self, b: &[u8]) {
        self.s.write_all(b).unwrap();
    }

    pub fn recv_header(&mut self) -> Header {
        let mut b = [0u8; HEADER_LEN];
        self.s.read_exact(&mut b).unwrap();
        decode_header(&b, &Limits::default()).unwrap()
    }

    pub fn recv_payload(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.s.read_exact(&mut v).unwrap();
        v
    }
}
