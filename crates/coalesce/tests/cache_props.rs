//! Property tests of the communication cache on every backend: random geometries,
//! placements and access patterns (random lines, streaming runs, a hot set rewritten over
//! and over, multi-line writes, flushes at random points, footprints larger than the
//! cache). After the final flush the receiver's window must equal, byte for byte, a second
//! window the same lines were written to with one direct `vwrite_to` each — and both must
//! equal a local model of the writes in program order.

mod common;

use std::time::Duration;

use accio::{Access, Endpoint, RmaFlags};
use accio_coalesce::{
    Applier, CacheConfig, CommCache, Geometry, Placement, RemoteWindow, Transfer,
};

use common::{pair, Rng, BACKENDS, WAIT};

/// One random case: its geometry, placement and whether checked mode is on.
#[derive(Debug, Clone, Copy)]
struct Case {
    geometry: Geometry,
    placement: Placement,
    /// Who copies the lines (pull only where the backend maps peer memory).
    transfer: Transfer,
    checked: bool,
    /// Window bytes (the footprint the writes spread over).
    window: usize,
    ops: usize,
}

impl Case {
    fn random(rng: &mut Rng, backend: &str) -> Case {
        let geometry = Geometry {
            line_bytes: rng.pick(&[8, 16, 64, 128]),
            lines_per_way: rng.pick(&[1, 2, 8, 32, 64]),
            ways: rng.pick(&[1, 2, 3, 4]),
            sets: rng.pick(&[1, 2, 4, 8]),
        };
        // From half the cache (everything fits) to 4x (conflict misses all the time).
        let cap = geometry.capacity();
        let window = (cap / 2 + rng.below(cap as u64 * 4) as usize).max(geometry.line_bytes);
        let window = window.div_ceil(4096) * 4096;
        Case {
            geometry,
            placement: rng.pick(&[Placement::FirstFree, Placement::RoundRobin]),
            transfer: if backend == "shm" {
                rng.pick(&[Transfer::Auto, Transfer::Push, Transfer::Pull])
            } else {
                rng.pick(&[Transfer::Auto, Transfer::Push])
            },
            checked: rng.one_in(3),
            window,
            ops: 1500 + rng.below(1500) as usize,
        }
    }
}

/// What the receiver thread returns: the cache's window and the direct-RMA window.
type Windows = (Vec<u8>, Vec<u8>);

