//! Dropping endpoints leaves no thread and no descriptor behind. Alone in its test binary,
//! so that no other test's threads or sockets disturb the counts.

mod common;

use accio_core::{Access, Endpoint, RmaFlags};

use common::*;

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// Threads and descriptors of this process. A joined thread can stay listed for a moment
/// after `join` returns (the kernel finishes its exit after waking the joiner), so this
/// waits up to 5 s for the counts to reach `at_most`, or with `None` to hold still.
fn settled_counts(at_most: Option<(usize, usize)>) -> (usize, usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut last = (usize::MAX, usize::MAX);
    loop {
        let now = (count("/proc/self/task"), count("/proc/self/fd"));
        let done = match at_most {
            Some((t, f)) => now.0 <= t && now.1 <= f,
            None => now == last,
        };
        if done || std::time::Instant::now() >= deadline {
            return now;
        }
        last = now;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn dropped_endpoints_leave_no_threads_or_descriptors() {
    // Warm up whatever the runtime creates once.
    drop(pair());
    let (threads, fds) = settled_counts(None);
    for i in 0..20u64 {
        let (a, c) = pair();
        let w = a.register(4096, Access::READ_WRITE).unwrap();
        send_u64(&a, w.offset());
        let off = recv_u64(&c);
        c.vwrite_to(&i.to_le_bytes(), off, RmaFlags::SYNC).unwrap();
        assert_eq!(w.load_u64(0).unwrap(), i);
        if i % 2 == 0 {
            drop(a);
            drop(c);
        } else {
            drop(c);
            drop(a);
        }
    }
    let (threads_after, fds_after) = settled_counts(Some((threads, fds)));
    assert!(
        threads_after <= threads,
        "threads leaked: {threads} before, {threads_after} after"
    );
    assert!(
        fds_after <= fds,
        "descriptors leaked: {fds} before, {fds_after} after"
    );
}
