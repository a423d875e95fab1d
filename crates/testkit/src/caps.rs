//! Advertised capabilities are honest: what a backend claims works, what it does not claim
//! reports `Unsupported`.

use std::sync::mpsc;
use std::time::Duration;

use accio::{Access, ErrorKind, RmaFlags, PAGE};

use crate::harness::{
    assert_window, expect_err, expect_text, fill_window, guarded, ok, share_window, sync_point,
    window_bytes, Isolation,
};
use crate::pattern;
use crate::rma::fence;
use crate::Backend;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Both ends name the backend and advertise the same capabilities; a backend without
/// `map_remote` says `Unsupported` (naming itself) instead.
pub fn capabilities_are_honest(b: &Backend) {
    let b = b.clone();
    guarded(
        "capabilities_are_honest",
        secs(20),
        Isolation::Shared,
        move || {
            let (x, y) = b.pair();
            assert_eq!(x.backend(), b.name(), "accepted endpoint's backend()");
            assert_eq!(y.backend(), b.name(), "connected endpoint's backend()");
            let caps = x.capabilities();
            eprintln!("{} capabilities: {caps:?}", b.name());
            assert_eq!(
                caps,
                y.capabilities(),
                "the two ends advertise different capabilities"
            );
            assert!(
                caps.max_try_send > 0,
                "max_try_send is 0: try_send could send nothing"
            );
            if !caps.map_remote {
                let w = ok(y.register(PAGE, Access::READ_WRITE), "register");
                let r = share_window(&*y, &*x, &w);
                let e = expect_err(
                    x.map_remote(r, PAGE),
                    ErrorKind::Unsupported,
                    "map_remote on a backend without map_remote",
                );
                expect_text(&e, &[b.name()], "Unsupported");
            }
        },
    );
}

/// `map_remote` (where advertised): stores through the mapping reach the owner's window and
/// the owner's stores are visible through it; ranges outside a window are `OutOfWindow`;
/// the mapping outlives an `unregister`.
pub fn map_remote(b: &Backend) {
    let b = b.clone();
    guarded("map_remote", secs(20), Isolation::Shared, move || {
        let (x, y) = b.pair();
        let (x, y) = (&*x, &*y);
        let w = ok(y.register(3 * PAGE, Access::READ_WRITE), "register");
        fill_window(&w, 1);
        let r = share_window(y, x, &w);
        if !x.capabilities().map_remote {
            expect_err(x.map_remote(r, PAGE), ErrorKind::Unsupported, "map_remote");
            return;
        }
        let m = ok(x.map_remote(r + 100, 2 * PAGE), "map_remote");
        assert_eq!(m.remote_offset(), r + 100, "RemoteMap::remote_offset");
        assert_eq!(m.len(), 2 * PAGE, "RemoteMap length");
        let mut seen = vec![0u8; 2 * PAGE];
        ok(m.read_at(0, &mut seen), "read through the mapping");
        pattern::assert_matches(&seen, 1, 100, "owner's bytes seen through the mapping");

        // Mapping -> owner.
        ok(
            m.write_at(10, &pattern::vec(1000, 2, 0)),
            "store through the mapping",
        );
        assert_window(
            &w,
            1,
            Some((110, 1000, 2, 0)),
            "owner's window after stores through the mapping",
        );
        ok(
            m.store_u64(4 + 2 * 8, 0xfeed_f00d),
            "store_u64 through the mapping",
        );
        assert_eq!(ok(w.load_u64(120), "owner load_u64"), 0xfeed_f00d);

        // Owner -> mapping.
        ok(w.write_at(PAGE, &pattern::vec(300, 3, 0)), "owner store");
        let mut got = vec![0u8; 300];
        ok(m.read_at(PAGE - 100, &mut got), "read through the mapping");
        pattern::assert_matches(&got, 3, 0, "owner's store seen through the mapping");
        ok(w.store_u64(2 * PAGE, 42), "owner store_u64");
        ok(
            m.wait_u64(2 * PAGE - 100, 42, Some(secs(5))),
            "wait_u64 through the mapping",
        );

        // Out of window.
        let oow = ErrorKind::OutOfWindow;
        let end = r + 3 * PAGE as u64;
        let e = expect_err(
            x.map_remote(end - 8, 16),
            oow,
            "map_remote past the window's end",
        );
        expect_text(
            &e,
            &[&format!("{:#x}", end - 8), &format!("{r:#x}..{end:#x}")],
            "map_remote",
        );
        expect_err(x.map_remote(0x10, 8), oow, "map_remote below every window");
        expect_err(
            x.map_remote(end + 64 * PAGE as u64, 8),
            oow,
            "map_remote above every window",
        );

        // Withdrawn window: no new mapping, but the old one stays valid memory.
        ok(y.unregister(w.offset()), "unregister");
        sync_point(y, x);
        expect_err(
            x.map_remote(r, 8),
            oow,
            "map_remote of an unregistered window",
        );
        ok(
            m.read_at(0, &mut seen),
            "read through a mapping of an unregistered window",
        );
        ok(
            m.write_at(0, &[1, 2, 3]),
            "store through a mapping of an unregistered window",
        );
        assert_eq!(window_bytes(&w, 100, 3), [1, 2, 3]);
    });
}

/// `cpu_free_rma` (where advertised): a sync `write_to`, `read_from` and a fence complete
/// while the peer's only thread is parked on a channel doing nothing.
pub fn cpu_free_rma_needs_no_peer_cpu(b: &Backend) {
    let b = b.clone();
    guarded(
        "cpu_free_rma_needs_no_peer_cpu",
        secs(20),
        Isolation::Shared,
        move || {
            let (x, y) = b.pair();
            if !x.capabilities().cpu_free_rma {
                return;
            }
            const LEN: usize = 4 << 20;
            let w = ok(y.register(LEN, Access::READ_WRITE), "register");
            let r = share_window(&*y, &*x, &w);
            let lw = ok(x.register(LEN, Access::READ_WRITE), "register");
            let (park_tx, park_rx) = mpsc::channel::<()>();
            let (parked_tx, parked_rx) = mpsc::channel::<()>();
            // The peer endpoint lives on a thread that does nothing but wait.
            let peer = std::thread::spawn(move || {
                parked_tx.send(()).unwrap();
                let _ = park_rx.recv();
                y
            });
            parked_rx.recv().unwrap();
            fill_window(&lw, 5);
            ok(
                x.write_to(lw.offset(), LEN, r, RmaFlags::SYNC),
                "write_to SYNC with the peer parked",
            );
            assert_window(
                &w,
                5,
                None,
                "peer window after write_to SYNC with the peer parked",
            );
            ok(w.write_at(0, &pattern::vec(LEN, 6, 0)), "owner store");
            ok(
                x.read_from(lw.offset(), LEN, r, RmaFlags::SYNC),
                "read_from with the peer parked",
            );
            assert_window(&lw, 6, None, "read_from with the peer parked");
            ok(
                x.vwrite_to(&pattern::vec(LEN, 7, 0), r, RmaFlags::ASYNC),
                "vwrite_to ASYNC",
            );
            fence(x.as_ref());
            assert_window(&w, 7, None, "vwrite_to + fence with the peer parked");
            park_tx.send(()).unwrap();
            let y = peer.join().unwrap();
            drop(y);
        },
    );
}
