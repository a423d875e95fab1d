//! One-sided RMA: content at odd offsets and lengths, sync and async, 64 MiB in one call,
//! and the ordering that fences and `fence_signal` promise.

use std::sync::mpsc;
use std::time::Duration;

use accio::{Access, Endpoint, ErrorKind, Mark, RmaFlags, Window, PAGE};

use crate::harness::{
    assert_window, expect_err, expect_text, fill_window, guarded, ok, recv_u64s, send_u64s,
    share_window, window_bytes, Isolation,
};
use crate::pattern;
use crate::Backend;

const MIB: usize = 1 << 20;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Waits until every RMA `ep` issued so far has completed.
#[track_caller]
pub fn fence(ep: &dyn Endpoint) {
    let m = ok(ep.fence_mark(), "fence_mark");
    ok(ep.fence_wait(m), "fence_wait");
}

fn flags_name(f: RmaFlags) -> &'static str {
    if f.sync {
        "SYNC"
    } else {
        "ASYNC"
    }
}

/// Runs every RMA call of `init` against `target`'s window `tw` (at peer offset `roff`),
/// with `lw` as `init`'s local window, for each `(local, len, remote)` case, checking the
/// transferred range and that nothing around it changed.
fn rma_cases(
    init: &dyn Endpoint,
    lw: &Window,
    tw: &Window,
    roff: u64,
    cases: &[(usize, usize, usize)],
    salt: u64,
) {
    for flags in [RmaFlags::SYNC, RmaFlags::ASYNC] {
        for (i, &(lo, len, ro)) in cases.iter().enumerate() {
            let seed = salt * 1000 + i as u64 * 10 + u64::from(flags.sync);
            let what = |op: &str| {
                format!(
                    "{op}(local +{lo:#x}, {len}, remote +{ro:#x}, {})",
                    flags_name(flags)
                )
            };

            // write_to: the target range takes local bytes lo.., the rest stays.
            fill_window(lw, seed + 1);
            fill_window(tw, seed + 2);
            let w = what("write_to");
            ok(
                init.write_to(lw.offset() + lo as u64, len, roff + ro as u64, flags),
                &w,
            );
            if !flags.sync {
                fence(init);
            }
            assert_window(tw, seed + 2, Some((ro, len, seed + 1, lo as u64)), &w);
            assert_window(lw, seed + 1, None, &format!("{w}: source"));

            // read_from: complete on return, whatever the flags.
            fill_window(lw, seed + 3);
            fill_window(tw, seed + 4);
            let w = what("read_from");
            ok(
                init.read_from(lw.offset() + lo as u64, len, roff + ro as u64, flags),
                &w,
            );
            assert_window(lw, seed + 3, Some((lo, len, seed + 4, ro as u64)), &w);
            assert_window(tw, seed + 4, None, &format!("{w}: source"));

            // vwrite_to from a plain slice.
            fill_window(tw, seed + 5);
            let src = pattern::vec(len, seed + 6, 0);
            let w = what("vwrite_to");
            ok(init.vwrite_to(&src, roff + ro as u64, flags), &w);
            if !flags.sync {
                fence(init);
            }
            assert_window(tw, seed + 5, Some((ro, len, seed + 6, 0)), &w);

            // vread_from into a plain slice with sentinels around it.
            fill_window(tw, seed + 7);
            let mut dst = vec![0xA5u8; len + 2];
            let w = what("vread_from");
            ok(
                init.vread_from(&mut dst[1..len + 1], roff + ro as u64, flags),
                &w,
            );
            pattern::assert_matches(&dst[1..len + 1], seed + 7, ro as u64, &w);
            assert_eq!(
                (dst[0], dst[len + 1]),
                (0xA5, 0xA5),
                "{w} wrote outside dst"
            );
            assert_window(tw, seed + 7, None, &format!("{w}: source"));
        }
    }
}

