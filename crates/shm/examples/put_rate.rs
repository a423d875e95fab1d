//! One small `write_to`/`vwrite_to` per call, in a loop: the per-call cost of the shm RMA
//! path (compare `ucx_perftest -t ucp_put_bw -s 64` with `UCX_TLS=posix,self`). Two
//! endpoints in one process; the peer only holds its window. Usage:
//! `put_rate [SIZE] [CALLS]` (defaults 64 and 20M). For instruction counts run it under
//! `valgrind --tool=callgrind` with fewer calls and divide by them.

use std::time::{Duration, Instant};

use accio_core::{Access, Addr, Endpoint, RmaFlags};
use accio_shm::{ShmEndpoint, ShmListener};

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let size = arg(1, 64);
    let calls = arg(2, 20_000_000);
    let addr: Addr = format!("shm://put-rate-{}", std::process::id())
        .parse()
        .unwrap();
    let l = ShmListener::bind(&addr).unwrap();
    let a2 = addr.clone();
    let peer = std::thread::spawn(move || {
        let ep = ShmEndpoint::connect(&a2, Duration::from_secs(5)).unwrap();
        let w = ep.register(1 << 20, Access::WRITE).unwrap();
        ep.send(&w.offset().to_le_bytes()).unwrap();
        let mut buf = Vec::new();
        ep.recv(&mut buf).unwrap(); // done
        drop(w);
    });
    let ep = l.accept_shm(Some(Duration::from_secs(5))).unwrap();
    let mut msg = Vec::new();
    ep.recv(&mut msg).unwrap();
    let remote = u64::from_le_bytes(msg[..8].try_into().unwrap());
    let local = ep.register(1 << 20, Access::NONE).unwrap();
    let src = vec![7u8; size];
    for (name, v) in [("write_to", false), ("vwrite_to", true)] {
        // Warm-up maps the peer window.
        ep.write_to(local.offset(), size, remote, RmaFlags::ASYNC)
            .unwrap();
        let t = Instant::now();
        for i in 0..calls {
            let off = ((i * size) % (64 << 10)) as u64;
            if v {
                ep.vwrite_to(&src, remote + off, RmaFlags::ASYNC).unwrap();
            } else {
                ep.write_to(local.offset() + off, size, remote + off, RmaFlags::ASYNC)
                    .unwrap();
            }
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "{name} {size} B: {:.1} M calls/s, {:.1} ns per call",
            calls as f64 / s / 1e6,
            s * 1e9 / calls as f64
        );
    }
    ep.send(b"done").unwrap();
    peer.join().unwrap();
}
