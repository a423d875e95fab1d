//! Messages: order, integrity and boundaries; the non-blocking statuses and limits; a peer
//! that closes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use accio::{Endpoint, ErrorKind, Progress};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::harness::{expect_err, expect_text, guarded, ok, Isolation};
use crate::pattern::{check_message, message};
use crate::Backend;

const MIB: usize = 1 << 20;
/// The largest message of the integrity test.
pub const MAX_MESSAGE: usize = 16 * MIB;

/// How long a peer may take to notice that the other side is gone (the contract's bound).
pub const PEER_GONE_WITHIN: Duration = Duration::from_secs(1);

/// `count` message sizes from 0 to `max`: mostly small, some multi-MiB, always including
/// 0, 1, 7, 8, 9, page-sized ones and exactly `max`, in a seeded random order.
pub fn message_sizes(seed: u64, count: usize, max: usize) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut sizes = vec![0, 1, 7, 8, 9, 4095, 4096, 4097, 65_536, max];
    let mut big = 0;
    while sizes.len() < count {
        let roll: f64 = rng.gen();
        let len = if roll < 0.55 {
            rng.gen_range(0..=256)
        } else if roll < 0.85 {
            rng.gen_range(257..=64 * 1024)
        } else if roll < 0.97 || big >= 6 {
            rng.gen_range(64 * 1024..=MIB.min(max))
        } else {
            big += 1;
            rng.gen_range(MIB.min(max)..=max)
        };
        sizes.push(len.min(max));
    }
    // A seeded Fisher-Yates shuffle keeps the fixed sizes at random places.
    for i in (1..sizes.len()).rev() {
        let j = rng.gen_range(0..=i);
        sizes.swap(i, j);
    }
    sizes
}

/// Sends message `i` of stream `seed` with length `sizes[i]`, for every `i`.
pub fn send_stream(ep: &dyn Endpoint, seed: u64, sizes: &[usize]) {
    for (i, &len) in sizes.iter().enumerate() {
        let msg = message(seed, i as u64, len);
        ok(ep.send(&msg), &format!("send message #{i} of {len} bytes"));
    }
}

