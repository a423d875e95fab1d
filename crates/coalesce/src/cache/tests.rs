//! Unit tests of the cache.

use super::*;
use crate::testutil::{pair, Rng, WAIT};
use crate::Applier;

/// Serves a `len`-byte window on `rx` until the cache closes (after `delay`, to make
/// late application visible); returns the window's bytes.
fn serve(rx: Box<dyn Endpoint>, len: usize, delay: Duration) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let w = rx.register(len, Access::WRITE).unwrap();
        let mut a = Applier::new(&*rx, w);
        a.announce().unwrap();
        std::thread::sleep(delay);
        while a.next_flush(Some(WAIT)).unwrap().is_some() {}
        let mut out = vec![0u8; len];
        a.window().read_at(0, &mut out).unwrap();
        out
    })
}

fn small() -> Geometry {
    Geometry {
        line_bytes: 8,
        lines_per_way: 4,
        ways: 2,
        sets: 1,
    }
}

#[test]
fn push_and_pull_on_both_backends_equal_writing_every_line_directly() {
    for backend in ["shm", "tcp"] {
        for transfer in [Transfer::Push, Transfer::Pull] {
            let (tx, rx) = pair(backend);
            let len = 3 << 10;
            let server = serve(rx, len, Duration::ZERO);
            let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
            let g = Geometry {
                line_bytes: 16,
                lines_per_way: 16,
                ways: 2,
                sets: 4,
            };
            let cfg = CacheConfig::new()
                .geometry(g)
                .transfer(transfer)
                .in_flight(2);
            let mut cache = CommCache::new(&*tx, remote, cfg).unwrap();
            assert_eq!(cache.pulls(), transfer == Transfer::Pull);
            let mut model = vec![0u8; len];
            let mut rng = Rng(0x1234_5678 ^ len as u64);
            for i in 0..6000u64 {
                // Random lines, with streaming runs now and then.
                let off = if i % 500 < 100 {
                    (i * 16) % len as u64
                } else {
                    rng.below(len as u64 / 16) * 16
                };
                let line = [(i % 251) as u8 + 1; 16];
                cache.insert(off, &line).unwrap();
                model[off as usize..off as usize + 16].copy_from_slice(&line);
                // Short passes leave ways from a few lines to full: every path runs.
                if i % 150 == 149 {
                    cache.flush_async().unwrap();
                }
            }
            let stats = cache.close().unwrap();
            let got = server.join().unwrap();
            assert!(got == model, "{backend} {transfer}: window differs");
            let what = format!("{backend} {transfer}: {stats:?}");
            assert!(
                stats.rma_transfers > 0 && stats.message_transfers > 0,
                "{what}"
            );
            assert_eq!(
                stats.pull_transfers > 0,
                transfer == Transfer::Pull,
                "{what}"
            );
            assert_eq!(stats.lines_in, 6000);
        }
    }
}

/// Regression: a block sent as a message (applied whenever the receiver gets to it)
/// and then rewritten whole must not go as an RMA in the same epoch: the RMA would land
/// first and the older message would overwrite it.
#[test]
fn insert_all_keeps_the_lines_before_a_bad_one_and_none_after() {
    let (tx, rx) = pair("shm");
    let server = serve(rx, 4096, Duration::ZERO);
    let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
    let mut cache = CommCache::new(&*tx, remote, CacheConfig::new().geometry(small())).unwrap();
    let lines = [[1u8; 8], [2; 8], [3; 8], [4; 8]];
    // The third offset is not on a line boundary.
    let offsets = [0u64, 64, 130, 192];
    let err = cache
        .insert_all(offsets.iter().zip(&lines).map(|(&o, l)| (o, &l[..])))
        .unwrap_err();
    assert!(matches!(err, Error::BadWrite { offset: 130, .. }), "{err}");
    assert_eq!(cache.stats().lines_in, 2);
    cache.close().unwrap();
    let got = server.join().unwrap();
    assert_eq!(&got[..8], &[1; 8]);
    assert_eq!(&got[64..72], &[2; 8]);
    assert!(
        got[128..200].iter().all(|&b| b == 0),
        "a line after the bad one arrived"
    );
}

