//! The merger with producer threads: content, order, back-pressure, the budget, records,
//! and the protocol-error paths.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use accio::Progress;
use accio_merge::container::{split_records, BlockKind, ContainerOptions, ContainerReader};
use accio_merge::{ContainerSink, Event, Merger, Producer, SyncPolicy, WriteMode};

mod common;
use common::{connect_as, payload, tmp, userfaultfd_available};

fn addr(backend: &str, name: &str) -> String {
    match backend {
        "shm" => format!("shm://accio-merge-it-{}-{name}", std::process::id()),
        _ => "tcp://127.0.0.1:0".into(),
    }
}

fn sink(path: &std::path::Path) -> Box<ContainerSink> {
    Box::new(ContainerSink::create(path, ContainerOptions::default()).unwrap())
}

/// Checks that every producer's blocks are in the file, in sequence, with their bytes.
fn check_file(path: &std::path::Path, producers: u32, blocks: u64, len_of: impl Fn(u64) -> usize) {
    let r = ContainerReader::open(path).unwrap();
    let v = r.verify().unwrap();
    assert!(v.is_whole(), "{:?}", v.problems);
    assert_eq!(v.producers.len() as u32, producers);
    let mut next = vec![0u64; producers as usize];
    for b in r.blocks() {
        let p = b.header.producer;
        // Per-producer order: sequence numbers appear in file order.
        assert_eq!(b.header.seq, next[p as usize], "producer {p} out of order");
        next[p as usize] += 1;
        assert_eq!(
            r.read_payload(b).unwrap(),
            payload(p, b.header.seq, len_of(b.header.seq))
        );
    }
    assert!(next.iter().all(|&n| n == blocks), "{next:?}");
}