/// Receives and checks every message [`send_stream`] sends, in order.
pub fn recv_stream(ep: &dyn Endpoint, seed: u64, sizes: &[usize]) {
    let mut buf = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let n = ok(ep.recv(&mut buf), &format!("recv message #{i}"));
        assert_eq!(
            n,
            buf.len(),
            "recv returned {n} but filled {} bytes",
            buf.len()
        );
        if let Err(e) = check_message(&buf, seed, i as u64, len) {
            panic!("{}: {e}", ep.local_addr());
        }
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `recv_into` lands messages in the caller's buffer: one that fits exactly, a shorter
/// one, an empty one, and one longer than the buffer, which fails with `MessageTooLarge`
/// naming both lengths and is consumed whole (the next message arrives intact); a
/// message larger than the ring's chunks (2 MiB) too.
pub fn recv_into_lands_in_the_callers_buffer(b: &Backend) {
    let b = b.clone();
    guarded(
        "recv_into_lands_in_the_callers_buffer",
        Duration::from_secs(30),
        Isolation::Shared,
        move || {
            let (x, y) = b.pair();
            let sizes = [4096usize, 1000, 0, 5000, 4096, 2 << 20];
            let sender = std::thread::spawn(move || {
                for (seq, &len) in sizes.iter().enumerate() {
                    ok(y.send(&message(11, seq as u64, len)), "send");
                }
                y
            });
            let mut dst = vec![0xAAu8; 4096];
            for (seq, &len) in sizes.iter().enumerate().take(5) {
                let r = x.recv_into(&mut dst, Some(Duration::from_secs(20)));
                if len > dst.len() {
                    let e = expect_err(r, ErrorKind::MessageTooLarge, "recv_into, too long");
                    expect_text(&e, &["5000", "4096"], "recv_into error");
                    continue;
                }
                let n = ok(r, "recv_into");
                assert_eq!(n, len, "message {seq}");
                check_message(&dst[..n], 11, seq as u64, len)
                    .unwrap_or_else(|e| panic!("recv_into, message {seq}: {e}"));
            }
            let mut big = vec![0u8; 4 << 20];
            let n = ok(x.recv_into(&mut big, None), "recv_into 2 MiB");
            check_message(&big[..n], 11, 5, 2 << 20)
                .unwrap_or_else(|e| panic!("recv_into, 2 MiB: {e}"));
            drop(sender.join().unwrap());
        },
    );
}

/// A few hundred messages of 0 B..16 MiB each way at once, every one checked for length,
/// content and place in the order.
pub fn message_order_and_integrity(b: &Backend) {
    let b = b.clone();
    guarded(
        "message_order_and_integrity",
        secs(60),
        Isolation::Shared,
        move || {
            let (x, y) = b.pair();
            let (x, y) = (&*x, &*y);
            let xy = message_sizes(0x5859, 300, MAX_MESSAGE);
            let yx = message_sizes(0x5958, 300, MAX_MESSAGE);
            std::thread::scope(|s| {
                s.spawn(|| send_stream(x, 1, &xy));
                s.spawn(|| send_stream(y, 2, &yx));
                s.spawn(|| recv_stream(y, 1, &xy));
                recv_stream(x, 2, &yx);
            });
            // Nothing beyond the streams arrived.
            let mut buf = Vec::new();
            assert_eq!(
                ok(x.try_recv(&mut buf), "try_recv after streams"),
                Progress::WouldBlock
            );
            assert_eq!(
                ok(y.try_recv(&mut buf), "try_recv after streams"),
                Progress::WouldBlock
            );
        },
    );
}

/// Polls `try_recv` until a message is there (at most 5 s).
fn try_recv_until_ready(ep: &dyn Endpoint, buf: &mut Vec<u8>) -> usize {
    let start = Instant::now();
    loop {
        match ok(ep.try_recv(buf), "try_recv") {
            Progress::Ready(n) => return n,
            Progress::WouldBlock if start.elapsed() < secs(5) => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Progress::WouldBlock => panic!("try_recv: a sent message did not arrive within 5 s"),
        }
    }
}

/// `try_recv`, `try_send` and `recv_timeout`: would-block is a status that consumes and
/// enqueues nothing; the `try_send` limit is enforced; a timeout consumes nothing.
pub fn nonblocking_calls(b: &Backend) {
    let b = b.clone();
    guarded(
        "nonblocking_calls",
        secs(60),
        Isolation::Shared,
        move || {
            let (a, c) = b.pair();
            let (a, c) = (&*a, &*c);
            let mut buf = vec![0xEE; 16];

            // Idle receives: a status, not an error; then a timeout that consumed nothing.
            assert_eq!(
                ok(a.try_recv(&mut buf), "idle try_recv"),
                Progress::WouldBlock
            );
            assert_eq!(
                ok(c.try_recv(&mut buf), "idle try_recv"),
                Progress::WouldBlock
            );
            let asked = Duration::from_millis(200);
            let t = Instant::now();
            let e = expect_err(
                a.recv_timeout(&mut buf, Some(asked)),
                ErrorKind::Timeout,
                "recv_timeout on an idle endpoint",
            );
            let waited = t.elapsed();
            assert!(
                waited >= asked * 9 / 10 && waited < asked + secs(1),
                "recv_timeout({asked:?}) returned {e} after {waited:?}"
            );
            ok(c.send(&message(9, 0, 100)), "send after the peer's timeout");
            let n = ok(
                a.recv_timeout(&mut buf, Some(secs(5))),
                "recv after a timeout",
            );
            check_message(&buf[..n], 9, 0, 100).unwrap();

            // try_recv when a message is there, including an empty one.
            ok(c.send(&message(9, 1, 3000)), "send");
            let n = try_recv_until_ready(a, &mut buf);
            check_message(&buf[..n], 9, 1, 3000).unwrap();
            loop {
                match ok(c.try_send(&[]), "try_send of an empty message") {
                    Progress::Ready(()) => break,
                    Progress::WouldBlock => std::thread::sleep(Duration::from_millis(1)),
                }
            }
            buf.push(1);
            assert_eq!(try_recv_until_ready(a, &mut buf), 0, "empty message");
            assert!(buf.is_empty(), "buffer not cleared for an empty message");

            // The try_send limit.
            let max = a.capabilities().max_try_send;
            assert!(max > 0, "max_try_send is 0");
            if max < (1 << 31) {
                // calloc'ed: the pages of this buffer are never touched.
                let too_big = vec![0u8; max + 1];
                let e = expect_err(
                    a.try_send(&too_big),
                    ErrorKind::MessageTooLarge,
                    "try_send of max_try_send + 1 bytes",
                );
                expect_text(
                    &e,
                    &[&(max + 1).to_string(), &max.to_string()],
                    "MessageTooLarge",
                );
            }
            if max <= 64 * MIB {
                // Exactly the limit is accepted on an idle connection (after a moment at most).
                let m = message(9, 2, max);
                let start = Instant::now();
                while ok(a.try_send(&m), "try_send of exactly max_try_send bytes")
                    != Progress::Ready(())
                {
                    assert!(
                        start.elapsed() < secs(5),
                        "try_send of {max} bytes (= max_try_send) on an idle connection still \
                     would block after 5 s"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                let n = ok(
                    c.recv_timeout(&mut buf, Some(secs(5))),
                    "recv max_try_send message",
                );
                check_message(&buf[..n], 9, 2, max).unwrap();
            }

            // Fill the connection while the peer does not read: would-block must come before
            // 1 GiB is queued, and a would-block send must have enqueued nothing.
            let len = max.min(64 * 1024);
            let mut sent = 0u64;
            let mut queued = 0usize;
            loop {
                let m = message(10, sent, len);
                match ok(
                    a.try_send(&m),
                    &format!("try_send #{sent} while the peer does not read"),
                ) {
                    Progress::Ready(()) => {
                        sent += 1;
                        queued += len;
                        assert!(
                            queued < 1 << 30,
                            "try_send never returned WouldBlock: {sent} messages ({queued} bytes) \
                         queued while the peer did not read"
                        );
                    }
                    Progress::WouldBlock => break,
                }
            }
            eprintln!("try_send: WouldBlock after {sent} messages of {len} bytes ({queued} bytes)");
            let done = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    // The message after the would-block one: the peer must see it right after
                    // the `sent` accepted ones.
                    ok(a.send(&message(10, sent, 77)), "send after would-block");
                    done.store(true, Ordering::Release);
                });
                for i in 0..sent {
                    let n = ok(c.recv_timeout(&mut buf, Some(secs(10))), "drain");
                    if let Err(e) = check_message(&buf[..n], 10, i, len) {
                        panic!("draining {sent} messages queued by try_send: {e}");
                    }
                }
                let n = ok(c.recv_timeout(&mut buf, Some(secs(10))), "recv after drain");
                if let Err(e) = check_message(&buf[..n], 10, sent, 77) {
                    panic!("message after the would-block try_send: {e} (did the would-block send enqueue?)");
                }
            });
            assert!(done.load(Ordering::Acquire));
            assert_eq!(
                ok(c.try_recv(&mut buf), "try_recv after drain"),
                Progress::WouldBlock
            );
            assert_eq!(
                ok(a.try_recv(&mut buf), "try_recv after drain"),
                Progress::WouldBlock
            );
        },
    );
}