#[test]
fn rma_after_message_to_the_same_block_keeps_the_newer_lines() {
    let (tx, rx) = pair("shm");
    // The receiver applies nothing for a while: messages are late, RMAs are not.
    let server = serve(rx, 4096, Duration::from_millis(200));
    let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
    let g = Geometry { ways: 1, ..small() };
    let cfg = CacheConfig::new().geometry(g).transfer(Transfer::Push);
    let mut cache = CommCache::new(&*tx, remote, cfg).unwrap();
    // Block 0, lines 0 and 2 (scattered) ...
    cache.insert(0, &[1; 8]).unwrap();
    cache.insert(16, &[1; 8]).unwrap();
    // ... evicted by block 1: goes as a message.
    cache.insert(32, &[9; 8]).unwrap();
    // Block 0 rewritten whole (contiguous), evicted again by block 1.
    cache.write(0, &[2; 32]).unwrap();
    cache.insert(40, &[9; 8]).unwrap();
    let stats = cache.close().unwrap();
    let got = server.join().unwrap();
    assert_eq!(
        &got[..32],
        &[2; 32],
        "the newer lines of block 0 were overwritten"
    );
    assert_eq!(&got[32..48], &[9; 16]);
    // Block 0 went twice as a message (the second time because of the first); block 1
    // twice as an RMA (one line, then two contiguous ones at the close).
    assert_eq!((stats.message_transfers, stats.rma_transfers), (2, 2));
}

#[test]
fn placement_decides_which_of_two_equally_full_ways_is_sent() {
    for (placement, second) in [(Placement::FirstFree, 2usize), (Placement::RoundRobin, 1)] {
        let (tx, rx) = pair("shm");
        let server = std::thread::spawn(move || {
            let w = rx.register(4096, Access::READ_WRITE).unwrap();
            let mut a = Applier::new(&*rx, w);
            a.announce().unwrap();
            while a.next_flush(Some(WAIT)).unwrap().is_some() {}
        });
        let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
        let cfg = CacheConfig::new()
            .geometry(small())
            .placement(placement)
            .transfer(Transfer::Push);
        let mut cache = CommCache::new(&*tx, remote, cfg).unwrap();
        // Blocks 0 and 1 take ways 0 and 1; block 2 evicts way 0 under both policies
        // (the round-robin pointer is back at 0). Block 3 then evicts way 0 again
        // (block 2) under first-free, way 1 (block 1) under round-robin.
        for block in 0..4u8 {
            cache
                .insert(u64::from(block) * 32, &[block + 1; 8])
                .unwrap();
        }
        assert_eq!(cache.stats().evictions, 2);
        // Evicted ways went as RMAs: they are in the window before any flush.
        let mut peek = vec![0u8; 128];
        tx.map_remote(remote.offset, 128)
            .unwrap()
            .read_at(0, &mut peek)
            .unwrap();
        let firsts: Vec<u8> = (0..4).map(|b| peek[b * 32]).collect();
        let mut want = vec![1u8, 0, 0, 0];
        want[second] = second as u8 + 1;
        assert_eq!(firsts, want, "{placement}");
        cache.close().unwrap();
        server.join().unwrap();
    }
}

#[test]
fn flush_async_overlaps_passes_and_wait_returns_once_acknowledged() {
    let (tx, rx) = pair("shm");
    // The cache's capacity: no evictions, dense ways at each flush. The applier starts
    // late, so the second pass finds the one spare buffer gone and must wait for a
    // returned one (a prompt applier could return them all in time).
    let len = 32 << 10;
    let server = serve(rx, len, Duration::from_millis(300));
    let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
    let g = Geometry {
        line_bytes: 64,
        lines_per_way: 32,
        ways: 2,
        sets: 8,
    };
    let cfg = CacheConfig::new()
        .geometry(g)
        .transfer(Transfer::Pull)
        .in_flight(1);
    let mut cache = CommCache::new(&*tx, remote, cfg).unwrap();
    let mut rng = Rng(77);
    let mut model = vec![0u8; len];
    let mut last = 0;
    for pass in 1..=5u8 {
        for _ in 0..1024 {
            let off = rng.below(len as u64 / 64) * 64;
            cache.insert(off, &[pass; 64]).unwrap();
            model[off as usize..off as usize + 64].fill(pass);
        }
        last = cache.flush_async().unwrap();
    }
    assert_eq!(last, 5);
    cache.wait(last).unwrap();
    let s = cache.stats();
    assert_eq!(s.flushes, 5);
    assert!(
        s.pull_transfers >= 5 * 16,
        "every pass hands its 16 ways over: {s:?}"
    );
    assert!(
        s.buffer_waits > 0,
        "one spare buffer must have run out: {s:?}"
    );
    let e = cache.wait(6).unwrap_err().to_string();
    assert!(e.contains("flush 6 was not started"), "{e}");
    cache.close().unwrap();
    assert!(server.join().unwrap() == model);
}

