//! Registration: where windows go, what they hold, and what `unregister` accepts.

use std::sync::Arc;
use std::time::Duration;

use accio::{Access, ErrorKind, MemView, Region, RmaFlags, PAGE};

use crate::harness::{
    assert_window, expect_err, expect_text, fill_window, guarded, ok, share_window, sync_point,
    window_bytes, Isolation,
};
use crate::Backend;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn round_up(len: usize) -> u64 {
    (len.max(1)).div_ceil(PAGE) as u64 * PAGE as u64
}

/// Windows are page aligned, never at offset 0, of exactly the requested length, zeroed,
/// with the requested rights, and separated by at least one unmapped guard page; new
/// windows never reuse an unregistered window's range and are zeroed again.
pub fn registration_layout(b: &Backend) {
    let b = b.clone();
    guarded(
        "registration_layout",
        secs(20),
        Isolation::Shared,
        move || {
            let (x, _y) = b.pair();
            let lens = [
                1usize,
                PAGE,
                PAGE + 1,
                3 * PAGE + 5,
                1 << 20,
                64 * 1024 - 1,
                12_345,
            ];
            let rights = [Access::READ, Access::WRITE, Access::READ_WRITE];
            let mut windows = Vec::new();
            for (i, &len) in lens.iter().enumerate() {
                let access = rights[i % 3];
                let w = ok(
                    x.register(len, access),
                    &format!("register({len}, {access})"),
                );
                let what = format!("window {i} ({len} bytes, {access}) at {:#x}", w.offset());
                assert_ne!(w.offset(), 0, "{what}: offset 0 is never valid");
                assert_eq!(w.offset() % PAGE as u64, 0, "{what}: not page aligned");
                assert_eq!(w.len(), len, "{what}: length");
                assert_eq!(w.access(), access, "{what}: access");
                assert_eq!(
                    (w.desc().offset, w.desc().len, w.desc().access),
                    (w.offset(), len as u64, access),
                    "{what}: desc()"
                );
                let bytes = window_bytes(&w, 0, len);
                if let Some(p) = bytes.iter().position(|&b| b != 0) {
                    panic!(
                        "{what}: byte {p:#x} of fresh memory is {:#04x}, not 0",
                        bytes[p]
                    );
                }
                windows.push(w);
            }
            let mut sorted: Vec<_> = windows.iter().collect();
            sorted.sort_by_key(|w| w.offset());
            for pair in sorted.windows(2) {
                let (lo, hi) = (pair[0], pair[1]);
                let guarded_end = lo.offset() + round_up(lo.len()) + PAGE as u64;
                assert!(
                    hi.offset() >= guarded_end,
                    "window {:#x}+{} is followed by {:#x}: no guard page (the next window may \
                 start at {guarded_end:#x} at the earliest)",
                    lo.offset(),
                    lo.len(),
                    hi.offset()
                );
            }

            // Unregister, register again: a fresh range, zeroed again.
            let old = ok(x.register(2 * PAGE, Access::READ_WRITE), "register");
            old.fill(0xFF).expect("fill a local window");
            ok(x.unregister(old.offset()), "unregister");
            let new = ok(x.register(2 * PAGE, Access::READ_WRITE), "register again");
            let old_end = old.offset() + round_up(old.len());
            assert!(
                new.offset() >= old_end || new.offset() + round_up(new.len()) <= old.offset(),
                "window {:#x} reuses the range of unregistered window {:#x}..{old_end:#x}",
                new.offset(),
                old.offset()
            );
            let bytes = window_bytes(&new, 0, new.len());
            assert!(
                bytes.iter().all(|&b| b == 0),
                "a window registered after unregistering a filled one is not zeroed"
            );
        },
    );
}

/// `unregister` of an offset that starts no window (unknown, inside a window, already
/// unregistered) fails with text naming the offset and changes nothing; an unregistered
/// window's memory stays valid for its handles.
pub fn unregister_rules(b: &Backend) {
    let b = b.clone();
    guarded("unregister_rules", secs(20), Isolation::Shared, move || {
        let (x, y) = b.pair();
        let (x, y) = (&*x, &*y);
        let w = ok(x.register(2 * PAGE, Access::READ_WRITE), "register");
        let r = share_window(x, y, &w);
        let bad = [0x1234_5000u64, w.offset() + PAGE as u64, w.offset() + 8, 0];
        for off in bad {
            match x.unregister(off) {
                Ok(()) => panic!("unregister({off:#x}) of no window's start succeeded"),
                Err(e) => {
                    let hex = format!("{off:#x}");
                    assert!(
                        e.to_string().contains(&hex),
                        "unregister({hex}) failed ({:?}) but the text does not name {hex}: {e}",
                        e.kind()
                    );
                }
            }
        }
        // The window survived the bad calls: the peer can still write it.
        let yl = ok(y.register(2 * PAGE, Access::READ_WRITE), "register");
        fill_window(&yl, 9);
        ok(
            y.write_to(yl.offset(), 2 * PAGE, r, RmaFlags::SYNC),
            "peer write_to",
        );
        assert_window(&w, 9, None, "window after rejected unregister calls");

        ok(x.unregister(w.offset()), "unregister");
        let e = x
            .unregister(w.offset())
            .expect_err("a second unregister of the same window");
        assert!(e.to_string().contains(&format!("{:#x}", w.offset())), "{e}");
        sync_point(x, y);
        let err = y
            .write_to(yl.offset(), 8, r, RmaFlags::SYNC)
            .expect_err("write_to after unregister");
        assert_eq!(err.kind(), ErrorKind::OutOfWindow, "{err}");
        // The handle keeps the memory.
        ok(w.write_at(5, b"still mapped"), "write_at after unregister");
        assert_eq!(window_bytes(&w, 5, 12), b"still mapped");
    });
}