/// `write_to`/`read_from`/`vwrite_to`/`vread_from` at unaligned offsets and lengths (1 byte,
/// odd sizes, the full window), sync and async, in both directions; and async sources that
/// are reused right after the call returns.
pub fn rma_content(b: &Backend) {
    let b = b.clone();
    guarded("rma_content", secs(60), Isolation::Shared, move || {
        let (x, y) = b.pair();
        let (x, y) = (&*x, &*y);
        const LEN: usize = 3 * PAGE + 100;
        let wx = ok(x.register(LEN, Access::READ_WRITE), "register");
        let wy = ok(y.register(LEN, Access::READ_WRITE), "register");
        let ry = share_window(y, x, &wy);
        let rx = share_window(x, y, &wx);
        let cases = [
            (0, 1, 0),
            (0, 1, LEN - 1),
            (LEN - 1, 1, 0),
            (3, 17, 5),
            (1, PAGE + 1, PAGE - 3),
            (5, PAGE, 7),
            (2049, 2, PAGE - 1),
            (0, LEN, 0),
            (11, LEN - 11, 0),
            (0, LEN - 13, 13),
            (PAGE + 8, 2 * PAGE, 8),
        ];
        rma_cases(x, &wx, &wy, ry, &cases, 1);
        rma_cases(y, &wy, &wx, rx, &cases, 2);

        // An async write may return once its source was consumed: overwriting the source
        // right after the call must not change what lands.
        fill_window(&wy, 30);
        let half = LEN / 2;
        let mut reused = pattern::vec(half, 31, 0);
        ok(x.vwrite_to(&reused, ry, RmaFlags::ASYNC), "vwrite_to ASYNC");
        pattern::fill(&mut reused, 32, 0);
        fill_window(&wx, 33);
        ok(
            x.write_to(
                wx.offset() + half as u64,
                LEN - half,
                ry + half as u64,
                RmaFlags::ASYNC,
            ),
            "write_to ASYNC",
        );
        fill_window(&wx, 34);
        fence(x);
        assert_window(
            &wy,
            33,
            Some((0, half, 31, 0)),
            "async writes whose sources were overwritten after the call",
        );
    });
}

/// 64 MiB (and a bit) in one `write_to`, `read_from`, `vwrite_to` and `vread_from` call.
pub fn big_rma(b: &Backend) {
    let b = b.clone();
    guarded("big_rma", secs(60), Isolation::Shared, move || {
        let (x, y) = b.pair();
        let (x, y) = (&*x, &*y);
        const BIG: usize = 64 * MIB + 12_345;
        let wx = ok(x.register(BIG, Access::READ_WRITE), "register 64 MiB");
        let wy = ok(y.register(BIG, Access::READ_WRITE), "register 64 MiB");
        let ry = share_window(y, x, &wy);

        fill_window(&wx, 1);
        ok(
            x.write_to(wx.offset(), BIG, ry, RmaFlags::SYNC),
            "write_to 64 MiB SYNC",
        );
        assert_window(&wy, 1, None, "write_to 64 MiB SYNC");

        fill_window(&wy, 2);
        ok(
            x.read_from(wx.offset(), BIG, ry, RmaFlags::SYNC),
            "read_from 64 MiB",
        );
        assert_window(&wx, 2, None, "read_from 64 MiB");

        let src = pattern::vec(BIG, 3, 0);
        ok(
            x.vwrite_to(&src, ry, RmaFlags::ASYNC),
            "vwrite_to 64 MiB ASYNC",
        );
        fence(x);
        assert_window(&wy, 3, None, "vwrite_to 64 MiB ASYNC + fence");
        drop(src);

        fill_window(&wy, 4);
        let mut dst = vec![0u8; BIG];
        ok(
            x.vread_from(&mut dst, ry, RmaFlags::SYNC),
            "vread_from 64 MiB",
        );
        pattern::assert_matches(&dst, 4, 0, "vread_from 64 MiB");
    });
}

/// Issues `chunks` async writes that together copy all of `src` (same offsets) into the
/// peer window at `roff`, alternating `write_to` and `vwrite_to`.
fn scattered_writes(ep: &dyn Endpoint, src: &Window, roff: u64, chunks: usize) {
    let len = src.len();
    let step = len.div_ceil(chunks);
    // Back to front, so that a backend that completes writes in issue order still has the
    // low chunks pending when the last is issued.
    let mut starts: Vec<usize> = (0..len).step_by(step).collect();
    starts.reverse();
    for (k, at) in starts.into_iter().enumerate() {
        let n = step.min(len - at);
        if k % 2 == 0 {
            ok(
                ep.write_to(
                    src.offset() + at as u64,
                    n,
                    roff + at as u64,
                    RmaFlags::ASYNC,
                ),
                "async write_to",
            );
        } else {
            let bytes = window_bytes(src, at, n);
            ok(
                ep.vwrite_to(&bytes, roff + at as u64, RmaFlags::ASYNC),
                "async vwrite_to",
            );
        }
    }
}

