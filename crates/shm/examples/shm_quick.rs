//! Rough in-process check of shm latency and bandwidth (two threads). For real figures use
//! `accio bench transport`, which runs two processes pinned to separate cores.

use std::time::{Duration, Instant};

use accio_core::{Access, Addr, Endpoint, RmaFlags};
use accio_shm::{ShmEndpoint, ShmListener};

fn main() {
    let addr: Addr = format!("shm://quick-{}", std::process::id())
        .parse()
        .unwrap();
    let l = ShmListener::bind(&addr).unwrap();
    let a2 = addr.clone();
    let peer = std::thread::spawn(move || {
        let env = |k: &str, d: usize| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let opts = accio_shm::ShmOptions {
            ring_bytes: env("RING", 4 << 20),
            chunk_bytes: env("CHUNK", 256 << 10),
            ..Default::default()
        };
        let ep = ShmEndpoint::connect_with(&a2, Duration::from_secs(5), opts).unwrap();
        let mut buf = Vec::new();
        // ping-pong
        loop {
            ep.recv(&mut buf).unwrap();
            if buf.is_empty() {
                break;
            }
            ep.send(&buf).unwrap();
        }
        // streaming sink
        for &size in &[512usize << 10, 2 << 20] {
            let n = (1usize << 30) / size;
            let t = Instant::now();
            for _ in 0..n {
                ep.recv(&mut buf).unwrap();
                assert_eq!(buf.len(), size);
            }
            let s = t.elapsed().as_secs_f64();
            println!(
                "stream {:>8} B: {:.2} GB/s (receiver)",
                size,
                (n * size) as f64 / s / 1e9
            );
            ep.send(b"done").unwrap();
        }
        let w = ep.register(64 << 20, Access::READ_WRITE).unwrap();
        ep.send(&w.offset().to_le_bytes()).unwrap();
        ep.recv(&mut buf).unwrap();
    });
    let ep = l.accept_shm(Some(Duration::from_secs(5))).unwrap();
    let mut buf = Vec::new();
    let msg = [7u8; 8];
    for _ in 0..10_000 {
        ep.send(&msg).unwrap();
        ep.recv(&mut buf).unwrap();
    }
    let n = 200_000;
    let t = Instant::now();
    for _ in 0..n {
        ep.send(&msg).unwrap();
        ep.recv(&mut buf).unwrap();
    }
    println!(
        "latency 8 B: {:.3} us one-way",
        t.elapsed().as_secs_f64() / n as f64 / 2.0 * 1e6
    );
    ep.send(&[]).unwrap();
    for &size in &[512usize << 10, 2 << 20] {
        let data = vec![1u8; size];
        let n = (1usize << 30) / size;
        for _ in 0..n {
            ep.send(&data).unwrap();
        }
        ep.recv(&mut buf).unwrap();
    }
    ep.recv(&mut buf).unwrap();
    let remote = u64::from_le_bytes(buf[..8].try_into().unwrap());
    let size = 2 << 20;
    let local = ep.register(size, Access::READ).unwrap();
    local.fill(3).unwrap();
    for _ in 0..2 {
        let iters = 2000;
        let t = Instant::now();
        for _ in 0..iters {
            let off = 0u64;
            ep.write_to(local.offset(), size, remote + off, RmaFlags::ASYNC)
                .unwrap();
        }
        let s = t.elapsed().as_secs_f64();
        println!("rma write 2M: {:.2} GB/s", (iters * size) as f64 / s / 1e9);
    }
    let src = accio_core::Region::anonymous(size).unwrap();
    let dst = accio_core::Region::anonymous(size).unwrap();
    let t = Instant::now();
    for _ in 0..2000 {
        // SAFETY: two distinct mappings of `size` bytes each.
        unsafe { accio_core::copy_bytes(dst.as_ptr(), src.as_ptr(), size) };
    }
    println!(
        "memcpy 2M: {:.2} GB/s",
        (2000 * size) as f64 / t.elapsed().as_secs_f64() / 1e9
    );
    ep.send(b"bye").unwrap();
    peer.join().unwrap();
}