/// Runs one case on `backend`; panics with the seed on any mismatch. Returns the cache's
/// counters, so callers can check that the cases covered every path.
fn run_case(backend: &str, seed: u64) -> accio_coalesce::CacheStats {
    let mut rng = Rng::new(seed);
    let case = Case::random(&mut rng, backend);
    let ctx = format!("{backend} seed {seed}: {case:?}");
    let (tx, rx) = pair(backend);
    let window = case.window;
    let checked = case.checked;
    let receiver = std::thread::spawn(move || -> accio_coalesce::Result<Windows> {
        let cache_win = rx.register(window, Access::WRITE)?;
        let direct_win = rx.register(window, Access::WRITE)?;
        rx.send(&direct_win.offset().to_le_bytes())?;
        let mut applier = Applier::new(&*rx, cache_win.clone());
        if checked {
            applier = applier.checked(0);
        }
        applier.announce()?;
        while applier.next_flush(Some(WAIT))?.is_some() {}
        let mut a = vec![0u8; window];
        let mut b = vec![0u8; window];
        cache_win.read_at(0, &mut a)?;
        direct_win.read_at(0, &mut b)?;
        Ok((a, b))
    });

    let mut msg = Vec::new();
    tx.recv_timeout(&mut msg, Some(WAIT))
        .expect("direct window offset");
    let direct = u64::from_le_bytes(msg[..8].try_into().unwrap());
    let remote = RemoteWindow::receive(&*tx, Some(WAIT)).expect("window announcement");
    assert_eq!(remote.len, window as u64, "{ctx}");
    let mut config = CacheConfig::new()
        .geometry(case.geometry)
        .placement(case.placement)
        .transfer(case.transfer)
        .flush_timeout(Some(WAIT));
    if case.checked {
        config = config.checked(1, 0);
    }
    let mut cache = CommCache::new(&*tx, remote, config).expect("cache");
    let mut model = vec![0u8; window];
    let line = case.geometry.line_bytes;
    let lines = (window / line) as u64;
    let hot: Vec<u64> = (0..8).map(|_| rng.below(lines)).collect();
    let mut ops = 0;
    let mut flushes = 0;
    while ops < case.ops {
        // One burst of a pattern, then maybe a flush.
        let (start, count) = match rng.below(4) {
            0 => (rng.below(lines), 1),                     // random line
            1 => (rng.below(lines), 1 + rng.below(3 * 64)), // streaming run
            2 => (rng.pick(&hot), 1),                       // repeated
            _ => (rng.below(lines), 2 + rng.below(6)),      // multi-line write
        };
        let count = count.min(lines - start);
        let off = start * line as u64;
        let data = rng.bytes(count as usize * line);
        if count > 1 && rng.one_in(2) {
            cache.write(off, &data).expect("write");
        } else {
            for (i, l) in data.chunks(line).enumerate() {
                cache.insert(off + (i * line) as u64, l).expect("insert");
            }
        }
        for (i, l) in data.chunks(line).enumerate() {
            let at = off + (i * line) as u64;
            tx.vwrite_to(l, direct + at, RmaFlags::ASYNC)
                .expect("direct vwrite_to");
        }
        model[off as usize..off as usize + data.len()].copy_from_slice(&data);
        ops += count as usize;
        if rng.one_in(40) {
            cache.flush().expect("flush");
            flushes += 1;
        }
    }
    let mark = tx.fence_mark().unwrap();
    tx.fence_wait(mark).unwrap();
    let stats = cache.close().expect("close");
    let (got_cache, got_direct) = receiver.join().unwrap().expect("receiver");
    assert!(
        got_direct == model,
        "{ctx}: direct RMA window differs from the model"
    );
    if got_cache != model {
        let first = got_cache
            .iter()
            .zip(&model)
            .position(|(a, b)| a != b)
            .unwrap();
        panic!(
            "{ctx}: cache window differs from direct RMA at byte {first:#x} (line {}), \
             stats {stats:?}",
            first / line
        );
    }
    // Every line inserted was counted, and no more lines left than were inserted.
    assert_eq!(stats.lines_in as usize, ops, "{ctx}");
    assert!(stats.lines_sent <= stats.lines_in, "{ctx}: {stats:?}");
    assert_eq!(stats.flushes, flushes + 1, "{ctx}");
    assert_eq!(
        stats.transfers,
        stats.rma_transfers + stats.message_transfers + stats.pull_transfers,
        "{ctx}"
    );
    if case.checked {
        assert_eq!(
            stats.transfers, stats.message_transfers,
            "{ctx}: checked lines always travel as messages"
        );
    }
    stats
}

/// Sums the counters of many cases.
fn run_cases(backend: &str, seeds: std::ops::Range<u64>) -> accio_coalesce::CacheStats {
    let mut t = accio_coalesce::CacheStats::default();
    for seed in seeds {
        let s = run_case(backend, seed);
        t.evictions += s.evictions;
        t.rma_transfers += s.rma_transfers;
        t.message_transfers += s.message_transfers;
        t.pull_transfers += s.pull_transfers;
        t.lines_in += s.lines_in;
        t.lines_sent += s.lines_sent;
    }
    t
}

#[test]
fn cache_window_equals_direct_rma_on_shm() {
    let t = run_cases("shm", 0..64);
    // The cases went through every path: conflict misses, RMA, messages, pulls, rewrites.
    assert!(t.evictions > 0 && t.rma_transfers > 0, "{t:?}");
    assert!(t.message_transfers > 0 && t.pull_transfers > 0, "{t:?}");
    assert!(t.lines_sent < t.lines_in, "{t:?}");
}

