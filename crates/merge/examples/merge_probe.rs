//! Times one merge and splits the merger thread's time into file writes, idle, and the
//! rest, to see where a merge falls short of the file system's write speed.
//!
//! `cargo run --release -p accio-merge --example merge_probe -- shm 4 64 /dev/shm`
//! (backend, producer threads, 2 MiB blocks per producer, directory).

use std::time::Instant;

use accio_merge::{ContainerSink, Merger, Producer, SyncPolicy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let backend = args.get(1).map_or("shm", String::as_str).to_string();
    let p: usize = args.get(2).map_or(Ok(4), |s| s.parse())?;
    let f: usize = args.get(3).map_or(Ok(64), |s| s.parse())?;
    let dir = args.get(4).map_or("/dev/shm", String::as_str);
    let path = std::path::Path::new(dir).join(format!("merge-probe-{}.accio", std::process::id()));
    let addr = match backend.as_str() {
        "shm" => format!("shm://merge-probe-{}", std::process::id()),
        _ => "tcp://127.0.0.1:0".into(),
    };
    let merger = Merger::builder().sync(SyncPolicy::Never).listen(
        &addr,
        Box::new(ContainerSink::create(&path, Default::default())?),
    )?;
    let a = merger.addr().to_string();
    let src = vec![7u8; 2 << 20];
    let go = std::sync::Barrier::new(p + 1);
    let t0 = std::thread::scope(|s| {
        for _ in 0..p {
            s.spawn(|| {
                let mut prod = Producer::connect(&a).unwrap();
                go.wait();
                for _ in 0..f {
                    prod.write_block(&src).unwrap();
                }
                prod.finish().unwrap();
            });
        }
        go.wait();
        Instant::now()
    });
    let sum = merger.close()?;
    let secs = t0.elapsed().as_secs_f64();
    let bytes = sum.sink.payload_bytes as f64;
    println!(
        "{backend} P={p} F={f}: {:.2} GB/s; merger: writes {:.0}% ({:.2} GB/s while writing), idle {:.0}%",
        bytes / secs / 1e9,
        sum.stats.sink_write_ns as f64 / 1e9 / secs * 100.0,
        bytes / (sum.stats.sink_write_ns as f64 / 1e9) / 1e9,
        sum.stats.idle_ns as f64 / 1e9 / secs * 100.0,
    );
    std::fs::remove_file(&path)?;
    Ok(())
}
