//! The per-thread RMA window cache never lets a call through that the tables would refuse:
//! withdrawn local and peer windows, a missing right, and windows of a dropped endpoint.

use std::time::Duration;

use accio_core::{Access, Addr, Endpoint, ErrorKind, RmaFlags};
use accio_shm::{ShmEndpoint, ShmListener};

fn pair(tag: &str) -> (ShmEndpoint, ShmEndpoint) {
    let addr: Addr = format!("shm://rma-cache-{tag}-{}", std::process::id())
        .parse()
        .unwrap();
    let l = ShmListener::bind(&addr).unwrap();
    let a = addr.clone();
    let t = std::thread::spawn(move || ShmEndpoint::connect(&a, Duration::from_secs(5)).unwrap());
    let x = l.accept_shm(Some(Duration::from_secs(5))).unwrap();
    (x, t.join().unwrap())
}

#[test]
fn withdrawn_windows_are_refused_after_cached_hits() {
    let (x, y) = pair("withdrawn");
    let target = y.register(4096, Access::READ_WRITE).unwrap();
    let ro = y.register(4096, Access::READ).unwrap();
    let local = x.register(4096, Access::NONE).unwrap();
    local.write_at(0, &[5u8; 64]).unwrap();
    for _ in 0..3 {
        x.write_to(local.offset(), 64, target.offset(), RmaFlags::ASYNC)
            .unwrap();
    }
    let mut got = [0u8; 64];
    target.read_at(0, &mut got).unwrap();
    assert_eq!(got, [5u8; 64]);

    // A cached window lacks the right for another access.
    let e = x.vwrite_to(&[1u8; 8], ro.offset(), RmaFlags::ASYNC);
    assert_eq!(e.unwrap_err().kind(), ErrorKind::AccessDenied);
    x.vread_from(&mut got[..8], ro.offset(), RmaFlags::ASYNC)
        .unwrap();

    // Our own window withdrawn after it was cached.
    x.unregister(local.offset()).unwrap();
    let e = x.write_to(local.offset(), 64, target.offset(), RmaFlags::ASYNC);
    assert_eq!(e.unwrap_err().kind(), ErrorKind::OutOfWindow);

    // The peer's window withdrawn after it was cached.
    x.vwrite_to(&[6u8; 8], target.offset(), RmaFlags::ASYNC)
        .unwrap();
    y.unregister(target.offset()).unwrap();
    let e = x.vwrite_to(&[7u8; 8], target.offset(), RmaFlags::ASYNC);
    assert_eq!(e.unwrap_err().kind(), ErrorKind::OutOfWindow);
    let mut first = [0u8; 8];
    target.read_at(0, &mut first).unwrap();
    assert_eq!(first, [6u8; 8], "the refused write left the window alone");
}

#[test]
fn a_new_endpoint_never_hits_a_dropped_ones_cache() {
    // Window offsets repeat across endpoints; the cache is keyed by endpoint.
    let (x, y) = pair("dropped-a");
    let w = y.register(4096, Access::READ_WRITE).unwrap();
    x.vwrite_to(&[1u8; 8], w.offset(), RmaFlags::ASYNC).unwrap();
    let off = w.offset();
    drop((x, y));
    let (x2, y2) = pair("dropped-b");
    let w2 = y2.register(8192, Access::READ_WRITE).unwrap();
    assert_eq!(w2.offset(), off, "the same first offset on a new endpoint");
    x2.vwrite_to(&[2u8; 8], off + 4096, RmaFlags::ASYNC)
        .unwrap();
    let mut got = [0u8; 8];
    w2.read_at(4096, &mut got).unwrap();
    assert_eq!(got, [2u8; 8]);
    let mut old = [0u8; 8];
    w.read_at(0, &mut old).unwrap();
    assert_eq!(
        old, [1u8; 8],
        "the dropped endpoint's window was not written"
    );
}