/// Dropping one end makes the other's blocked `recv` fail with `PeerGone` within 1 s, and
/// every later call fail the same way.
pub fn peer_close_is_peer_gone(b: &Backend) {
    let b = b.clone();
    guarded(
        "peer_close_is_peer_gone",
        secs(20),
        // Alone: it times the contract's 1 s, which busy siblings on two cores could eat.
        Isolation::Exclusive,
        move || {
            let (a, c) = b.pair();
            let a = &*a;
            let mut c = Some(c);
            let (err, gone_after) = std::thread::scope(|s| {
                let waiter = s.spawn(|| {
                    let mut buf = Vec::new();
                    let r = a.recv(&mut buf);
                    (r, Instant::now())
                });
                std::thread::sleep(Duration::from_millis(100));
                let dropped_at = Instant::now();
                drop(c.take());
                let (r, at) = waiter.join().unwrap();
                (r, at.saturating_duration_since(dropped_at))
            });
            let e = expect_err(
                err,
                ErrorKind::PeerGone,
                "recv blocked while the peer closes",
            );
            eprintln!("recv failed {gone_after:?} after the peer closed: {e}");
            assert!(
                gone_after <= PEER_GONE_WITHIN,
                "recv failed {gone_after:?} after the peer closed ({e}); the contract says 1 s"
            );
            let mut buf = Vec::new();
            expect_err(a.recv(&mut buf), ErrorKind::PeerGone, "recv after PeerGone");
            expect_err(
                a.try_recv(&mut buf),
                ErrorKind::PeerGone,
                "try_recv after PeerGone",
            );
            expect_err(a.send(b"x"), ErrorKind::PeerGone, "send after PeerGone");
            expect_err(
                a.try_send(b"x"),
                ErrorKind::PeerGone,
                "try_send after PeerGone",
            );
        },
    );
}

