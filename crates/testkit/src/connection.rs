//! Connections: addresses, connection errors, and many endpoints at once.

use std::time::{Duration, Instant};

use accio::{Access, Addr, Endpoint, ErrorKind, RmaFlags};

use crate::harness::{
    expect_err, expect_text, fill_window, guarded, ok, recv_u64s, send_u64s, Isolation, Latch,
};
use crate::pattern::{self, check_message, message};
use crate::{Backend, CONNECT_TIMEOUT};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The part of an address after `scheme://`, which every error about it must name.
fn body(addr: &str) -> &str {
    addr.split_once("://").map_or(addr, |(_, b)| b)
}

/// Listener and endpoints report addresses of their backend's scheme; a listener asked for
/// tcp port 0 reports the real port; the two ends of a connection agree on who is who.
pub fn local_and_peer_addrs(b: &Backend) {
    let b = b.clone();
    guarded(
        "local_and_peer_addrs",
        secs(20),
        Isolation::Shared,
        move || {
            let asked = b.fresh_addr();
            let listener = ok(accio::listen(&asked), &format!("listen on {asked}"));
            let bound = listener.local_addr().clone();
            assert_eq!(bound.scheme(), b.name(), "listener address {bound}");
            match asked.parse::<Addr>().unwrap() {
                Addr::Tcp { host, port: 0 } => match &bound {
                    Addr::Tcp { host: h, port } => {
                        assert_ne!(*port, 0, "listener asked for port 0 reports {bound}");
                        assert_eq!(h, &host, "listener host");
                    }
                    other => panic!("tcp listener reports {other}"),
                },
                a => assert_eq!(bound, a, "listener address"),
            }
            let addr = bound.to_string();
            let acceptor = std::thread::spawn(move || listener.accept(Some(CONNECT_TIMEOUT)));
            let y = ok(accio::connect(&addr, CONNECT_TIMEOUT), "connect");
            let x = ok(acceptor.join().unwrap(), "accept");
            assert_eq!(
                y.peer_addr().to_string(),
                addr,
                "connected endpoint's peer_addr"
            );
            assert_eq!(x.local_addr().scheme(), b.name());
            assert_eq!(y.local_addr().scheme(), b.name());
            assert_eq!(
                x.peer_addr(),
                y.local_addr(),
                "accepted peer_addr vs connected local_addr"
            );
            assert_eq!(
                x.local_addr(),
                y.peer_addr(),
                "accepted local_addr vs connected peer_addr"
            );
        },
    );
}

/// Connecting where nobody listens (an address whose listener is gone, and one never
/// listened on) waits for a listener up to the timeout, then fails with `Timeout` naming
/// the address and saying that nobody listened.
pub fn connect_to_nobody_waits_for_its_timeout(b: &Backend) {
    let b = b.clone();
    guarded(
        "connect_to_nobody_waits_for_its_timeout",
        secs(30),
        Isolation::Shared,
        move || {
            let (listener, gone) = b.listen();
            drop(listener);
            let mut targets = vec![gone];
            let fresh = b.fresh_addr();
            if !matches!(fresh.parse::<Addr>(), Ok(Addr::Tcp { port: 0, .. })) {
                targets.push(fresh);
            }
            let timeout = Duration::from_millis(600);
            for addr in targets {
                let t = Instant::now();
                let r = accio::connect(&addr, timeout);
                let took = t.elapsed();
                let e = match r {
                    Ok(ep) => panic!("connect to {addr} where nobody listens succeeded: {ep:?}"),
                    Err(e) => e,
                };
                assert_eq!(
                    e.kind(),
                    ErrorKind::Timeout,
                    "connect to {addr} where nobody listens, after {took:?}: {e}"
                );
                assert!(
                    took >= timeout - Duration::from_millis(20) && took < timeout + secs(2),
                    "connect to {addr} where nobody listens gave up after {took:?} \
                     (timeout {timeout:?}): {e}"
                );
                expect_text(&e, &[body(&addr), "listen", "600ms"], "connect error");
            }
        },
    );
}

