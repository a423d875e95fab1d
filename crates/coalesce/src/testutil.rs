//! Helpers of the unit tests: connected endpoint pairs and a deterministic generator.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use accio_core::Endpoint;

/// How long a test step may wait before it fails instead of hanging.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A connected pair on `backend` (`shm` or `tcp`): (connecting end, accepted end).
pub(crate) fn pair(backend: &str) -> (Box<dyn Endpoint>, Box<dyn Endpoint>) {
    let addr = match backend {
        "shm" => format!(
            "shm://accio-coalesce-unit-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ),
        _ => "tcp://127.0.0.1:0".to_string(),
    };
    let listener = accio::listen(&addr).expect("listen");
    let addr = listener.local_addr().to_string();
    let acceptor = std::thread::spawn(move || listener.accept(Some(WAIT)).expect("accept"));
    let client = accio::connect(&addr, WAIT).expect("connect");
    (client, acceptor.join().expect("accept thread"))
}

/// xorshift64: deterministic, so a failure replays.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