fn many_threads_into_one_file(backend: &str, mode: WriteMode) {
    let path = tmp(&format!("threads-{backend}-{}", mode.name()));
    let merger = Merger::builder()
        .budget(8 << 20)
        .slot_bytes(256 << 10)
        .write_mode(mode)
        .listen(
            &addr(backend, &format!("threads-{}", mode.name())),
            sink(&path),
        )
        .unwrap();
    // Auto writes in place over shm (the test folder is on a local file system).
    let direct = backend == "shm" && mode != WriteMode::Copy;
    assert_eq!(
        merger.write_mode(),
        if direct {
            WriteMode::Direct
        } else {
            WriteMode::Copy
        }
    );
    let a = merger.addr().to_string();
    let (producers, blocks) = (6u32, 20u64);
    // Sizes vary, up to a full slot, to cover short commits.
    let len_of = |seq: u64| [256 << 10, 1, 100_000, 0, 4096][(seq % 5) as usize];
    let handles: Vec<_> = (0..producers)
        .map(|id| {
            let a = a.clone();
            std::thread::spawn(move || {
                let mut p = connect_as(&a, id);
                assert_eq!(p.id(), id);
                assert_eq!(p.is_zero_copy(), a.starts_with("shm") && !direct);
                assert_eq!(p.writes_in_place(), direct);
                for seq in 0..blocks {
                    let data = payload(id, seq, len_of(seq));
                    if seq % 2 == 0 {
                        let mut buf = p.buffer().unwrap();
                        buf.as_mut_slice()[..data.len()].copy_from_slice(&data);
                        assert_eq!(buf.commit(data.len()).unwrap(), seq);
                    } else {
                        assert_eq!(p.write_block(&data).unwrap(), seq);
                    }
                }
                let s = p.finish().unwrap();
                assert_eq!((s.id, s.blocks), (id, blocks));
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = merger.close().unwrap();
    assert_eq!(s.stats.finished, producers as usize);
    assert_eq!(s.stats.lost, 0);
    assert_eq!(s.sink.blocks, u64::from(producers) * blocks);
    check_file(&path, producers, blocks, len_of);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn many_threads_into_one_file_over_shm() {
    many_threads_into_one_file("shm", WriteMode::Auto);
}

#[test]
fn many_threads_into_one_file_over_shm_copying() {
    many_threads_into_one_file("shm", WriteMode::Copy);
}

#[test]
fn many_threads_into_one_file_over_tcp() {
    many_threads_into_one_file("tcp", WriteMode::Auto);
}

#[test]
fn direct_mode_is_refused_where_it_cannot_work() {
    let path = tmp("refused");
    let e = Merger::builder()
        .write_mode(WriteMode::Direct)
        .listen("tcp://127.0.0.1:0", sink(&path))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not an shm:// address"), "{e}");
    let small = ContainerSink::create(&path, ContainerOptions { align: 64 }).unwrap();
    let e = Merger::builder()
        .write_mode(WriteMode::Direct)
        .listen(&addr("shm", "refused"), Box::new(small))
        .unwrap_err()
        .to_string();
    assert!(e.contains("below the page size"), "{e}");
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn peak_slots_stay_within_the_budget_with_more_producers_than_slots() {
    peak_slots_within_budget(WriteMode::Copy);
}

#[test]
fn rooms_in_flight_stay_within_the_budget_when_producers_write_in_place() {
    peak_slots_within_budget(WriteMode::Direct);
}

fn peak_slots_within_budget(mode: WriteMode) {
    let path = tmp(&format!("budget-{}", mode.name()));
    let merger = Merger::builder()
        .budget(4 * (64 << 10))
        .slot_bytes(64 << 10)
        .sync(SyncPolicy::EveryCommit)
        .write_mode(mode)
        .listen(
            &addr("shm", &format!("budget-{}", mode.name())),
            sink(&path),
        )
        .unwrap();
    assert_eq!(merger.write_mode(), mode);
    let a = merger.addr().to_string();
    let (producers, blocks) = (24u32, 6u64);
    let handles: Vec<_> = (0..producers)
        .map(|id| {
            let a = a.clone();
            std::thread::spawn(move || {
                let mut p = connect_as(&a, id);
                for seq in 0..blocks {
                    p.write_block(&payload(id, seq, 60_000)).unwrap();
                }
                p.finish().unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let s = merger.close().unwrap();
    assert!(s.stats.peak_slots <= 4, "{:?}", s.stats);
    if mode == WriteMode::Copy {
        assert!(
            s.stats.moves > 0,
            "24 producers share 4 slots: windows must move"
        );
    }
    check_file(&path, producers, blocks, |_| 60_000);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn try_buffer_would_block_while_another_producer_holds_every_slot() {
    let path = tmp("backpressure");
    let merger = Merger::builder()
        .budget(2 * (64 << 10))
        .slot_bytes(64 << 10)
        .credit(2)
        .listen(&addr("shm", "bp"), sink(&path))
        .unwrap();
    let a = merger.addr().to_string();
    let mut hog = Producer::connect(&a).unwrap();
    let mut other = Producer::connect(&a).unwrap();
    // The hog takes one buffer and prefetches the second slot.
    let mut held = hog.buffer().unwrap();
    held.as_mut_slice()[..5].copy_from_slice(b"first");
    std::thread::sleep(Duration::from_millis(50));
    for _ in 0..20 {
        assert!(matches!(other.try_buffer().unwrap(), Progress::WouldBlock));
        std::thread::sleep(Duration::from_millis(5));
    }
    held.commit(5).unwrap();
    // The committed slot is written and moves to the waiting producer.
    let mut got = None;
    for _ in 0..400 {
        if let Progress::Ready(mut b) = other.try_buffer().unwrap() {
            b.as_mut_slice()[..6].copy_from_slice(b"second");
            got = Some(b.commit(6).unwrap());
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(got, Some(0));
    let (h, o) = (hog.id(), other.id());
    hog.finish().unwrap();
    other.finish().unwrap();
    let s = merger.close().unwrap();
    assert_eq!(s.stats.peak_slots, 2);
    let r = ContainerReader::open(&path).unwrap();
    let got: Vec<_> = r
        .blocks()
        .iter()
        .map(|b| (b.header.producer, r.read_payload(b).unwrap()))
        .collect();
    assert_eq!(got, vec![(h, b"first".to_vec()), (o, b"second".to_vec())]);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn records_are_packed_into_blocks_and_read_back_in_order() {
    let path = tmp("records");
    let merger = Merger::builder()
        .budget(1 << 20)
        .slot_bytes(64 << 10)
        .listen(&addr("tcp", "records"), sink(&path))
        .unwrap();
    let mut p = Producer::connect(&merger.addr().to_string()).unwrap();
    let records: Vec<Vec<u8>> = (0..5000u32)
        .map(|i| format!("record {i} {}", "x".repeat((i % 97) as usize)).into_bytes())
        .collect();
    for r in &records {
        p.write_record(r).unwrap();
    }
    let too_big = vec![0u8; 64 << 10];
    let e = p.write_record(&too_big).unwrap_err();
    assert!(
        e.to_string().contains("does not fit the 65536-byte buffer"),
        "{e}"
    );
    let s = p.finish().unwrap();
    assert!(s.blocks > 1, "5000 records need several 64 KiB blocks");
    merger.close().unwrap();
    let r = ContainerReader::open(&path).unwrap();
    let mut back = Vec::new();
    for b in r.blocks() {
        assert_eq!(b.header.kind, BlockKind::Records);
        let payload = r.read_payload(b).unwrap();
        back.extend(
            split_records(&payload)
                .unwrap()
                .into_iter()
                .map(<[u8]>::to_vec),
        );
    }
    assert_eq!(back, records);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

fn collect_events() -> (
    Arc<Mutex<Vec<Event>>>,
    impl Fn(&Event) + Send + Sync + 'static,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    (seen, move |e: &Event| s.lock().unwrap().push(e.clone()))
}

fn wait_for(mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("condition not reached in 5 s");
}

/// A raw tcp connection to `sock_addr` through accio's greeting, proved with this user's
/// key file (the secret a merger of this user holds): what a peer holding the secret
/// sends after it is up to the test.
fn authenticated_stream(sock_addr: &str) -> std::net::TcpStream {
    use accio_tcp::frame::{Hello, HELLO_LEN, VERDICT_LEN, VERDICT_OK};
    use std::io::{Read, Write};
    let path = accio_tcp::auth::default_key_file().expect("a per-user key file");
    let mut key = std::fs::read(&path).expect("the per-user key file");
    while key.last() == Some(&b'\n') {
        key.pop();
    }
    let mut s = std::net::TcpStream::connect(sock_addr).unwrap();
    let mut server = [0u8; HELLO_LEN];
    s.read_exact(&mut server).unwrap();
    let client = Hello {
        max_message: 1 << 20,
        recv_window: 1 << 20,
        nonce: [7; 32],
    }
    .encode();
    s.write_all(&client).unwrap();
    let proof = accio_tcp::auth::proof(&key, accio_tcp::auth::Role::Client, &server, &client);
    s.write_all(&proof).unwrap();
    let mut verdict = [0u8; VERDICT_LEN];
    s.read_exact(&mut verdict).unwrap();
    assert_eq!(
        verdict[..8],
        VERDICT_OK,
        "the merger refused this user's key"
    );
    s
}

#[test]
fn garbage_and_truncated_frames_on_the_tcp_port_drop_only_that_connection() {
    use std::io::Write;
    let path = tmp("garbage");
    let (seen, on_event) = collect_events();
    let merger = Merger::builder()
        .budget(1 << 20)
        .slot_bytes(64 << 10)
        .on_event(on_event)
        .listen("tcp://127.0.0.1:0", sink(&path))
        .unwrap();
    let a = merger.addr().to_string();
    let port = a.rsplit(':').next().unwrap().to_string();
    let sock_addr = format!("127.0.0.1:{port}");
    // A good producer is in the middle of its work the whole time.
    let mut good = Producer::connect(&a).unwrap();
    good.write_block(&payload(0, 0, 1000)).unwrap();

    // 1. Garbage instead of the accio greeting.
    let mut s1 = std::net::TcpStream::connect(&sock_addr).unwrap();
    s1.write_all(&[0xAB; 64]).unwrap();
    wait_for(|| merger.stats().dropped >= 1);

    // 2. A proper, authenticated greeting, then a frame header that is garbage.
    let mut s2 = authenticated_stream(&sock_addr);
    s2.write_all(&[0x5A; accio_tcp::frame::HEADER_LEN]).unwrap();
    wait_for(|| merger.stats().dropped >= 2);

    // 3. A greeting, then a message frame cut short, then hang-up.
    let mut s3 = authenticated_stream(&sock_addr);
    let h = accio_tcp::frame::Header::message(100).encode();
    s3.write_all(&h).unwrap();
    s3.write_all(&[1, 2, 3]).unwrap();
    drop(s3);
    wait_for(|| merger.stats().dropped >= 3);

    // 4. A well-formed accio connection speaking nonsense to the merger.
    let ep = accio::connect(&a, Duration::from_secs(5)).unwrap();
    ep.send(&[42, 1, 2, 3]).unwrap();
    wait_for(|| merger.stats().dropped >= 4);

    good.write_block(&payload(0, 1, 2000)).unwrap();
    good.finish().unwrap();
    let s = merger.close().unwrap();
    assert_eq!(
        (s.stats.dropped, s.stats.finished, s.sink.blocks),
        (4, 1, 2)
    );
    let reasons: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::Dropped { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    assert!(reasons[0].contains("handshake failed"), "{reasons:?}");
    assert!(
        reasons[1].contains("frame type 0x5a is unknown"),
        "{reasons:?}"
    );
    assert!(reasons[2].contains("middle of the payload"), "{reasons:?}");
    assert!(
        reasons[3].contains("unknown message type 42"),
        "{reasons:?}"
    );
    drop((s1, s2));
    drop(ep);
    assert!(ContainerReader::open(&path)
        .unwrap()
        .verify()
        .unwrap()
        .is_whole());
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn a_taken_producer_id_is_refused_with_a_reason() {
    let path = tmp("taken");
    let merger = Merger::builder()
        .budget(1 << 20)
        .slot_bytes(64 << 10)
        .on_event(|_| {})
        .listen(&addr("shm", "taken"), sink(&path))
        .unwrap();
    let a = merger.addr().to_string();
    let opts = accio_merge::ProducerOptions {
        id: Some(7),
        ..Default::default()
    };
    let first = Producer::connect_with(&a, opts).unwrap();
    let e = Producer::connect_with(&a, opts).unwrap_err();
    assert!(
        e.to_string().contains("producer id 7 is already taken"),
        "{e}"
    );
    first.finish().unwrap();
    merger.close().unwrap();
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn close_within_cuts_off_a_producer_that_never_finishes() {
    for backend in ["shm", "tcp"] {
        let path = tmp(&format!("close-within-{backend}"));
        let (seen, on_event) = collect_events();
        let merger = Merger::builder()
            .budget(4 * (64 << 10))
            .slot_bytes(64 << 10)
            .on_event(on_event)
            .listen(&addr(backend, "close-within"), sink(&path))
            .unwrap();
        let a = merger.addr().to_string();
        let mut done = Producer::connect(&a).unwrap();
        let mut stuck = Producer::connect(&a).unwrap();
        for seq in 0..2 {
            done.write_block(&payload(done.id(), seq, 1000)).unwrap();
        }
        done.finish().unwrap();
        stuck.write_block(&payload(stuck.id(), 0, 700)).unwrap();
        let stuck_id = stuck.id();
        // The stuck producer holds a buffer it never commits and never finishes.
        let mut held = stuck.buffer().unwrap();
        held.as_mut_slice()[..4].copy_from_slice(b"lost");
        wait_for(|| merger.stats().blocks >= 3);

        let t = std::time::Instant::now();
        let s = merger.close_within(Duration::from_millis(300)).unwrap();
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(300),
            "{backend}: closed early, {waited:?}"
        );
        assert!(waited < Duration::from_secs(5), "{backend}: {waited:?}");
        assert_eq!((s.stats.finished, s.stats.lost), (1, 1), "{backend}");
        assert!(
            seen.lock().unwrap().iter().any(
                |e| matches!(e, Event::Lost { producer, blocks: 1, .. } if *producer == stuck_id)
            ),
            "{backend}: {:?}",
            seen.lock().unwrap()
        );
        // Everything committed is in a whole file; the held buffer is not.
        let r = ContainerReader::open(&path).unwrap();
        assert!(r.verify().unwrap().is_whole(), "{backend}");
        let blocks: Vec<_> = r
            .blocks()
            .iter()
            .map(|b| {
                (
                    b.header.producer,
                    b.header.seq,
                    r.read_payload(b).unwrap().len(),
                )
            })
            .collect();
        assert_eq!(blocks.len(), 3, "{backend}: {blocks:?}");
        assert!(
            blocks.contains(&(stuck_id, 0, 700)),
            "{backend}: {blocks:?}"
        );
        // The cut-off producer learns it when it next waits for the merger (a commit may
        // still go out into the dead connection, as a socket write would).
        let _ = held.commit(4);
        let e = stuck.finish().unwrap_err();
        assert!(
            e.to_string()
                .contains("closed before this producer finished")
                || e.to_string().contains("gone"),
            "{backend}: {e}"
        );
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}

#[test]
fn a_dropped_producer_that_keeps_writing_its_old_slot_cannot_touch_later_blocks() {
    use accio_merge::wire::{Msg, ANY_PRODUCER, PROTOCOL};
    use std::sync::atomic::{AtomicBool, Ordering};

    let path = tmp("rogue");
    let slot = 64 << 10;
    // One slot in all: whoever writes after the rogue gets the slot the rogue had.
    let merger = Merger::builder()
        .budget(slot)
        .slot_bytes(slot)
        .write_mode(WriteMode::Copy)
        .on_event(|_| {})
        .listen(&addr("shm", "rogue"), sink(&path))
        .unwrap();
    let a = merger.addr().to_string();

    // The rogue: says hello, takes the slot, maps it, then breaks the protocol.
    let ep = accio::connect(&a, Duration::from_secs(5)).unwrap();
    let (mut tx, mut rx) = (Vec::new(), Vec::new());
    let mut say = |m: Msg| {
        tx.clear();
        m.encode(&mut tx);
        ep.send(&tx).unwrap();
    };
    say(Msg::Hello {
        version: PROTOCOL,
        producer: ANY_PRODUCER,
    });
    say(Msg::Acquire { bytes: 0 });
    let mut offset = None;
    while offset.is_none() {
        ep.recv(&mut rx).unwrap();
        if let Msg::Grant { offset: o, .. } = Msg::decode(&rx).unwrap() {
            offset = Some(o);
        }
    }
    let map = ep.map_remote(offset.unwrap(), slot).unwrap();
    say(Msg::Commit {
        slot: 999,
        seq: 0,
        len: 1,
        crc: Some(0),
        kind: 0,
    });
    wait_for(|| merger.stats().dropped == 1);

    // Still running, it scribbles over the memory it was lent, all the time.
    let stop = Arc::new(AtomicBool::new(false));
    let scribbler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                map.fill(0xEE).expect("fill a writable mapping");
            }
        })
    };
    let mut p = Producer::connect(&a).unwrap();
    let id = p.id();
    let blocks = 50u64;
    for seq in 0..blocks {
        let data = payload(id, seq, slot);
        let mut buf = p.buffer().unwrap();
        buf.as_mut_slice().copy_from_slice(&data);
        // Give a scribbler time to strike between the fill and the merger's write.
        std::thread::sleep(Duration::from_micros(200));
        buf.commit(data.len()).unwrap();
    }
    p.finish().unwrap();
    stop.store(true, Ordering::Relaxed);
    scribbler.join().unwrap();
    drop(ep);
    let s = merger.close().unwrap();
    assert_eq!((s.stats.finished, s.stats.dropped), (1, 1), "{:?}", s.stats);
    let r = ContainerReader::open(&path).unwrap();
    assert!(r.verify().unwrap().is_whole());
    assert_eq!(r.blocks().len() as u64, blocks);
    for b in r.blocks() {
        assert_eq!(
            r.read_payload(b).unwrap(),
            payload(id, b.header.seq, slot),
            "block {} was written over by the dropped producer",
            b.header.seq
        );
    }
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn a_follower_sees_every_acknowledged_block_during_the_run_in_place() {
    follower_sees_acknowledged_blocks(WriteMode::Direct);
}

#[test]
fn a_follower_sees_every_acknowledged_block_during_the_run_copying() {
    follower_sees_acknowledged_blocks(WriteMode::Copy);
}

fn follower_sees_acknowledged_blocks(mode: WriteMode) {
    use accio_merge::container::Follower;
    let path = tmp(&format!("follow-{}", mode.name()));
    let merger = Merger::builder()
        .budget(8 << 20)
        .slot_bytes(256 << 10)
        .write_mode(mode)
        .listen(
            &addr("shm", &format!("follow-{}", mode.name())),
            sink(&path),
        )
        .unwrap();
    let a = merger.addr().to_string();
    let mut follower = Follower::open(&path, Duration::from_secs(5)).unwrap();
    let (producers, rounds, per_round) = (3u32, 4u64, 5u64);
    let len_of = |seq: u64| [256 << 10, 1, 100_000, 7, 4096][(seq % 5) as usize];
    let mut ps: Vec<Producer> = (0..producers).map(|id| connect_as(&a, id)).collect();
    let mut seen = Vec::new();
    for round in 0..rounds {
        for (id, p) in ps.iter_mut().enumerate() {
            for seq in round * per_round..(round + 1) * per_round {
                p.write_block(&payload(id as u32, seq, len_of(seq)))
                    .unwrap();
            }
            p.wait_acked().unwrap();
        }
        // Everything acknowledged so far is visible now, mid-run, with its bytes.
        while let Some((b, data)) = follower.try_next().unwrap() {
            assert_eq!(
                data,
                payload(b.header.producer, b.header.seq, len_of(b.header.seq))
            );
            seen.push((b.header.producer, b.header.seq));
        }
        let acked = u64::from(producers) * (round + 1) * per_round;
        assert!(
            seen.len() as u64 >= acked,
            "round {round}: {} blocks seen, {acked} acknowledged",
            seen.len()
        );
        assert!(!follower.is_closed());
    }
    for p in ps {
        p.finish().unwrap();
    }
    merger.close().unwrap();
    while let Some((b, _)) = follower.next_within(Duration::from_secs(5)).unwrap() {
        seen.push((b.header.producer, b.header.seq));
    }
    assert!(follower.is_closed(), "the follower saw the close");
    assert_eq!(follower.pending(), 0);
    assert!(follower.damage().is_empty());
    let r = ContainerReader::open(&path).unwrap();
    let mut all: Vec<_> = r
        .blocks()
        .iter()
        .map(|b| (b.header.producer, b.header.seq))
        .collect();
    all.sort_unstable();
    seen.sort_unstable();
    assert_eq!(seen, all);
    assert_eq!(all.len() as u64, u64::from(producers) * rounds * per_round);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn the_writers_limit_never_stops_producers_that_one_thread_drives_in_turn() {
    // Four producers written by one thread, round robin, with room for two writers in
    // flight: each producer keeps a prefetched room it is not writing, so the third must
    // be granted past the limit (after its patience) or the thread would wait forever.
    let path = tmp("writers-limit");
    let merger = Merger::builder()
        .slot_bytes(64 << 10)
        .write_mode(WriteMode::Direct)
        .direct_writers(2)
        .listen(&addr("shm", "writers-limit"), sink(&path))
        .unwrap();
    let a = merger.addr().to_string();
    let mut producers: Vec<Producer> = (0..4u32).map(|id| connect_as(&a, id)).collect();
    for seq in 0..3u64 {
        for (id, p) in producers.iter_mut().enumerate() {
            p.write_block(&payload(id as u32, seq, 50_000)).unwrap();
        }
    }
    for p in producers {
        p.finish().unwrap();
    }
    let s = merger.close().unwrap();
    assert!(s.stats.peak_slots > 2, "{:?}", s.stats);
    check_file(&path, 4, 3, |_| 50_000);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn producers_writing_beside_each_other_on_tmpfs_insert_their_pages_and_alone_split_large_blocks() {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    let dir = shm.join(format!("accio-merge-insert-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("out.accio");
    let merger = Merger::builder()
        .budget(16 << 20)
        .slot_bytes(1 << 20)
        .listen(&addr("shm", "insert"), sink(&path))
        .unwrap();
    assert_eq!(merger.write_mode(), WriteMode::Direct);
    let a = merger.addr().to_string();
    // Whole pages, a partial last page, one byte, a full slot, and a block large enough
    // for a lone producer to split that ends in a partial page.
    const LENS: [usize; 5] = [8192, 100_000, 1, 1 << 20, 600_001];
    fn len_of(seq: u64) -> usize {
        LENS[(seq % 5) as usize]
    }
    const BLOCKS: u64 = 10;
    fn write_all(p: &mut Producer, id: u32) {
        for seq in 0..BLOCKS {
            assert_eq!(p.write_block(&payload(id, seq, len_of(seq))).unwrap(), seq);
        }
    }
    let blocks = BLOCKS;
    let uffd = userfaultfd_available();
    if !uffd {
        eprintln!("note: no userfaultfd here: checking that the producers pwrite instead");
    }
    // Alone: the blocks of 512 KiB and more are split between a pwrite and a helper
    // thread inserting pages (where there are two CPUs), the others pwritten.
    let mut alone = connect_as(&a, 0);
    write_all(&mut alone, 0);
    let s = alone.finish().unwrap();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let split = if uffd && cpus > 1 { 4 } else { 0 };
    assert_eq!((s.blocks, s.inserted_blocks), (blocks, split));
    // Three at once: every block inserted, once the merger has seen all three (it tells
    // them in the round that counts them, before it publishes the count), and as long as
    // none has finished (the last one left would write alone, its small blocks with pwrite).
    let producers: Vec<Producer> = (1..4u32).map(|id| connect_as(&a, id)).collect();
    wait_for(|| merger.stats().active == 3);
    let written = Arc::new(std::sync::Barrier::new(3));
    let handles: Vec<_> = producers
        .into_iter()
        .enumerate()
        .map(|(i, mut p)| {
            let written = written.clone();
            std::thread::spawn(move || {
                write_all(&mut p, i as u32 + 1);
                written.wait();
                p.finish().unwrap()
            })
        })
        .collect();
    for h in handles {
        let s = h.join().unwrap();
        assert_eq!(s.blocks, blocks);
        assert_eq!(s.inserted_blocks, if uffd { blocks } else { 0 }, "{s:?}");
    }
    merger.close().unwrap();
    check_file(&path, 4, blocks, len_of);
    std::fs::remove_dir_all(&dir).unwrap();
}
