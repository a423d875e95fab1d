//! Helpers shared by the coalescing layer's integration tests: connected endpoint pairs on
//! every backend and a small deterministic random generator.

#![allow(dead_code)] // each test binary uses a different subset

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use accio::Endpoint;

/// Every backend the tests run on.
pub const BACKENDS: [&str; 2] = ["shm", "tcp"];

/// How long any test step may wait before the test fails instead of hanging.
pub const WAIT: Duration = Duration::from_secs(20);

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A connected pair on `backend`: (connecting end, accepted end).
pub fn pair(backend: &str) -> (Box<dyn Endpoint>, Box<dyn Endpoint>) {
    let addr = match backend {
        "shm" => format!(
            "shm://accio-coalesce-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ),
        "tcp" => "tcp://127.0.0.1:0".to_string(),
        other => panic!("unknown backend {other}"),
    };
    let listener = accio::listen(&addr).expect("listen");
    let addr = listener.local_addr().to_string();
    let acceptor = std::thread::spawn(move || listener.accept(Some(WAIT)).expect("accept"));
    let client = accio::connect(&addr, WAIT).expect("connect");
    (client, acceptor.join().expect("accept thread"))
}

/// xorshift64*: deterministic, so a failing case can be replayed from its seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// One of `items`, uniformly.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

/// The bytes of message `k` from `sender` to `dest`: its length and content follow from
/// the three numbers alone, so a receiver can check what it got without being told.
pub fn message(sender: u32, dest: u32, k: u64, max_len: usize) -> Vec<u8> {
    let mut r = Rng::new((u64::from(sender) << 48) ^ (u64::from(dest) << 32) ^ k);
    // Mostly small, as aggregation traffic is; some up to `max_len`.
    let len = if r.below(10) < 8 {
        r.below(24.min(max_len as u64 + 1))
    } else {
        r.below(max_len as u64 + 1)
    } as usize;
    r.bytes(len)
}
