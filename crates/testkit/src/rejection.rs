//! Bad RMA is rejected on the initiating side before any byte moves, with an error that
//! names the offset (in hex) and the window; the target memory stays exactly as it was.

use std::time::Duration;

use accio::{Access, Endpoint, Error, ErrorKind, RmaFlags, Window, PAGE};

use crate::harness::{
    assert_window, assert_window_holes, expect_err, expect_text, fill_window, guarded, ok,
    share_window, sync_point, Isolation,
};
use crate::pattern;
use crate::rma::fence;
use crate::Backend;

fn range(w: &Window) -> String {
    format!("{:#x}..{:#x}", w.offset(), w.offset() + w.len() as u64)
}

/// Every way to issue a remote access of `len` bytes at peer offset `remote`, using local
/// window `lw` (at its start) where one is needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    WriteTo(RmaFlags),
    ReadFrom,
    VWriteTo(RmaFlags),
    VReadFrom,
    /// `check_remote` with these rights: refused as the RMA needing them is.
    Check(Access),
}

const WRITES: [Op; 5] = [
    Op::WriteTo(RmaFlags::SYNC),
    Op::WriteTo(RmaFlags::ASYNC),
    Op::VWriteTo(RmaFlags::SYNC),
    Op::VWriteTo(RmaFlags::ASYNC),
    Op::Check(Access::WRITE),
];
const READS: [Op; 3] = [Op::ReadFrom, Op::VReadFrom, Op::Check(Access::READ)];

fn issue(ep: &dyn Endpoint, op: Op, lw: &Window, len: usize, remote: u64) -> accio::Result<()> {
    match op {
        Op::WriteTo(f) => ep.write_to(lw.offset(), len, remote, f),
        Op::ReadFrom => ep.read_from(lw.offset(), len, remote, RmaFlags::SYNC),
        Op::VWriteTo(f) => ep.vwrite_to(&pattern::vec(len, 77, 0), remote, f),
        Op::VReadFrom => {
            let mut dst = vec![0x5Au8; len];
            let r = ep.vread_from(&mut dst, remote, RmaFlags::SYNC);
            if r.is_err() {
                assert!(
                    dst.iter().all(|&b| b == 0x5A),
                    "a rejected vread_from wrote into its destination"
                );
            }
            r
        }
        Op::Check(need) => ep.check_remote(remote, len, need),
    }
}

/// Asserts `op` fails with `kind` and its text names `parts`, the offset and the length.
#[track_caller]
fn rejected(
    (ep, lw): (&dyn Endpoint, &Window),
    op: Op,
    len: usize,
    remote: u64,
    kind: ErrorKind,
    parts: &[&str],
    what: &str,
) -> Error {
    let what = format!("{what}: {op:?} of {len} bytes at remote {remote:#x}");
    let e = expect_err(issue(ep, op, lw, len, remote), kind, &what);
    let off = format!("{remote:#x}");
    let n = len.to_string();
    let mut all = vec![off.as_str(), n.as_str()];
    all.extend_from_slice(parts);
    expect_text(&e, &all, &what);
    e
}

