//! Registration: where windows go, what they hold, and what `unregister` accepts.

use std::time::Duration;

use accio::{Access, ErrorKind, RmaFlags, PAGE};

use crate::harness::{
    assert_window, fill_window, guarded, ok, share_window, sync_point, window_bytes, Isolation,
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
            old.fill(0xFF);
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