/// Regression: a flush that needs no acknowledgement (only RMAs) leaves it unread; a
/// cache dropped after that left it to the next cache on the endpoint, which took it
/// for the acknowledgement of its own flush ("expected ... flush 1, got Ack(33)").
#[test]
fn a_new_cache_ignores_acknowledgements_meant_for_a_dropped_one() {
    let (tx, rx) = pair("shm");
    let server = std::thread::spawn(move || {
        let w = rx.register(4096, Access::READ_WRITE).unwrap();
        let mut a = Applier::new(&*rx, w);
        a.announce().unwrap();
        // Slow: every flush is acknowledged 100 ms after the previous one.
        loop {
            std::thread::sleep(Duration::from_millis(100));
            if a.next_flush(Some(WAIT)).unwrap().is_none() {
                break;
            }
        }
    });
    let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
    let cfg = CacheConfig::new()
        .geometry(small())
        .transfer(Transfer::Push);
    let mut first = CommCache::new(&*tx, remote, cfg.clone()).unwrap();
    for k in 0..3u64 {
        first.write(k * 32, &[7; 32]).unwrap(); // whole ways: RMAs only
        first.flush().unwrap();
    }
    drop(first); // three acknowledgements still on their way
    let mut second = CommCache::new(&*tx, remote, cfg).unwrap();
    second.insert(128, &[5; 8]).unwrap();
    second.insert(144, &[5; 8]).unwrap(); // scattered: a message the applier copies
    second.flush().unwrap();
    let mut peek = [0u8; 24];
    tx.map_remote(remote.offset + 128, 24)
        .unwrap()
        .read_at(0, &mut peek)
        .unwrap();
    assert_eq!(
        peek,
        [[5u8; 8], [0; 8], [5; 8]].concat()[..],
        "flush returned early"
    );
    second.close().unwrap();
    server.join().unwrap();
}

#[test]
fn a_window_too_large_for_the_block_directory_is_refused() {
    let (tx, _rx) = pair("shm");
    let remote = RemoteWindow {
        offset: 1 << 20,
        len: 1 << 50,
    };
    let e = CommCache::new(&*tx, remote, CacheConfig::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("use longer ways"), "{e}");
}

#[test]
fn default_geometry_makes_32_kib_ways_and_a_2_mib_cache() {
    let g = Geometry::default();
    assert_eq!(g.way_bytes(), 32 << 10);
    assert_eq!(g.capacity(), 2 << 20);
    g.validate().unwrap();
    assert_eq!(g.to_string(), "16s×4w×512L×64B");
}

#[test]
fn bad_geometries_name_the_field() {
    let bad = |g: Geometry, what: &str| {
        let e = g.validate().unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    };
    let d = Geometry::default();
    bad(
        Geometry {
            line_bytes: 48,
            ..d
        },
        "line_bytes is 48",
    );
    bad(
        Geometry {
            lines_per_way: 0,
            ..d
        },
        "lines_per_way is 0",
    );
    bad(Geometry { ways: 0, ..d }, "ways is 0");
    bad(Geometry { sets: 3, ..d }, "sets is 3");
    bad(
        Geometry {
            sets: 65536,
            ways: 64,
            ..d
        },
        "exceeds",
    );
}

#[test]
fn placement_names_round_trip() {
    for p in [Placement::FirstFree, Placement::RoundRobin] {
        assert_eq!(p.to_string().parse::<Placement>().unwrap(), p);
    }
    assert!("lru"
        .parse::<Placement>()
        .unwrap_err()
        .contains("first-free"));
}