/// One optional `(offset, value)` argument of `fence_signal`.
type Signal = Option<(u64, u64)>;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// Past the end of a window, straddling two windows, below every window, above every
/// window, in an unregistered window, and outside the local windows: `OutOfWindow`, and
/// not one byte of the target (or of the local window, for reads) changes.
pub fn out_of_window_is_rejected(b: &Backend) {
    let b = b.clone();
    guarded(
        "out_of_window_is_rejected",
        secs(30),
        Isolation::Shared,
        move || {
            let (x, y) = b.pair();
            let (x, y) = (&*x, &*y);
            let w1 = ok(y.register(2 * PAGE, Access::READ_WRITE), "register");
            let w2 = ok(y.register(2 * PAGE, Access::READ_WRITE), "register");
            let w3 = ok(y.register(PAGE, Access::READ_WRITE), "register");
            for (w, seed) in [(&w1, 1), (&w2, 2), (&w3, 3)] {
                share_window(y, x, w);
                fill_window(w, seed);
            }
            let lw = ok(x.register(4 * PAGE, Access::READ_WRITE), "register");
            fill_window(&lw, 4);
            let (lo, hi) = if w1.offset() < w2.offset() {
                (&w1, &w2)
            } else {
                (&w2, &w1)
            };
            let lo_end = lo.offset() + lo.len() as u64;
            let hi_end = hi.offset() + hi.len() as u64;
            let top = [&w1, &w2, &w3]
                .iter()
                .map(|w| w.offset() + w.len() as u64)
                .max()
                .unwrap();

            for op in WRITES.iter().chain(READS.iter()).copied() {
                let oow = ErrorKind::OutOfWindow;
                // 8 bytes inside, 8 past the end.
                rejected(
                    (x, &lw),
                    op,
                    16,
                    lo_end - 8,
                    oow,
                    &[&range(lo), "remote"],
                    "past the end",
                );
                rejected(
                    (x, &lw),
                    op,
                    1,
                    hi_end,
                    oow,
                    &[&range(hi)],
                    "one byte at the end",
                );
                // From the last 8 bytes of the lower window over the guard into the upper one.
                let span = (hi.offset() - lo_end) as usize + 16;
                rejected(
                    (x, &lw),
                    op,
                    span,
                    lo_end - 8,
                    oow,
                    &[&range(lo)],
                    "straddling two windows",
                );
                rejected((x, &lw), op, 16, 0x10, oow, &[], "below every window");
                rejected((x, &lw), op, 8, 0, oow, &[], "offset 0");
                rejected(
                    (x, &lw),
                    op,
                    8,
                    top + 64 * PAGE as u64,
                    oow,
                    &[],
                    "above every window",
                );
                // An offset that wraps the offset space if the length is added unchecked.
                rejected(
                    (x, &lw),
                    op,
                    16,
                    u64::MAX - 7,
                    oow,
                    &[],
                    "offset + length wraps",
                );
            }

            // The local side is checked too.
            let l_end = lw.offset() + lw.len() as u64;
            let local = format!("{:#x}", l_end - 4);
            let e = expect_err(
                x.write_to(l_end - 4, 8, w1.offset(), RmaFlags::SYNC),
                ErrorKind::OutOfWindow,
                "write_to from past the local window's end",
            );
            expect_text(&e, &[&local, "local", &range(&lw)], "local out of window");
            let e = expect_err(
                x.read_from(l_end - 4, 8, w1.offset(), RmaFlags::SYNC),
                ErrorKind::OutOfWindow,
                "read_from into past the local window's end",
            );
            expect_text(&e, &[&local, "local"], "local out of window");
            expect_err(
                x.write_to(0, 8, w1.offset(), RmaFlags::ASYNC),
                ErrorKind::OutOfWindow,
                "write_to from local offset 0",
            );

            // An unregistered window: known to the peer no later than a message sent after
            // the unregister returned.
            ok(y.unregister(w3.offset()), "unregister");
            sync_point(y, x);
            for op in WRITES.iter().chain(READS.iter()).copied() {
                rejected(
                    (x, &lw),
                    op,
                    8,
                    w3.offset(),
                    ErrorKind::OutOfWindow,
                    &[],
                    "unregistered window",
                );
            }

            fence(x);
            for (w, seed) in [(&w1, 1), (&w2, 2), (&w3, 3)] {
                assert_window(
                    w,
                    seed,
                    None,
                    &format!("target window {} after rejected RMA", range(w)),
                );
            }
            assert_window(&lw, 4, None, "local window after rejected reads");
        },
    );
}