/// `register_view` exposes the caller's memory itself, not a copy: a peer's writes land in
/// the view's bytes, and the same pages, withdrawn from one endpoint and registered on
/// another, keep their contents (nothing is zeroed). Views that do not start on a page
/// boundary, or are empty, are refused; private memory is either accepted (and works) or
/// refused with a reason naming `Region::shareable`.
pub fn registered_views(b: &Backend) {
    let b = b.clone();
    guarded("registered_views", secs(20), Isolation::Shared, move || {
        let pool = Arc::new(ok(
            Region::shareable(3 * PAGE, "accio-test-pool", true),
            "Region::shareable",
        ));
        let page = |i: usize| MemView::sub(pool.clone(), i * PAGE, PAGE).expect("in the pool");
        let pool_bytes = |i: usize| {
            let mut v = vec![0u8; PAGE];
            ok(page(i).read_at(0, &mut v), "read_at on the pool");
            v
        };

        // First lent to one peer, which writes it.
        let (x1, y1) = b.pair();
        let (x1, y1) = (&*x1, &*y1);
        let w1 = ok(
            x1.register_view(&page(1), Access::READ_WRITE),
            "register_view",
        );
        assert_eq!(w1.len(), PAGE, "window length is the view's");
        let r1 = share_window(x1, y1, &w1);
        let src = ok(y1.register(PAGE, Access::READ_WRITE), "register");
        fill_window(&src, 21);
        ok(
            y1.write_to(src.offset(), PAGE, r1, RmaFlags::SYNC),
            "peer write_to",
        );
        assert_eq!(
            pool_bytes(1),
            window_bytes(&src, 0, PAGE),
            "the peer's write_to did not land in the registered view's memory"
        );
        assert!(
            pool_bytes(0).iter().chain(&pool_bytes(2)).all(|&b| b == 0),
            "a write to the window touched pool pages outside the view"
        );
        ok(x1.unregister(w1.offset()), "unregister");

        // Then lent to another peer: same bytes, no zeroing, and its writes land too.
        let (x2, y2) = b.pair();
        let (x2, y2) = (&*x2, &*y2);
        let w2 = ok(
            x2.register_view(&page(1), Access::READ_WRITE),
            "register_view again",
        );
        let r2 = share_window(x2, y2, &w2);
        let mut seen = vec![0u8; PAGE];
        ok(
            y2.vread_from(&mut seen, r2, RmaFlags::SYNC),
            "peer vread_from",
        );
        assert_eq!(
            seen,
            pool_bytes(1),
            "the second peer does not see the pool's bytes"
        );
        let dst = ok(y2.register(PAGE, Access::READ_WRITE), "register");
        fill_window(&dst, 22);
        ok(
            y2.write_to(dst.offset(), PAGE, r2, RmaFlags::SYNC),
            "peer write_to",
        );
        assert_window(&w2, 22, None, "window after the second peer's write");
        assert_eq!(
            pool_bytes(1),
            window_bytes(&w2, 0, PAGE),
            "window and pool disagree"
        );

        // Refusals.
        let skewed = MemView::sub(pool.clone(), 8, PAGE).expect("in the pool");
        let e = expect_err(
            x2.register_view(&skewed, Access::READ),
            ErrorKind::InvalidArgument,
            "register_view of a view off a page boundary",
        );
        expect_text(&e, &["page boundary"], "register_view off a page boundary");
        let empty = MemView::sub(pool.clone(), PAGE, 0).expect("in the pool");
        expect_err(
            x2.register_view(&empty, Access::READ),
            ErrorKind::InvalidArgument,
            "register_view of an empty view",
        );
        let private = MemView::whole(Arc::new(ok(Region::anonymous(PAGE), "anonymous")));
        match x2.register_view(&private, Access::READ_WRITE) {
            Ok(w) => {
                let r = share_window(x2, y2, &w);
                ok(
                    y2.write_to(dst.offset(), PAGE, r, RmaFlags::SYNC),
                    "write_to private",
                );
                assert_window(&w, 22, None, "private memory registered as a view");
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
                expect_text(
                    &e,
                    &["Region::shareable"],
                    "register_view of private memory",
                );
            }
        }
    });
}
