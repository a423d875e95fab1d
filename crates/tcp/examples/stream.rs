//! Streaming bandwidth of one connection on loopback: `cargo run --release -p accio-tcp
//! --example stream -- [MESSAGE_BYTES] [SECONDS]` (defaults: 2 MiB, 3 s). Compare with
//! `iperf3 -s` / `iperf3 -c 127.0.0.1 -l 1M -t SECONDS` run side by side.

use std::time::{Duration, Instant};

use accio_core::{Endpoint, Listener};
use accio_tcp::{TcpEndpoint, TcpListener};

fn main() -> accio_core::Result<()> {
    let mut args = std::env::args().skip(1);
    // An empty message ends the stream, so messages have at least 1 byte.
    let size: usize = args
        .next()
        .map_or(2 << 20, |s| s.parse().expect("message bytes"))
        .max(1);
    let secs: f64 = args.next().map_or(3.0, |s| s.parse().expect("seconds"));
    let l = TcpListener::bind(&"tcp://127.0.0.1:0".parse()?)?;
    let addr = l.local_addr().clone();
    let rx = std::thread::spawn(move || -> accio_core::Result<(u64, Duration)> {
        let ep = l.accept_tcp(Some(Duration::from_secs(5)))?;
        let mut buf = Vec::new();
        let mut bytes = 0u64;
        let mut start = None;
        loop {
            let n = ep.recv(&mut buf)?;
            if n == 0 {
                break;
            }
            start.get_or_insert_with(Instant::now);
            bytes += n as u64;
        }
        Ok((bytes, start.map_or(Duration::ZERO, |s| s.elapsed())))
    });
    let ep = TcpEndpoint::connect(&addr, Duration::from_secs(5))?;
    let msg = vec![7u8; size];
    let until = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < until {
        ep.send(&msg)?;
    }
    ep.send(&[])?;
    let (bytes, took) = rx.join().unwrap()?;
    println!(
        "{} messages of {size} bytes: {:.2} GB/s ({:.1} Gbit/s)",
        bytes / size as u64,
        bytes as f64 / took.as_secs_f64() / 1e9,
        bytes as f64 * 8.0 / took.as_secs_f64() / 1e9
    );
    Ok(())
}