/// Write-type calls to a read-only window and read-type calls to a write-only one are
/// `AccessDenied` (text: offset, window, rights); the allowed direction works; local windows
/// need no peer rights.
pub fn access_is_enforced(b: &Backend) {
    let b = b.clone();
    guarded(
        "access_is_enforced",
        secs(30),
        Isolation::Shared,
        move || {
            let (x, y) = b.pair();
            let (x, y) = (&*x, &*y);
            let ro = ok(y.register(2 * PAGE, Access::READ), "register read-only");
            let wo = ok(y.register(2 * PAGE, Access::WRITE), "register write-only");
            share_window(y, x, &ro);
            share_window(y, x, &wo);
            fill_window(&ro, 1);
            fill_window(&wo, 2);
            let lw = ok(x.register(2 * PAGE, Access::READ_WRITE), "register");
            fill_window(&lw, 3);
            let denied = ErrorKind::AccessDenied;

            for op in WRITES {
                rejected(
                    (x, &lw),
                    op,
                    100,
                    ro.offset() + 8,
                    denied,
                    &[&range(&ro), "(r-)"],
                    "write to a read-only window",
                );
                rejected(
                    (x, &lw),
                    op,
                    PAGE,
                    ro.offset() + PAGE as u64,
                    denied,
                    &[&range(&ro)],
                    "write to a read-only window",
                );
            }
            let e = expect_err(
                x.fence_signal(None, Some((ro.offset() + 8, 1))),
                denied,
                "fence_signal into a read-only window",
            );
            expect_text(
                &e,
                &[&format!("{:#x}", ro.offset() + 8), &range(&ro)],
                "fence_signal",
            );
            for op in READS {
                rejected(
                    (x, &lw),
                    op,
                    100,
                    wo.offset() + 8,
                    denied,
                    &[&range(&wo), "(-w)"],
                    "read from a write-only window",
                );
            }
            fence(x);
            assert_window(&ro, 1, None, "read-only window after denied writes");
            assert_window(&wo, 2, None, "write-only window after denied reads");
            assert_window(&lw, 3, None, "local window after denied reads");

            // The permitted directions work, and `check_remote` says so.
            for (w, need) in [(&ro, Access::READ), (&wo, Access::WRITE)] {
                ok(
                    x.check_remote(w.offset() + 5, 300, need),
                    &format!("check_remote of {:?} in {}", need, range(w)),
                );
            }
            ok(
                x.read_from(lw.offset(), 300, ro.offset() + 5, RmaFlags::SYNC),
                "read_from read-only window",
            );
            assert_window(&lw, 3, Some((0, 300, 1, 5)), "read_from read-only window");
            fill_window(&lw, 3);
            ok(
                x.write_to(lw.offset() + 7, 300, wo.offset() + 9, RmaFlags::SYNC),
                "write_to write-only window",
            );
            assert_window(&wo, 2, Some((9, 300, 3, 7)), "write_to write-only window");

            // Local rights are not peer rights: a local window the peer may only read can be
            // written by this side's read_from, one the peer may only write can be read by
            // this side's write_to.
            let l_ro = ok(x.register(PAGE, Access::READ), "register");
            let l_wo = ok(x.register(PAGE, Access::WRITE), "register");
            fill_window(&l_ro, 10);
            fill_window(&l_wo, 11);
            ok(
                x.read_from(l_ro.offset() + 1, 64, ro.offset(), RmaFlags::SYNC),
                "read_from into a local peer-read-only window",
            );
            assert_window(
                &l_ro,
                10,
                Some((1, 64, 1, 0)),
                "local peer-read-only window after read_from",
            );
            ok(
                x.write_to(l_wo.offset() + 2, 64, wo.offset() + 1024, RmaFlags::SYNC),
                "write_to from a local peer-write-only window",
            );
            assert_window_holes(
                &wo,
                2,
                &[(9, 300, 3, 7), (1024, 64, 11, 2)],
                "write-only window after two permitted writes",
            );

            // And the peer is held to this side's rights the same way.
            share_window(x, y, &l_ro);
            share_window(x, y, &l_wo);
            let yw = ok(y.register(PAGE, Access::READ_WRITE), "register");
            let e = expect_err(
                y.write_to(yw.offset(), 8, l_ro.offset(), RmaFlags::SYNC),
                denied,
                "peer write_to into this side's read-only window",
            );
            expect_text(&e, &[&range(&l_ro)], "peer write_to");
            let e = expect_err(
                y.read_from(yw.offset(), 8, l_wo.offset(), RmaFlags::SYNC),
                denied,
                "peer read_from of this side's write-only window",
            );
            expect_text(&e, &[&range(&l_wo)], "peer read_from");
        },
    );
}