/// `fence_mark`/`fence_wait`: a mark covers every RMA returned before it (on any thread);
/// an old mark is still waitable; `fence_signal` stores are covered by later marks.
pub fn fence_ordering(b: &Backend) {
    let b = b.clone();
    guarded("fence_ordering", secs(60), Isolation::Shared, move || {
        let (x, y) = b.pair();
        let (x, y) = (&*x, &*y);
        let data = ok(y.register(MIB, Access::READ_WRITE), "register");
        let sig = ok(y.register(PAGE, Access::READ_WRITE), "register");
        let rd = share_window(y, x, &data);
        let rs = share_window(y, x, &sig);
        let src = ok(x.register(MIB, Access::READ), "register");

        for round in 1..=4u64 {
            fill_window(&src, 100 + round);
            scattered_writes(x, &src, rd, 64);
            fence(x);
            assert_window(
                &data,
                100 + round,
                None,
                &format!("round {round}: after fence"),
            );
        }

        // Two marks: the first covers the first batch whatever the second batch does.
        let half = MIB / 2;
        let a_src = ok(x.register(half, Access::READ), "register");
        let b_src = ok(x.register(half, Access::READ), "register");
        fill_window(&a_src, 200);
        fill_window(&b_src, 201);
        scattered_writes(x, &a_src, rd, 16);
        let m1 = ok(x.fence_mark(), "fence_mark 1");
        scattered_writes(x, &b_src, rd + half as u64, 16);
        let m2 = ok(x.fence_mark(), "fence_mark 2");
        ok(x.fence_wait(m1), "fence_wait 1");
        let got = window_bytes(&data, 0, half);
        pattern::assert_matches(&got, 200, 0, "first batch after fence_wait(first mark)");
        ok(x.fence_wait(m2), "fence_wait 2");
        let got = window_bytes(&data, half, half);
        pattern::assert_matches(&got, 201, 0, "second batch after fence_wait(second mark)");
        ok(x.fence_wait(m1), "fence_wait on an old mark again");

        // Writes issued on another thread before the mark are covered by it.
        fill_window(&src, 300);
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                scattered_writes(x, &src, rd, 32);
                tx.send(()).unwrap();
            });
            rx.recv_timeout(secs(20)).expect("writer thread finished");
            fence(x);
        });
        assert_window(
            &data,
            300,
            None,
            "writes of another thread after a later mark",
        );

        // fence_signal's stores are covered by a later mark.
        for v in [1u64, u64::MAX, 0x0123_4567_89ab_cdef] {
            ok(x.fence_signal(None, Some((rs + 8, v))), "fence_signal");
            fence(x);
            assert_eq!(
                ok(sig.load_u64(8), "load_u64"),
                v,
                "remote word after fence_signal + fence_mark/fence_wait"
            );
        }
    });
}

/// `fence_wait` of a mark the endpoint never issued (12345 right after connect, one past
/// the latest mark, `u64::MAX`) fails with `InvalidArgument` naming the mark and the latest
/// one, at once; the marks it did issue, the latest and older ones, still wait fine.
pub fn fence_wait_of_an_unissued_mark(b: &Backend) {
    let b = b.clone();
    guarded(
        "fence_wait_of_an_unissued_mark",
        secs(30),
        Isolation::Shared,
        move || {
            let (x, y) = b.pair();
            let (x, y) = (&*x, &*y);
            let refused = |ep: &dyn Endpoint, mark: u64, latest: u64, what: &str| {
                let t = std::time::Instant::now();
                let e = expect_err(ep.fence_wait(Mark(mark)), ErrorKind::InvalidArgument, what);
                expect_text(
                    &e,
                    &[&format!("mark {mark} "), &format!("latest is {latest}")],
                    what,
                );
                assert!(
                    t.elapsed() < secs(1),
                    "{what}: refusing took {:?}",
                    t.elapsed()
                );
            };
            // Nothing issued yet: 0 is the only mark.
            let m0 = ok(x.fence_mark(), "fence_mark before any RMA");
            assert_eq!(m0, Mark(0), "the mark before any RMA");
            ok(x.fence_wait(m0), "fence_wait(0) before any RMA");
            refused(x, 12345, 0, "fence_wait(12345) right after connect");

            let w = ok(y.register(PAGE, Access::READ_WRITE), "register");
            let r = share_window(y, x, &w);
            let src = ok(x.register(PAGE, Access::READ), "register");
            fill_window(&src, 9);
            ok(
                x.write_to(src.offset(), PAGE, r, RmaFlags::ASYNC),
                "write_to",
            );
            let m = ok(x.fence_mark(), "fence_mark after one write");
            assert!(m > m0, "the mark after a write ({m:?}) is above {m0:?}");
            refused(x, m.0 + 1, m.0, "fence_wait(latest + 1)");
            refused(x, u64::MAX, m.0, "fence_wait(u64::MAX)");
            ok(x.fence_wait(m), "fence_wait(latest)");
            assert_window(&w, 9, None, "the write after fence_wait(latest)");
            ok(x.fence_wait(m0), "fence_wait of an older mark");
            // The peer issued nothing: its own marks are its own.
            refused(y, m.0, 0, "the peer's fence_wait of this side's mark");
        },
    );
}