#[test]
fn cache_window_equals_direct_rma_on_tcp() {
    let t = run_cases("tcp", 100..116);
    assert!(t.evictions > 0 && t.rma_transfers > 0, "{t:?}");
    assert!(
        t.message_transfers > 0 && t.lines_sent < t.lines_in,
        "{t:?}"
    );
}

/// A receiver that applies and acknowledges until the cache closes, returning its window.
fn serve(rx: Box<dyn Endpoint>, window: usize) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let win = rx.register(window, Access::WRITE).unwrap();
        let mut a = Applier::new(&*rx, win.clone());
        a.announce().unwrap();
        while a.next_flush(Some(WAIT)).unwrap().is_some() {}
        let mut out = vec![0u8; window];
        win.read_at(0, &mut out).unwrap();
        out
    })
}

#[test]
fn a_line_written_twice_before_a_flush_is_sent_once_with_its_last_value() {
    for backend in BACKENDS {
        let (tx, rx) = pair(backend);
        let receiver = serve(rx, 1 << 16);
        let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
        let mut cache = CommCache::new(&*tx, remote, CacheConfig::new()).unwrap();
        cache.insert(4096, &[1u8; 64]).unwrap();
        cache.insert(4096, &[2u8; 64]).unwrap();
        cache.insert(4096 + 64, &[3u8; 64]).unwrap();
        cache.insert(4096, &[4u8; 64]).unwrap();
        let s = cache.close().unwrap();
        let w = receiver.join().unwrap();
        assert_eq!(&w[4096..4160], &[4u8; 64], "{backend}: last value wins");
        assert_eq!(&w[4160..4224], &[3u8; 64], "{backend}");
        assert_eq!((s.lines_in, s.lines_sent), (4, 2), "{backend}: {s:?}");
        // Two contiguous lines of one way: one transfer of 128 bytes.
        assert_eq!((s.transfers, s.payload_bytes), (1, 128), "{backend}: {s:?}");
        assert!(
            w[..4096].iter().chain(&w[4224..]).all(|&b| b == 0),
            "{backend}"
        );
    }
}

#[test]
fn a_conflict_miss_sends_the_fullest_way_of_the_set_as_one_transfer() {
    // One set of two ways of four 64-byte lines: blocks are 256 bytes.
    let geometry = Geometry {
        line_bytes: 64,
        lines_per_way: 4,
        ways: 2,
        sets: 1,
    };
    for placement in [Placement::FirstFree, Placement::RoundRobin] {
        let (tx, rx) = pair("shm");
        let receiver = serve(rx, 4096);
        let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
        let cfg = CacheConfig::new().geometry(geometry).placement(placement);
        let mut cache = CommCache::new(&*tx, remote, cfg).unwrap();
        for i in 0..3u64 {
            cache.insert(i * 64, &[10 + i as u8; 64]).unwrap(); // block 0: 3 lines
        }
        cache.insert(256 + 128, &[20; 64]).unwrap(); // block 1: 1 line
        assert_eq!(
            cache.stats().transfers,
            0,
            "both blocks fit: nothing sent yet"
        );
        cache.insert(512, &[30; 64]).unwrap(); // block 2: conflict miss
        let s = cache.stats();
        assert_eq!(s.evictions, 1, "{placement}: {s:?}");
        assert_eq!(s.transfers, 1, "{placement}: {s:?}");
        assert_eq!(
            s.lines_sent, 3,
            "{placement}: the fullest way (block 0) left: {s:?}"
        );
        assert_eq!(s.payload_bytes, 192, "{placement}: {s:?}");
        let end = cache.close().unwrap();
        assert_eq!(end.lines_sent, 5, "{placement}: {end:?}");
        let w = receiver.join().unwrap();
        for i in 0..3 {
            assert_eq!(w[i * 64], 10 + i as u8, "{placement}");
        }
        assert_eq!((w[256 + 128], w[512]), (20, 30), "{placement}");
    }
}

