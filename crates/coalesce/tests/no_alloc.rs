//! The hot paths allocate nothing: `CommCache::insert` (hits, and misses that find a free
//! way) and `Aggregator::send` into a buffer with room. Checked with a counting global
//! allocator armed only on the measuring thread and only around those calls.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use accio::Access;
use accio_coalesce::{AggConfig, Aggregator, Applier, CacheConfig, CommCache, RemoteWindow};

use common::{pair, WAIT};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ARMED.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is forwarded.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if ARMED.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread while `f` runs.
fn allocations_in(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

#[test]
fn inserts_that_send_nothing_allocate_nothing() {
    let (tx, rx) = pair("shm");
    let receiver = std::thread::spawn(move || {
        let win = rx.register(2 << 20, Access::WRITE).unwrap();
        let mut a = Applier::new(&*rx, win);
        a.announce().unwrap();
        while a.next_flush(Some(WAIT)).unwrap().is_some() {}
    });
    let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
    let mut cache = CommCache::new(&*tx, remote, CacheConfig::new()).unwrap();
    let line = [7u8; 64];
    // 2 MiB = the default cache's capacity: every block finds a free way, nothing is sent.
    let n = allocations_in(|| {
        for pass in 0..3u64 {
            for i in 0..(2u64 << 20) / 64 {
                let off = (i * 4099 + pass) % ((2 << 20) / 64) * 64;
                cache.insert(off, &line).unwrap();
            }
        }
    });
    assert_eq!(cache.stats().transfers, 0, "nothing was sent");
    assert_eq!(n, 0, "{n} allocations in 98304 inserts");
    cache.close().unwrap();
    receiver.join().unwrap();
}

#[test]
fn sends_into_a_buffer_with_room_allocate_nothing() {
    let (tx, _rx) = pair("shm");
    let mut agg = Aggregator::new(vec![&*tx, &*tx], AggConfig::new(0)).unwrap();
    let n = allocations_in(|| {
        for k in 0..1000u32 {
            agg.send((k % 2) as usize, &k.to_le_bytes()).unwrap();
        }
    });
    assert_eq!(agg.stats().batches, 0, "everything is still buffered");
    assert_eq!(n, 0, "{n} allocations in 1000 sends");
}
