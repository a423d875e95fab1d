//! Aggregation on every backend: several senders, several receivers, random message sizes
//! (empty ones and ones larger than a batch included) and a memory bound small enough to
//! force early sends. Every message must arrive exactly once, in per-sender order, with
//! its bytes; replayed and skipped batches must be refused.

mod common;

use std::time::Duration;

use accio::{Endpoint, Progress};
use accio_coalesce::{AggConfig, Aggregator, Deaggregator, Error};

use common::{message, pair, Rng, BACKENDS, WAIT};

const SENDERS: usize = 3;
const RECEIVERS: usize = 3;
const MESSAGES: usize = 2500;
/// Largest message: above the 256-byte batch, so some go alone.
const MAX_LEN: usize = 300;

fn exactly_once_in_order(backend: &str, checked: bool) {
    // links[s][d]: (sender end, receiver end).
    let mut sender_eps: Vec<Vec<Box<dyn Endpoint>>> = Vec::new();
    let mut receiver_eps: Vec<(usize, usize, Box<dyn Endpoint>)> = Vec::new();
    for s in 0..SENDERS {
        let mut mine = Vec::new();
        for d in 0..RECEIVERS {
            let (a, b) = pair(backend);
            mine.push(a);
            receiver_eps.push((s, d, b));
        }
        sender_eps.push(mine);
    }
    // Each sender's destinations, decided up front so receivers know what to expect.
    let schedules: Vec<Vec<usize>> = (0..SENDERS)
        .map(|s| {
            let mut r = Rng::new(77 + s as u64);
            (0..MESSAGES)
                .map(|_| r.below(RECEIVERS as u64) as usize)
                .collect()
        })
        .collect();
    let expected = |s: usize, d: usize| schedules[s].iter().filter(|&&x| x == d).count() as u64;

    std::thread::scope(|scope| {
        for (s, d, ep) in &receiver_eps {
            let (s, d) = (*s as u32, *d as u32);
            let want = expected(s as usize, d as usize);
            scope.spawn(move || {
                let mut de = Deaggregator::new(d).checked(checked);
                let mut buf = Vec::new();
                let mut next = 0u64;
                while next < want {
                    for m in de.recv(&**ep, &mut buf, Some(WAIT)).expect("recv batch") {
                        assert_eq!(m.sender, s, "{backend}: sender id");
                        assert_eq!(m.seq, next, "{backend}: {s}->{d} out of order");
                        assert_eq!(
                            m.data,
                            message(s, d, next, MAX_LEN).as_slice(),
                            "{backend}: {s}->{d} message {next} corrupted"
                        );
                        next += 1;
                    }
                }
                assert_eq!(next, want, "{backend}: {s}->{d} got more than was sent");
                assert_eq!(de.delivered(s), want);
                // Nothing more is on the way.
                std::thread::sleep(Duration::from_millis(20));
                assert_eq!(ep.try_recv(&mut buf).unwrap(), Progress::WouldBlock);
            });
        }
        for (s, eps) in sender_eps.iter().enumerate() {
            let schedule = &schedules[s];
            scope.spawn(move || {
                let dests: Vec<&dyn Endpoint> = eps.iter().map(|e| &**e).collect();
                // Room for 2 batches of 256 bytes for 3 destinations: slots are stolen.
                let cfg = AggConfig::new(s as u32)
                    .batch_bytes(256)
                    .memory_bytes(512)
                    .checked(checked);
                let mut agg = Aggregator::new(dests, cfg).unwrap();
                let mut counts = [0u64; RECEIVERS];
                let mut r = Rng::new(s as u64);
                for &d in schedule {
                    let m = message(s as u32, d as u32, counts[d], MAX_LEN);
                    agg.send(d, &m).unwrap();
                    counts[d] += 1;
                    assert!(agg.buffered_bytes() <= 512, "memory bound exceeded");
                    if r.one_in(500) {
                        agg.flush().unwrap();
                    }
                }
                agg.flush().unwrap();
                assert_eq!(agg.buffered_bytes(), 0);
                let st = agg.stats();
                assert_eq!(st.messages, MESSAGES as u64);
                assert!(st.oversize > 0, "some messages were larger than a batch");
                assert!(st.steals > 0, "the memory bound forced early sends");
                // Starved of memory (2 slots, 3 destinations) it still batches some.
                assert!(st.batches < st.messages, "messages were aggregated: {st:?}");
            });
        }
    });
}

#[test]
fn every_message_arrives_exactly_once_in_sender_order_on_shm() {
    exactly_once_in_order("shm", false);
    exactly_once_in_order("shm", true);
}

#[test]
fn every_message_arrives_exactly_once_in_sender_order_on_tcp() {
    exactly_once_in_order("tcp", false);
    exactly_once_in_order("tcp", true);
}

