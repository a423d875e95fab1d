//! Dropping endpoints leaves no thread and no descriptor behind. Alone in its test binary,
//! so that no other test's threads or sockets disturb the counts.

mod common;

use accio_core::{Access, Endpoint, RmaFlags};

use common::*;

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[test]
fn dropped_endpoints_leave_no_threads_or_descriptors() {
    // Warm up whatever the runtime creates once.
    drop(pair());
    let (threads, fds) = (count("/proc/self/task"), count("/proc/self/fd"));
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
    assert_eq!(count("/proc/self/task"), threads, "threads leaked");
    assert_eq!(count("/proc/self/fd"), fds, "descriptors leaked");
}