/// A connect started before its listener exists waits for it: once the listener is bound
/// (half a second later), the connect succeeds within its timeout and the pair works.
pub fn connect_waits_for_a_late_listener(b: &Backend) {
    let b = b.clone();
    guarded(
        "connect_waits_for_a_late_listener",
        secs(30),
        Isolation::Shared,
        move || {
            // A tcp address needs its real port before anyone listens: take a free one.
            let addr = match b.fresh_addr() {
                a if matches!(a.parse::<Addr>(), Ok(Addr::Tcp { port: 0, .. })) => {
                    let (listener, bound) = b.listen();
                    drop(listener);
                    bound
                }
                a => a,
            };
            let to = addr.clone();
            let connector = std::thread::spawn(move || {
                let t = Instant::now();
                (accio::connect(&to, secs(10)), t.elapsed())
            });
            std::thread::sleep(Duration::from_millis(500));
            let listener = ok(accio::listen(&addr), &format!("listen late on {addr}"));
            let x = ok(listener.accept(Some(secs(10))), "accept");
            let (y, took) = connector.join().unwrap();
            let y = ok(
                y,
                &format!("connect started 500 ms before the listener on {addr}"),
            );
            assert!(
                took >= Duration::from_millis(450) && took < secs(10),
                "connect to a late listener took {took:?}"
            );
            let msg = message(7, 0, 64);
            ok(y.send(&msg), "send");
            let mut got = Vec::new();
            ok(x.recv(&mut got), "recv");
            check_message(&got, 7, 0, 64).unwrap_or_else(|e| panic!("late listener: {e}"));
        },
    );
}

/// `accept` with a short timeout and no client fails with `Timeout` after about that
/// long, and the listener still accepts afterwards.
pub fn accept_times_out(b: &Backend) {
    let b = b.clone();
    guarded("accept_times_out", secs(20), Isolation::Shared, move || {
        let (listener, addr) = b.listen();
        let asked = Duration::from_millis(200);
        let t = Instant::now();
        let e = expect_err(
            listener.accept(Some(asked)),
            ErrorKind::Timeout,
            "idle accept",
        );
        let took = t.elapsed();
        // "Roughly": a poll that rounds to milliseconds may wake a little early.
        assert!(
            took >= asked * 9 / 10 && took < asked + secs(1),
            "accept({asked:?}) failed after {took:?}: {e}"
        );
        let client = std::thread::spawn(move || {
            let y = ok(
                accio::connect(&addr, CONNECT_TIMEOUT),
                "connect after accept timeout",
            );
            ok(y.send(b"late"), "send");
            y
        });
        let x = ok(
            listener.accept(Some(CONNECT_TIMEOUT)),
            "accept after a timeout",
        );
        let mut buf = Vec::new();
        ok(x.recv_timeout(&mut buf, Some(secs(10))), "recv");
        assert_eq!(buf, b"late");
        drop(client.join().unwrap());
    });
}

/// A second listener on a bound address gets `AddrInUse` naming it; once the first is
/// dropped the address can be listened on and connected to again.
pub fn listen_twice_is_addr_in_use(b: &Backend) {
    let b = b.clone();
    guarded(
        "listen_twice_is_addr_in_use",
        secs(20),
        Isolation::Shared,
        move || {
            let (first, addr) = b.listen();
            let e = expect_err(accio::listen(&addr), ErrorKind::AddrInUse, "second listen");
            expect_text(&e, &[body(&addr)], "AddrInUse");
            drop(first);
            let again = ok(
                accio::listen(&addr),
                "listen after the first listener was dropped",
            );
            let acceptor = std::thread::spawn(move || again.accept(Some(CONNECT_TIMEOUT)));
            let y = ok(
                accio::connect(&addr, CONNECT_TIMEOUT),
                "connect to the new listener",
            );
            let x = ok(acceptor.join().unwrap(), "accept");
            ok(y.send(b"again"), "send");
            let mut buf = Vec::new();
            ok(x.recv_timeout(&mut buf, Some(secs(10))), "recv");
            assert_eq!(buf, b"again");
        },
    );
}

/// Unknown schemes and malformed addresses are `BadAddress` from both `listen` and
/// `connect`, with the address in the text.
pub fn bad_addresses_are_rejected(b: &Backend) {
    let _ = b;
    guarded(
        "bad_addresses_are_rejected",
        secs(20),
        Isolation::Shared,
        || {
            for addr in [
                "udp://x",
                "shm://a/b",
                "shm://",
                "tcp://host",
                "tcp://h:70000",
                "nonsense",
            ] {
                let e = expect_err(
                    accio::listen(addr),
                    ErrorKind::BadAddress,
                    &format!("listen {addr:?}"),
                );
                expect_text(&e, &[addr], "BadAddress");
                let e = expect_err(
                    accio::connect(addr, secs(1)),
                    ErrorKind::BadAddress,
                    &format!("connect {addr:?}"),
                );
                expect_text(&e, &[addr], "BadAddress");
            }
        },
    );
}