/// Batches as they travel, captured raw from the receiving endpoint.
fn captured_batches(backend: &str, checked: bool) -> Vec<Vec<u8>> {
    let (tx, rx) = pair(backend);
    let cfg = AggConfig::new(5).batch_bytes(128).checked(checked);
    let mut agg = Aggregator::new(vec![&*tx], cfg).unwrap();
    for k in 0..20u64 {
        agg.send(0, &[k as u8; 40]).unwrap();
    }
    agg.flush().unwrap();
    let n = agg.stats().batches;
    (0..n)
        .map(|_| {
            let mut b = Vec::new();
            rx.recv_timeout(&mut b, Some(WAIT)).unwrap();
            b
        })
        .collect()
}

#[test]
fn a_replayed_batch_is_a_duplicate_and_a_skipped_one_a_gap() {
    for backend in BACKENDS {
        let b = captured_batches(backend, false);
        assert!(b.len() >= 3, "{backend}: {} batches", b.len());
        let mut de = Deaggregator::new(0);
        let first: Vec<u64> = de.unpack(&b[0]).unwrap().map(|m| m.seq).collect();
        let after_first = de.delivered(5);
        assert_eq!(first, (0..after_first).collect::<Vec<_>>());
        match de.unpack(&b[0]) {
            Err(Error::Duplicate {
                sender: 5,
                seq: 0,
                expected,
            }) => assert_eq!(expected, after_first),
            other => panic!("{backend}: replay gave {other:?}"),
        }
        match de.unpack(&b[2]) {
            Err(e @ Error::Gap { sender: 5, .. }) => {
                let t = e.to_string();
                assert!(t.contains("sender 5") && t.contains("missing"), "{t}");
            }
            other => panic!("{backend}: skip gave {other:?}"),
        }
        // Refused batches changed nothing: the stream continues where it was.
        assert_eq!(de.delivered(5), after_first);
        for batch in &b[1..] {
            for m in de.unpack(batch).unwrap() {
                assert_eq!(m.data, &[m.seq as u8; 40]);
            }
        }
        assert_eq!(de.delivered(5), 20);
    }
}

#[test]
fn corrupt_batches_are_refused_whole_and_change_nothing() {
    let b = captured_batches("shm", true);
    let mut r = Rng::new(9);
    let mut de = Deaggregator::new(0).checked(true);
    for _ in 0..2000 {
        let mut bad = b[0].clone();
        match r.below(3) {
            0 => {
                let at = r.below(bad.len() as u64) as usize;
                bad[at] ^= 1 << r.below(8);
            }
            1 => bad.truncate(r.below(bad.len() as u64) as usize),
            _ => {
                let n = 1 + r.below(8) as usize;
                bad.extend(r.bytes(n))
            }
        }
        if bad == b[0] {
            continue;
        }
        match de.unpack(&bad) {
            // A flipped bit inside a message's bytes is not detectable without a checksum;
            // everything else must be refused.
            Ok(batch) => {
                assert!(batch.count() > 0);
                de = Deaggregator::new(0).checked(true);
            }
            Err(_) => assert_eq!(de.delivered(5), 0, "a refused batch delivered nothing"),
        }
    }
    // The intact stream still goes through.
    let mut de = Deaggregator::new(0).checked(true);
    let total: usize = b.iter().map(|x| de.unpack(x).unwrap().count()).sum();
    assert_eq!(total, 20);
}

#[test]
fn with_room_to_spare_a_thousand_small_messages_leave_as_one_batch() {
    for backend in BACKENDS {
        let (tx, rx) = pair(backend);
        let mut agg = Aggregator::new(vec![&*tx], AggConfig::new(1)).unwrap();
        for k in 0..1000u32 {
            agg.send(0, &k.to_le_bytes()).unwrap();
        }
        agg.flush().unwrap();
        let s = agg.stats();
        // 32-byte header + 1000 x (4-byte length + 4 bytes).
        assert_eq!((s.batches, s.wire_bytes), (1, 8032), "{backend}: {s:?}");
        let mut de = Deaggregator::new(0);
        let mut buf = Vec::new();
        let got: Vec<u32> = de
            .recv(&*rx, &mut buf, Some(WAIT))
            .unwrap()
            .map(|m| u32::from_le_bytes(m.data.try_into().unwrap()))
            .collect();
        assert_eq!(got, (0..1000).collect::<Vec<_>>(), "{backend}");
    }
}

#[test]
fn a_destination_the_aggregator_does_not_have_is_an_error() {
    let (tx, _rx) = pair("shm");
    let mut agg = Aggregator::new(vec![&*tx], AggConfig::new(0)).unwrap();
    let e = agg.send(1, b"x").unwrap_err().to_string();
    assert!(e.contains('1') && e.contains("1 endpoints"), "{e}");
    assert_eq!(agg.stats().messages, 0);
}
