//! Waits that go to sleep at once (no spin) are woken by the other side's push or pop,
//! on both rings (a consumer's pop wakes the producer without a fence of its own where
//! both processes take part in process-wide barriers, `ring::wake`). A lost wake-up costs
//! the sleeper its whole sleep tick (50 ms) before it looks again, so the test counts the
//! round trips that took that long. The race it guards against is narrow (a handshake
//! with no barrier on either side passed it 3 times out of 3 here): the ordering argument
//! is `ring::wake`'s, and loom checks the fenced handshake (`loom_models`).

use std::time::{Duration, Instant};

use accio_core::{Addr, Endpoint};
use accio_shm::{ShmEndpoint, ShmListener, ShmOptions};

/// Far below the 50 ms sleep tick a lost wake-up costs, far above a futex wake-up.
const STALL: Duration = Duration::from_millis(40);

#[test]
fn sleepers_on_both_rings_are_woken_by_every_push_and_pop() {
    let opts = ShmOptions {
        ring_bytes: 64 << 10,
        chunk_bytes: 16 << 10,
        spin: Duration::ZERO,
        ..ShmOptions::default()
    };
    let addr: Addr = format!("shm://sleep-{}", std::process::id())
        .parse()
        .expect("address");
    let listener = ShmListener::bind(&addr).expect("bind");
    let rounds = 1000;
    let echo = std::thread::spawn(move || {
        let mut ep = listener
            .accept_shm(Some(Duration::from_secs(10)))
            .expect("accept");
        ep.set_spin(Duration::ZERO);
        let mut buf = Vec::new();
        for _ in 0..rounds {
            // Four ring-filling messages: the sender sleeps for room on the last ones.
            for _ in 0..4 {
                ep.recv(&mut buf).expect("recv");
            }
            ep.send(&buf[..8]).expect("answer");
        }
    });
    let ep = ShmEndpoint::connect_with(&addr, Duration::from_secs(10), opts).expect("connect");
    let msg = vec![7u8; 16 << 10];
    let mut buf = Vec::new();
    let mut stalls = Vec::new();
    for round in 0..rounds {
        let t = Instant::now();
        for _ in 0..4 {
            ep.send(&msg).expect("send");
        }
        ep.recv(&mut buf).expect("recv");
        assert_eq!(buf, [7u8; 8], "round {round}");
        if t.elapsed() >= STALL {
            stalls.push((round, t.elapsed()));
        }
    }
    echo.join().expect("echo thread");
    // One stall may be the machine's (a thread preempted for that long).
    assert!(
        stalls.len() <= 1,
        "rounds that waited out a sleep tick: {stalls:?}"
    );
}
