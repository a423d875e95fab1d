//! Loom models of the ring's handoff, its sleep/wake protocol and the last look after a
//! peer's close, run by `ci/loom.sh` (`RUSTFLAGS="--cfg loom" cargo test -p accio-shm
//! --lib --release loom`).
//!
//! Each model drives the real [`Producer`], [`Consumer`], [`sleep_once`] and [`Link`]
//! code on a small ring; [`crate::sync`] swaps in loom's atomics, a loom futex, a loom
//! cell per line of ring data and a loom atomic per line for the record stamps (the
//! consumer polls the stamp at its `tail`, not the producer's `head`; model (1) wraps, so
//! a stale stamp of the earlier lap is read and refused). Loom then runs every interleaving (up to its preemption
//! bound) under the C11 memory model: a read of ring bytes that does not happen after
//! their write fails as a causality violation, a lost wake-up as a deadlock, and a stale
//! read that loses or garbles a message fails the models' assertions. (Checked: with the
//! producer's stamp store Relaxed instead of Release, all three models fail.)

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::Arc;
use std::time::Duration;

use loom::thread;

use crate::link::{Geometry, Gone, Link};
use crate::ring::{record_bytes, sleep_once, Consumer, Producer, RingMem};

/// Page-aligned zeroed memory standing in for a shared mapping.
struct Mem {
    ptr: *mut u8,
    layout: Layout,
}

// SAFETY: the memory is only reached through the ring and link, whose shared words are
// atomics and whose data is handed over by them (which is what the models check).
unsafe impl Send for Mem {}
// SAFETY: as above.
unsafe impl Sync for Mem {}

impl Mem {
    fn new(len: usize) -> Mem {
        let layout = Layout::from_size_align(len, 4096).expect("layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocation of {len} bytes failed");
        Mem { ptr, layout }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout. The loom objects placed in it need
        // no drop: they are handles into the execution, which loom frees itself.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// A ring of `cap` data bytes, its model objects placed.
fn ring(cap: usize) -> (Arc<Mem>, RingMem) {
    let mem = Arc::new(Mem::new(RingMem::footprint(cap)));
    // SAFETY: `mem` has the ring's footprint, page aligned, and outlives the ring: every
    // model joins its threads before dropping its `Arc`.
    let r = unsafe {
        RingMem::place(mem.ptr, cap);
        RingMem::new(mem.ptr, cap)
    };
    (mem, r)
}

/// Message `i` of length `len`: byte `k` is `k ^ 31 * i`, so a stale or foreign byte shows.
fn message(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (k ^ (31 * i)) as u8).collect()
}

/// Receives one single-record message from `c` if one is there and checks it is message
/// `i` of `len` bytes.
fn take(c: &mut Consumer, i: usize, len: usize) -> bool {
    let rec = match c.peek() {
        Ok(Some(rec)) => rec,
        Ok(None) => return false,
        Err(e) => panic!("message {i}: corrupt record {e:?}"),
    };
    assert!(rec.first && !rec.more, "message {i}: flags of {rec:?}");
    assert_eq!(rec.len, len, "message {i}: length");
    assert_eq!(rec.total as usize, len, "message {i}: total length");
    let mut got = vec![0u8; rec.len];
    // SAFETY: `got` has `rec.len` bytes; `rec` is the record just peeked.
    unsafe { c.copy_out(&rec, got.as_mut_ptr()) };
    assert_eq!(got, message(i, len), "message {i}: payload");
    c.pop(&rec);
    true
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// (1) Handoff: messages of 8, 60, 60 and 8 bytes (records of 1, 2, 2 and 1 lines) through
/// a ring of 4 lines arrive in order and intact. The third does not fit before the end of
/// the ring, so the producer writes a PAD record and wraps; the producer waits for room by
/// retrying, the consumer for data by polling.
#[test]
fn loom_handoff_in_order_across_the_wrap() {
    const LENS: [usize; 4] = [8, 60, 60, 8];
    const CAP: usize = 256;
    assert!(record_bytes(60) == 128 && record_bytes(8) == 64);
    model(|| {
        let (mem, r) = ring(CAP);
        let producer = thread::spawn(move || {
            let mut p = Producer::new(r, 64);
            for (i, &len) in LENS.iter().enumerate() {
                let msg = message(i, len);
                while !p.try_push(&msg, true, false, len as u64) {
                    thread::yield_now();
                }
            }
        });
        let mut c = Consumer::new(r, 64);
        for (i, &len) in LENS.iter().enumerate() {
            while !take(&mut c, i, len) {
                thread::yield_now();
            }
        }
        producer.join().unwrap();
        assert!(!c.ready(), "nothing after the last message");
        drop(mem);
    });
}

/// (2) Sleep and wake: both sides block on the futex (a ring of two lines, three
/// messages, so the producer also waits for room) through the real [`sleep_once`]; the
/// model futex never times out, so a lost wake-up is a deadlock, which loom reports.
#[test]
fn loom_sleep_and_wake_lose_no_wakeup() {
    const N: usize = 3;
    const CAP: usize = 128;
    // Never reached under loom: its futex has no timeout.
    const TICK: Duration = Duration::from_millis(50);
    model(|| {
        let (mem, r) = ring(CAP);
        let producer = thread::spawn(move || {
            let mut p = Producer::new(r, 48);
            for i in 0..N {
                let msg = message(i, 8);
                while !p.try_push(&msg, true, false, 8) {
                    sleep_once(r.producer_wait(), || p.fits(8), TICK, true);
                }
            }
        });
        let mut c = Consumer::new(r, 48);
        for i in 0..N {
            while !take(&mut c, i, 8) {
                sleep_once(r.consumer_wait(), || c.ready(), TICK, false);
            }
        }
        producer.join().unwrap();
        drop(mem);
    });
}

/// (3) Close: the peer sends its last message and marks itself closed. On the receiving
/// side, another thread (a `send` that checks the peer) may see the closed word and set
/// the endpoint's [`Gone`] flag; the receiver, finding its ring empty and the peer gone
/// (the flag set, or the closed word seen itself), takes [`Link::last_look`], as
/// `ShmEndpoint::recv_locked` and `ShmEndpoint::wait` do, and must find the message there,
/// intact.
#[test]
fn loom_last_message_before_close_is_not_lost() {
    let geo = Geometry {
        ring_cap: 128,
        max_chunk: 48,
    };
    model(move || {
        let mem = Arc::new(Mem::new(geo.segment_bytes()));
        // SAFETY: `mem` has the segment's size, page aligned, and outlives the link (the
        // threads are joined first).
        let link = unsafe { Link::place(mem.ptr, geo) };
        let gone = Arc::new(Gone::new());

        let peer = thread::spawn(move || {
            let mut p = Producer::new(link.ring(0), geo.max_chunk);
            assert!(p.try_push(&message(0, 8), true, false, 8));
            link.mark_closed(0);
        });
        let checker = {
            let gone = gone.clone();
            thread::spawn(move || {
                if link.is_closed(0) {
                    gone.set();
                }
            })
        };
        let mut c = Consumer::new(link.ring(0), geo.max_chunk);
        if !take(&mut c, 0, 8) && (gone.get() || link.is_closed(0)) {
            assert!(
                link.last_look(0, || c.ready()),
                "the peer's last message was lost: the ring looked empty after the peer \
                 was found gone"
            );
            assert!(take(&mut c, 0, 8));
        }
        peer.join().unwrap();
        checker.join().unwrap();
        drop(mem);
    });
}