/// What a peer sent before it closed is delivered, in order, before `PeerGone`: both
/// messages queued long before the close and one sent at the moment of closing, to a
/// receiver already waiting in `recv` or polling with `try_recv`.
pub fn messages_sent_before_a_close_arrive(b: &Backend) {
    let b = b.clone();
    guarded(
        "messages_sent_before_a_close_arrive",
        secs(60),
        Isolation::Shared,
        move || {
            let (a, c) = b.pair();
            // Sent from a thread: a backend's queue may hold less than all of it.
            let sizes = [0, 8, 4096, 100_000, 4 * MIB, 1];
            let sender = std::thread::spawn(move || {
                send_stream(&*c, 3, &sizes);
                drop(c);
            });
            std::thread::sleep(Duration::from_millis(50));
            recv_stream(&*a, 3, &sizes);
            sender.join().unwrap();
            let mut buf = Vec::new();
            expect_err(a.recv(&mut buf), ErrorKind::PeerGone, "recv after the last");

            // The last word and the close land while the receiver is waiting: a receiver
            // that looks for the close between its looks for data must look once more.
            for round in 0..40u64 {
                let (a, c) = b.pair();
                let got = std::thread::scope(|s| {
                    let receiver = s.spawn(|| {
                        let mut buf = Vec::new();
                        if round % 2 == 0 {
                            a.recv(&mut buf).map(|_| buf)
                        } else {
                            loop {
                                match a.try_recv(&mut buf) {
                                    Ok(Progress::Ready(_)) => break Ok(buf),
                                    Ok(Progress::WouldBlock) => std::hint::spin_loop(),
                                    Err(e) => break Err(e),
                                }
                            }
                        }
                    });
                    std::thread::sleep(Duration::from_micros(200 * (round % 5)));
                    ok(c.send(&message(4, round, 64)), "the last send");
                    drop(c);
                    receiver.join().unwrap()
                });
                let how = if round % 2 == 0 { "recv" } else { "try_recv" };
                let got = ok(got, &format!("{how} of a message sent just before a close"));
                if let Err(e) = check_message(&got, 4, round, 64) {
                    panic!("round {round}: {e}");
                }
                let mut buf = Vec::new();
                expect_err(a.recv(&mut buf), ErrorKind::PeerGone, "recv after the last");
            }
        },
    );
}

/// A message of exactly 1 GiB (the least limit the contract allows a backend) arrives
/// whole and intact. Runs alone: it needs 2 GiB of memory at once.
pub fn one_gib_message(b: &Backend) {
    let b = b.clone();
    guarded(
        "one_gib_message",
        secs(60),
        Isolation::Exclusive,
        move || {
            const GIB: usize = 1 << 30;
            let (x, y) = b.pair();
            let (x, y) = (&*x, &*y);
            std::thread::scope(|s| {
                s.spawn(|| {
                    let msg = message(0x61b, 0, GIB);
                    ok(x.send(&msg), "send of a 1 GiB message");
                });
                let mut buf = Vec::new();
                let n = ok(y.recv(&mut buf), "recv of a 1 GiB message");
                assert_eq!(n, GIB, "length of the 1 GiB message");
                if let Err(e) = check_message(&buf, 0x61b, 0, GIB) {
                    panic!("1 GiB message: {e}");
                }
            });
        },
    );
}

