//! The cost of an insert alone: random 64-byte lines into a cache that holds the whole
//! footprint, so nothing is sent inside the timing. Compares one `insert` per line with
//! `insert_all`, and both with plain stores into a private array of the same size (the
//! floor for random line writes on this machine).
//!
//! `cargo run --release -p accio-coalesce --example insert_rate`

use std::time::{Duration, Instant};

use accio_coalesce::{Applier, CacheConfig, CommCache, Geometry, RemoteWindow, Transfer};

const FOOTPRINT: usize = 2 << 20;
const ITEMS: usize = 1 << 22;

fn rate(label: &str, mut f: impl FnMut()) {
    for _ in 0..3 {
        let t = Instant::now();
        f();
        let mops = ITEMS as f64 / t.elapsed().as_secs_f64() / 1e6;
        println!("{label:<24} {mops:6.1} M lines/s");
    }
}

fn main() -> accio_coalesce::Result<()> {
    let name = format!("shm://coalesce-insert-rate-{}", std::process::id());
    let listener = accio::listen(&name)?;
    let rx = std::thread::spawn(move || -> accio_coalesce::Result<()> {
        let ep = listener.accept(Some(Duration::from_secs(5)))?;
        let window = ep.register(FOOTPRINT, accio::Access::WRITE)?;
        let mut applier = Applier::new(&*ep, window);
        applier.announce()?;
        while applier.next_flush(Some(Duration::from_secs(60)))?.is_some() {}
        Ok(())
    });
    let ep = accio::connect(&name, Duration::from_secs(5))?;
    let remote = RemoteWindow::receive(&*ep, Some(Duration::from_secs(5)))?;
    let geometry = Geometry {
        line_bytes: 64,
        lines_per_way: 512,
        ways: 4,
        sets: 16,
    };
    let config = CacheConfig::new()
        .geometry(geometry)
        .transfer(Transfer::Push);
    let mut cache = CommCache::new(&*ep, remote, config)?;

    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let offsets: Vec<u64> = (0..ITEMS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % (FOOTPRINT as u64 / 64)) * 64
        })
        .collect();
    let payload: Vec<u8> = (0..64 * 64).map(|i| i as u8).collect();
    let line = |i: usize| &payload[(i & 63) * 64..(i & 63) * 64 + 64];

    let mut plain = vec![0u8; FOOTPRINT];
    let mut bits = vec![0u64; FOOTPRINT / 64 / 64];
    rate("plain stores", || {
        for (i, &o) in offsets.iter().enumerate() {
            let o = o as usize;
            plain[o..o + 64].copy_from_slice(line(i));
            bits[o / 4096] |= 1 << ((o / 64) % 64);
        }
        std::hint::black_box(&plain);
    });
    let mut result = Ok(());
    rate("insert, line by line", || {
        for (i, &o) in offsets.iter().enumerate() {
            if let Err(e) = cache.insert(o, line(i)) {
                result = Err(e);
                return;
            }
        }
    });
    result?;
    let mut result = Ok(());
    rate("insert_all", || {
        let items = offsets.iter().enumerate().map(|(i, &o)| (o, line(i)));
        if let Err(e) = cache.insert_all(items) {
            result = Err(e);
        }
    });
    result?;
    cache.close()?;
    rx.join().expect("receiver thread")
}