const CONCURRENT: usize = 64;
const CONC_WINDOW: usize = 64 * 1024;

fn serve_one(x: &dyn Endpoint, alive: &Latch) {
    let id = recv_u64s(x)[0];
    let w = ok(x.register(CONC_WINDOW, Access::READ_WRITE), "register");
    send_u64s(x, &[w.offset(), w.len() as u64]);
    let mut buf = Vec::new();
    let n = ok(x.recv_timeout(&mut buf, Some(secs(30))), "recv payload");
    if let Err(e) = check_message(&buf[..n], 0xC1, id, 16 * 1024 + id as usize) {
        panic!("endpoint {id}: {e}");
    }
    ok(
        x.send(&message(0xC2, id, 8 * 1024 + id as usize)),
        "send reply",
    );
    ok(
        w.wait_u64(0, id + 1, Some(secs(30))),
        &format!("endpoint {id}: wait for signal"),
    );
    let got = crate::harness::window_bytes(&w, 8, CONC_WINDOW - 8);
    pattern::assert_matches(&got, 0xC3 + id, 8, &format!("endpoint {id}: window"));
    send_u64s(x, &[id, 1]);
    alive.arrive_and_wait(secs(40), "all endpoints alive at once");
}

fn client_one(id: u64, addr: &str, start: &Latch, alive: &Latch) {
    start.arrive_and_wait(secs(20), "clients ready to connect");
    let y = ok(
        accio::connect(addr, secs(30)),
        &format!("client {id}: connect"),
    );
    let y = &*y;
    send_u64s(y, &[id]);
    let [off, len] = recv_u64s(y)[..] else {
        panic!("client {id}: bad window message")
    };
    ok(
        y.send(&message(0xC1, id, 16 * 1024 + id as usize)),
        "send payload",
    );
    let mut buf = Vec::new();
    let n = ok(y.recv_timeout(&mut buf, Some(secs(30))), "recv reply");
    if let Err(e) = check_message(&buf[..n], 0xC2, id, 8 * 1024 + id as usize) {
        panic!("client {id}: {e}");
    }
    let lw = ok(y.register(len as usize, Access::READ_WRITE), "register");
    fill_window(&lw, 0xC3 + id);
    ok(
        y.write_to(lw.offset() + 8, len as usize - 8, off + 8, RmaFlags::ASYNC),
        "write_to",
    );
    ok(y.fence_signal(None, Some((off, id + 1))), "fence_signal");
    assert_eq!(recv_u64s(y), [id, 1], "client {id}: ack");
    let mut back = vec![0u8; 4096];
    ok(
        y.vread_from(&mut back, off + 8, RmaFlags::SYNC),
        "vread_from",
    );
    pattern::assert_matches(&back, 0xC3 + id, 8, &format!("client {id}: read back"));
    alive.arrive_and_wait(secs(40), "all endpoints alive at once");
}

/// One listener, 64 clients connecting at once; every pair exchanges checked messages and
/// an RMA with a signal, and all 128 endpoints are alive at the same time.
pub fn sixty_four_concurrent_endpoints(b: &Backend) {
    let b = b.clone();
    guarded(
        "sixty_four_concurrent_endpoints",
        secs(90),
        Isolation::Shared,
        move || {
            let (listener, addr) = b.listen();
            let listener = &*listener;
            let start = Latch::new(CONCURRENT);
            let alive = Latch::new(2 * CONCURRENT);
            let (start, alive, addr) = (&start, &alive, addr.as_str());
            std::thread::scope(|s| {
                s.spawn(move || {
                    for i in 0..CONCURRENT {
                        let x = ok(
                            listener.accept(Some(secs(30))),
                            &format!("accept #{i} of {CONCURRENT}"),
                        );
                        s.spawn(move || serve_one(&*x, alive));
                    }
                });
                for id in 0..CONCURRENT as u64 {
                    s.spawn(move || client_one(id, addr, start, alive));
                }
            });
        },
    );
}