const SENDERS: u64 = 4;
const PER_SENDER: u64 = 80;

/// Message `seq` of sender thread `t`: `[t, seq]` then bytes 16.. of stream `(t, seq)`.
fn tagged(t: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut v = crate::pattern::vec(len, crate::pattern::word(0x7000 + t, seq), 0);
    v[..8].copy_from_slice(&t.to_le_bytes());
    v[8..16].copy_from_slice(&seq.to_le_bytes());
    v
}

/// Checks a [`tagged`] message against the expected sizes; returns `(t, seq)`.
fn check_tagged(buf: &[u8], sizes: &[Vec<usize>]) -> (u64, u64) {
    assert!(
        buf.len() >= 16,
        "a {}-byte message: torn or interleaved",
        buf.len()
    );
    let t = u64::from_le_bytes(buf[..8].try_into().unwrap());
    let seq = u64::from_le_bytes(buf[8..16].try_into().unwrap());
    assert!(
        t < SENDERS && seq < PER_SENDER,
        "message tagged ({t}, {seq}): torn or interleaved"
    );
    let len = sizes[t as usize][seq as usize];
    assert_eq!(buf.len(), len, "message {seq} of sender {t}: length");
    if let Err(m) = crate::pattern::check(&buf[16..], crate::pattern::word(0x7000 + t, seq), 16) {
        panic!("message {seq} of sender {t}: {m} (interleaved with another message?)");
    }
    (t, seq)
}

/// Several threads sending on one endpoint while several threads receive on the other:
/// every message arrives whole (never interleaved), exactly once, and each receiver sees
/// each sender's messages in the order they were sent.
pub fn concurrent_senders_and_receivers(b: &Backend) {
    let b = b.clone();
    guarded(
        "concurrent_senders_and_receivers",
        secs(60),
        Isolation::Shared,
        move || {
            let (x, y) = b.pair();
            let (x, y) = (&*x, &*y);
            let sizes: Vec<Vec<usize>> = (0..SENDERS)
                .map(|t| {
                    message_sizes(0x5e4d + t, PER_SENDER as usize, 2 * MIB)
                        .into_iter()
                        .map(|n| n.max(16))
                        .collect()
                })
                .collect();
            let sizes = &sizes;
            const RECEIVERS: usize = 3;
            let total = (SENDERS * PER_SENDER) as usize;
            let got =
                std::sync::Mutex::new(vec![vec![0u32; PER_SENDER as usize]; SENDERS as usize]);
            let taken = std::sync::atomic::AtomicUsize::new(0);
            std::thread::scope(|s| {
                for t in 0..SENDERS {
                    s.spawn(move || {
                        for seq in 0..PER_SENDER {
                            let m = tagged(t, seq, sizes[t as usize][seq as usize]);
                            ok(x.send(&m), &format!("sender {t}: send {seq}"));
                        }
                    });
                }
                for _ in 0..RECEIVERS {
                    s.spawn(|| {
                        let mut last = [None::<u64>; SENDERS as usize];
                        let mut buf = Vec::new();
                        // Claim a message before receiving it, so exactly `total` receives
                        // happen in all and none blocks forever.
                        while taken.fetch_add(1, Ordering::AcqRel) < total {
                            ok(y.recv_timeout(&mut buf, Some(secs(30))), "recv");
                            let (t, seq) = check_tagged(&buf, sizes);
                            if let Some(prev) = last[t as usize] {
                                assert!(
                                    seq > prev,
                                    "a receiver got message {seq} of sender {t} after {prev}"
                                );
                            }
                            last[t as usize] = Some(seq);
                            got.lock().unwrap()[t as usize][seq as usize] += 1;
                        }
                    });
                }
            });
            for (t, counts) in got.into_inner().unwrap().iter().enumerate() {
                for (seq, &c) in counts.iter().enumerate() {
                    assert_eq!(c, 1, "message {seq} of sender {t} arrived {c} times");
                }
            }
        },
    );
}
