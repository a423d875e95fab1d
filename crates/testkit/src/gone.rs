//! Calls made after the peer is gone fail with `PeerGone`, even when none of them blocks.
//!
//! The contract gives a backend one second to notice that its peer closed or died; after
//! that, every message and RMA call fails. Each call is checked on a fresh connection, so
//! each must notice on its own rather than inherit what another call found out.
//!
//! Regression: shm's `send` to a peer that had closed its endpoint and exited returned
//! `Ok(())` for as long as one kept calling it, because only a call that had to wait looked
//! at the peer's state.

use std::time::{Duration, Instant};

use accio::{Access, Endpoint, ErrorKind, RmaFlags, Window};

use crate::harness::{expect_err, guarded, ok, recv_u64s, send_u64s, window_bytes, Isolation};
use crate::messages::PEER_GONE_WITHIN;
use crate::peer::{self, EXIT_NOW, EXIT_WINDOW_LEN};
use crate::process::{finish, start_peer};
use crate::Backend;

/// A call that does not wait for the peer, so it must look for itself.
#[derive(Clone, Copy, Debug)]
enum Call {
    Send,
    TrySend,
    WriteTo,
    FenceSignal,
}

const CALLS: [Call; 4] = [Call::Send, Call::TrySend, Call::WriteTo, Call::FenceSignal];

/// What the calls need: a local source window and the peer's window.
struct Target {
    local: Window,
    remote_off: u64,
}

/// Length of the RMA that `Call::WriteTo` makes.
const RMA_LEN: usize = 64;

impl Target {
    fn new(ep: &dyn Endpoint, remote_off: u64) -> Target {
        let local = ok(ep.register(EXIT_WINDOW_LEN, Access::READ_WRITE), "register");
        ok(
            local.write_at(0, &[0xA5; RMA_LEN]),
            "write_at on own window",
        );
        Target { local, remote_off }
    }

    /// Makes `call`; `Ok` carries what it returned, for the failure message.
    fn call(&self, ep: &dyn Endpoint, call: Call) -> accio::Result<String> {
        match call {
            Call::Send => ep.send(b"after the peer left").map(|v| format!("{v:?}")),
            Call::TrySend => ep
                .try_send(b"after the peer left")
                .map(|v| format!("{v:?}")),
            Call::WriteTo => ep
                .write_to(
                    self.local.offset(),
                    RMA_LEN,
                    self.remote_off + 8,
                    RmaFlags::ASYNC,
                )
                .map(|v| format!("{v:?}")),
            Call::FenceSignal => ep
                .fence_signal(None, Some((self.remote_off, 7)))
                .map(|v| format!("{v:?}")),
        }
    }
}

/// Repeats `call` until it fails, which must be with `PeerGone`; it may succeed only when
/// it started within [`PEER_GONE_WITHIN`] of `gone_at`. Then every call must fail at once.
#[track_caller]
fn assert_gone_after(ep: &dyn Endpoint, t: &Target, call: Call, gone_at: Instant, what: &str) {
    loop {
        let started = Instant::now();
        match t.call(ep, call) {
            Ok(v) => {
                let after = started.saturating_duration_since(gone_at);
                assert!(
                    after <= PEER_GONE_WITHIN,
                    "{what}: {call:?} made {after:?} after the peer was gone returned \
                     Ok({v}); the contract says PeerGone within {PEER_GONE_WITHIN:?}"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => {
                assert_eq!(
                    e.kind(),
                    ErrorKind::PeerGone,
                    "{what}: {call:?} after the peer was gone: {e}"
                );
                break;
            }
        }
    }
    for later in CALLS {
        expect_err(
            t.call(ep, later),
            ErrorKind::PeerGone,
            &format!("{what}: {later:?} after {call:?} failed with PeerGone"),
        );
    }
}

/// The peer closes its endpoint (the other end of an in-process pair) while nothing waits:
/// `send`, `try_send`, `write_to` and `fence_signal` then fail with `PeerGone`, each on its
/// own connection.
pub fn calls_after_peer_close_fail(b: &Backend) {
    let b = b.clone();
    guarded(
        "calls_after_peer_close_fail",
        Duration::from_secs(60),
        Isolation::Shared,
        move || {
            for call in CALLS {
                let (a, c) = b.pair();
                let theirs = ok(c.register(EXIT_WINDOW_LEN, Access::READ_WRITE), "register");
                send_u64s(&*c, &[theirs.offset()]);
                let [remote_off] = recv_u64s(&*a)[..] else {
                    panic!("bad window message")
                };
                let t = Target::new(&*a, remote_off);
                // While the peer is there, every call works (so the errors below are the
                // peer's absence, not bad arguments).
                for alive in CALLS {
                    ok(t.call(&*a, alive), &format!("{alive:?} to a live peer"));
                }
                // The signal lands after the data written before it.
                ok(
                    theirs.wait_u64(0, 7, Some(Duration::from_secs(10))),
                    "wait for the fence_signal value",
                );
                let got = window_bytes(&theirs, 8, RMA_LEN);
                assert_eq!(got, [0xA5; RMA_LEN], "window written by write_to");
                let mut buf = Vec::new();
                for _ in 0..2 {
                    let n = ok(c.recv(&mut buf), "recv of a message sent to a live peer");
                    assert_eq!(buf[..n], *b"after the peer left");
                }
                drop(c);
                let gone_at = Instant::now();
                assert_gone_after(&*a, &t, call, gone_at, "after the peer closed");
            }
        },
    );
}

/// The peer process exits without closing its endpoint while nothing waits: `send`,
/// `try_send`, `write_to` and `fence_signal` then fail with `PeerGone`, each on its own
/// connection.
pub fn calls_after_peer_exit_fail(b: &Backend) {
    let b = b.clone();
    guarded(
        "calls_after_peer_exit_fail",
        Duration::from_secs(90),
        Isolation::Shared,
        move || {
            for call in CALLS {
                let mut p = start_peer(&b, peer::EXIT);
                let ep = &*p.ep;
                let [remote_off, len] = recv_u64s(ep)[..] else {
                    panic!("bad window message from the peer")
                };
                assert_eq!(len as usize, EXIT_WINDOW_LEN);
                let t = Target::new(ep, remote_off);
                for alive in CALLS {
                    ok(t.call(ep, alive), &format!("{alive:?} to a live peer"));
                }
                send_u64s(ep, &[EXIT_NOW]);
                let (status, stderr) = finish(&mut p.child);
                assert!(status.success(), "peer exited with {status}: {stderr}");
                let gone_at = Instant::now();
                assert_gone_after(ep, &t, call, gone_at, "after the peer process exited");
                drop(p.listener);
            }
        },
    );
}