/// `fence_signal` offsets must be 8-byte aligned (`InvalidArgument`) and inside a window
/// (`OutOfWindow`) on both sides; nothing is stored when it fails; `(None, None)` is fine.
pub fn fence_signal_arguments(b: &Backend) {
    let b = b.clone();
    guarded(
        "fence_signal_arguments",
        secs(30),
        Isolation::Shared,
        move || {
            let (x, y) = b.pair();
            let (x, y) = (&*x, &*y);
            let rw = ok(y.register(PAGE, Access::READ_WRITE), "register");
            let r = share_window(y, x, &rw);
            // Local signal words need no peer rights.
            let lw = ok(x.register(PAGE, Access::READ), "register");
            let end = r + PAGE as u64;
            let l_end = lw.offset() + PAGE as u64;

            let zero = vec![0u8; PAGE];
            // After each rejected call: nothing stored on either side.
            let untouched = |what: &str| {
                fence(x);
                for (w, side) in [(&rw, "remote"), (&lw, "local")] {
                    let bytes = crate::harness::window_bytes(w, 0, PAGE);
                    if bytes != zero {
                        let at = bytes.iter().position(|&b| b != 0).unwrap() / 8 * 8;
                        panic!(
                            "{what}: the call failed but stored {:#x} into {side} word {at:#x}",
                            u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
                        );
                    }
                }
            };
            let inv = ErrorKind::InvalidArgument;
            let oow = ErrorKind::OutOfWindow;
            let cases: [(Signal, Signal, ErrorKind, &str); 7] = [
                (None, Some((r + 4, 1)), inv, "misaligned remote word"),
                (
                    Some((lw.offset() + 12, 1)),
                    None,
                    inv,
                    "misaligned local word",
                ),
                (
                    Some((lw.offset() + 12, 1)),
                    Some((r + 8, 1)),
                    inv,
                    "misaligned local word with a good remote one",
                ),
                (
                    Some((lw.offset() + 16, 1)),
                    Some((r + 4, 1)),
                    inv,
                    "good local word with a misaligned remote one",
                ),
                (None, Some((0x10, 1)), oow, "remote word below every window"),
                (
                    Some((lw.offset() + 8, 1)),
                    Some((end, 1)),
                    oow,
                    "good local word, remote word past the window",
                ),
                (
                    Some((l_end, 1)),
                    Some((r + 8, 1)),
                    oow,
                    "local word past the window, good remote word",
                ),
            ];
            for (local, remote, kind, what) in cases {
                expect_err(x.fence_signal(local, remote), kind, what);
                untouched(what);
            }
            let e = expect_err(
                x.fence_signal(None, Some((end, 1))),
                oow,
                "remote word past the window",
            );
            expect_text(
                &e,
                &[&format!("{end:#x}"), &range(&rw)],
                "remote word past the window",
            );
            untouched("remote word past the window");
            let e = expect_err(
                x.fence_signal(Some((l_end, 1)), None),
                oow,
                "local word past the window",
            );
            expect_text(
                &e,
                &[&format!("{l_end:#x}"), "local"],
                "local word past the window",
            );
            untouched("local word past the window");

            ok(x.fence_signal(None, None), "fence_signal(None, None)");
            ok(
                x.fence_signal(Some((l_end - 8, 7)), Some((end - 8, 9))),
                "last words of the windows",
            );
            ok(lw.wait_u64(PAGE - 8, 7, Some(secs(10))), "local last word");
            ok(rw.wait_u64(PAGE - 8, 9, Some(secs(10))), "remote last word");
        },
    );
}