/// `fence_signal` with a remote word (the peer waits on it, then sees every earlier write),
/// with a local word (set only once the writes completed at the peer), and with both.
pub fn fence_signal_local_and_remote(b: &Backend) {
    let b = b.clone();
    guarded(
        "fence_signal_local_and_remote",
        secs(60),
        Isolation::Shared,
        move || {
            let (x, y) = b.pair();
            let (x, y) = (&*x, &*y);
            let data = ok(y.register(MIB + 40, Access::READ_WRITE), "register");
            let rsig = ok(y.register(PAGE, Access::READ_WRITE), "register");
            let rd = share_window(y, x, &data);
            let rs = share_window(y, x, &rsig);
            let src = ok(x.register(MIB + 40, Access::READ_WRITE), "register");
            let lsig = ok(x.register(PAGE, Access::READ_WRITE), "register");
            const ROUNDS: u64 = 6;

            // Remote: the owner waits on its word on its own thread, then checks the data.
            std::thread::scope(|s| {
                s.spawn(|| {
                    for r in 1..=ROUNDS {
                        ok(
                            rsig.wait_u64(16, r, Some(secs(20))),
                            &format!("round {r}: wait for the remote signal"),
                        );
                        assert_window(
                            &data,
                            400 + r,
                            None,
                            &format!("round {r}: data once the remote signal is seen"),
                        );
                        send_u64s(y, &[r]);
                    }
                });
                for r in 1..=ROUNDS {
                    fill_window(&src, 400 + r);
                    scattered_writes(x, &src, rd, 48);
                    ok(
                        x.fence_signal(None, Some((rs + 16, r))),
                        "fence_signal remote",
                    );
                    assert_eq!(recv_u64s(x), [r], "ack of round {r}");
                }
            });

            // Local: once the local word is seen, the data is complete at the peer.
            for r in 1..=ROUNDS {
                fill_window(&src, 500 + r);
                scattered_writes(x, &src, rd, 48);
                ok(
                    x.fence_signal(Some((lsig.offset() + 24, r)), None),
                    "fence_signal local",
                );
                ok(
                    lsig.wait_u64(24, r, Some(secs(20))),
                    "wait for the local signal",
                );
                assert_window(
                    &data,
                    500 + r,
                    None,
                    &format!("round {r}: data once the local signal is seen"),
                );
            }

            // Both at once, distinct values, so swapped words would show.
            for r in 1..=ROUNDS {
                fill_window(&src, 600 + r);
                scattered_writes(x, &src, rd, 48);
                ok(
                    x.fence_signal(
                        Some((lsig.offset() + 32, 1000 + r)),
                        Some((rs + 32, 2000 + r)),
                    ),
                    "fence_signal local + remote",
                );
                ok(
                    lsig.wait_u64(32, 1000 + r, Some(secs(20))),
                    "wait local word",
                );
                assert_window(
                    &data,
                    600 + r,
                    None,
                    &format!("round {r}: data once the local word is seen"),
                );
                ok(
                    rsig.wait_u64(32, 2000 + r, Some(secs(20))),
                    "wait remote word",
                );
            }
            // Neighbouring words were never touched.
            for at in [0usize, 8, 24, 40] {
                assert_eq!(ok(rsig.load_u64(at), "load_u64"), 0, "remote word {at}");
            }
            for at in [0usize, 8, 16, 40] {
                assert_eq!(ok(lsig.load_u64(at), "load_u64"), 0, "local word {at}");
            }
        },
    );
}