#[test]
fn full_ways_go_as_one_transfer_each_and_transfers_average_a_way() {
    // A streaming writer over 4x the default cache: every way leaves full, and the
    // average transfer is one 32 KiB way (plus, for messages and pulls, a small header).
    for (backend, transfer) in [
        ("shm", Transfer::Push),
        ("shm", Transfer::Pull),
        ("tcp", Transfer::Auto),
    ] {
        let ctx = format!("{backend} {transfer}");
        let (tx, rx) = pair(backend);
        let receiver = serve(rx, 8 << 20);
        let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
        let cfg = CacheConfig::new().transfer(transfer);
        let mut cache = CommCache::new(&*tx, remote, cfg).unwrap();
        let line: Vec<u8> = (0..64u8).collect();
        for off in (0..8u64 << 20).step_by(64) {
            cache.insert(off, &line).unwrap();
        }
        let s = cache.close().unwrap();
        let w = receiver.join().unwrap();
        assert!(w.chunks(64).all(|c| c == line.as_slice()), "{ctx}");
        assert_eq!(
            (s.transfers, s.payload_bytes),
            (256, 8 << 20),
            "{ctx}: {s:?}"
        );
        let avg = s.avg_transfer_bytes();
        assert!((32768.0..32768.0 + 64.0).contains(&avg), "{ctx}: {s:?}");
        if transfer == Transfer::Push {
            assert_eq!(
                s.rma_transfers, 256,
                "{ctx}: contiguous ways go as RMA: {s:?}"
            );
        }
    }
}

#[test]
fn inserts_outside_the_window_or_off_a_line_are_refused_and_cache_nothing() {
    let (tx, rx) = pair("shm");
    let receiver = serve(rx, 4096);
    let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
    let mut cache = CommCache::new(&*tx, remote, CacheConfig::new()).unwrap();
    let e = cache.insert(4096, &[1; 64]).unwrap_err().to_string();
    assert!(e.contains("0x1000") && e.contains("ends before it"), "{e}");
    let e = cache.insert(32, &[1; 64]).unwrap_err().to_string();
    assert!(e.contains("line boundary"), "{e}");
    let e = cache.insert(0, &[1; 8]).unwrap_err().to_string();
    assert!(e.contains("exactly 64 bytes"), "{e}");
    let e = cache.write(4032, &[1; 128]).unwrap_err().to_string();
    assert!(e.contains("ends before it"), "{e}");
    let s = cache.close().unwrap();
    assert_eq!((s.lines_in, s.transfers), (0, 0), "{s:?}");
    assert!(receiver.join().unwrap().iter().all(|&b| b == 0));
}

#[test]
fn flush_waits_for_the_applier_and_fails_when_the_receiver_is_gone() {
    let (tx, rx) = pair("shm");
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let receiver = std::thread::spawn(move || {
        let win = rx.register(1 << 16, Access::WRITE).unwrap();
        Applier::new(&*rx, win).announce().unwrap();
        // Never applies anything: closes instead, once the cache is set up (which
        // registers its own window with the peer, so needs it alive).
        let _ = wait.recv();
        drop(rx);
    });
    let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
    let cfg = CacheConfig::new().flush_timeout(Some(Duration::from_secs(5)));
    let mut cache = CommCache::new(&*tx, remote, cfg).unwrap();
    cache.insert(0, &[1; 64]).unwrap();
    cache.insert(128, &[1; 64]).unwrap(); // a hole: the way goes as a message
    go.send(()).unwrap();
    receiver.join().unwrap();
    let e = cache.flush().unwrap_err();
    let inner = e.endpoint_error_kind();
    assert_eq!(inner, Some(accio::ErrorKind::PeerGone), "{e}");
}

/// The endpoint error kind under a coalescing error, if any.
trait EndpointKind {
    fn endpoint_error_kind(&self) -> Option<accio::ErrorKind>;
}

impl EndpointKind for accio_coalesce::Error {
    fn endpoint_error_kind(&self) -> Option<accio::ErrorKind> {
        match self {
            accio_coalesce::Error::Endpoint(e) => Some(e.kind()),
            _ => None,
        }
    }
}
