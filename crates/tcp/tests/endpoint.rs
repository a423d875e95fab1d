//! The tcp backend's own tests: connection setup and refusal, messages, RMA, fences,
//! initiator-side checks, a lying peer, and peer death.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use accio_core::{Access, Addr, Endpoint, ErrorKind, Listener, Mark, Progress, RmaFlags, PAGE};
use accio_tcp::frame::{FaultCode, Header, Kind};
use accio_tcp::{TcpEndpoint, TcpListener, TcpOptions};

use common::*;

// ---- connection setup ------------------------------------------------------------------

#[test]
fn listener_binds_exactly_the_given_host_and_reports_the_port() {
    let l = TcpListener::bind(&loopback()).unwrap();
    let Addr::Tcp { host, port } = l.local_addr().clone() else {
        panic!("not tcp")
    };
    assert_eq!(host, "127.0.0.1");
    assert_ne!(port, 0);
    // Another loopback address of this host cannot reach a socket bound to 127.0.0.1.
    assert!(TcpStream::connect_timeout(
        &format!("127.0.0.2:{port}").parse().unwrap(),
        Duration::from_millis(500)
    )
    .is_err());
    // Binding the same port again is "in use", naming the address.
    let again: Addr = format!("tcp://127.0.0.1:{port}").parse().unwrap();
    let e = expect_kind(TcpListener::bind(&again), ErrorKind::AddrInUse);
    assert!(e.to_string().contains(&again.to_string()), "{e}");
}

#[test]
fn names_are_resolved() {
    let l = TcpListener::bind(&"tcp://localhost:0".parse().unwrap()).unwrap();
    let Addr::Tcp { port, .. } = l.local_addr().clone() else {
        panic!()
    };
    let t = std::thread::spawn(move || l.accept_tcp(Some(T)).map(|_| ()));
    let host = format!("tcp://localhost:{port}").parse().unwrap();
    let ep = TcpEndpoint::connect(&host, T).unwrap();
    assert_eq!(ep.backend(), "tcp");
    t.join().unwrap().unwrap();
}

#[test]
fn accept_times_out_when_nobody_connects() {
    let l = TcpListener::bind(&loopback()).unwrap();
    let t = Instant::now();
    let e = expect_kind(
        l.accept(Some(Duration::from_millis(150))),
        ErrorKind::Timeout,
    );
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert!(e.to_string().contains("accept"), "{e}");
}

/// Refused until the timeout (nothing ever listens): a connect waits for its listener that
/// long, then says nobody listened there and for how long it waited.
#[test]
fn refused_connection_waits_its_timeout_and_names_the_address() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr: Addr = format!("tcp://127.0.0.1:{port}").parse().unwrap();
    let t = Instant::now();
    let wait = Duration::from_millis(300);
    let e = expect_kind(TcpEndpoint::connect(&addr, wait), ErrorKind::Timeout);
    let took = t.elapsed();
    assert!(took >= wait && took < Duration::from_secs(3), "{took:?}");
    let text = e.to_string();
    assert!(
        text.contains(&addr.to_string())
            && text.contains("nothing listened there")
            && text.contains("300ms"),
        "{text}"
    );
}

#[test]
fn listener_that_never_accepts_is_a_connect_timeout() {
    // The kernel completes the TCP handshake from the backlog, but no greeting comes.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: Addr = format!("tcp://{}", l.local_addr().unwrap())
        .parse()
        .unwrap();
    let t = Instant::now();
    let e = expect_kind(
        TcpEndpoint::connect(&addr, Duration::from_millis(300)),
        ErrorKind::Timeout,
    );
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    assert!(e.to_string().starts_with("connect on"), "{e}");
}

#[test]
fn non_accio_server_is_a_protocol_error() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr: Addr = format!("tcp://{}", l.local_addr().unwrap())
        .parse()
        .unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        // A banner shorter than a greeting, then silence: refused at once, not timed out.
        s.write_all(b"220 ready\r\n").unwrap();
        let mut sink = [0u8; 64];
        let _ = s.read(&mut sink);
    });
    let start = Instant::now();
    let e = expect_kind(TcpEndpoint::connect(&addr, T), ErrorKind::Protocol);
    assert!(start.elapsed() < Duration::from_secs(3));
    assert!(e.to_string().contains("not an accio tcp peer"), "{e}");
    t.join().unwrap();
}

#[test]
fn garbage_on_the_listening_port_is_refused_and_the_listener_still_accepts() {
    let l = TcpListener::bind(&loopback()).unwrap();
    let addr = l.local_addr().clone();
    let Addr::Tcp { port, .. } = addr.clone() else {
        panic!()
    };
    let mut junk = TcpStream::connect(("127.0.0.1", port)).unwrap();
    junk.write_all(&[0xde; 100]).unwrap();
    let e = expect_kind(l.accept(Some(T)), ErrorKind::Protocol);
    assert!(e.to_string().contains("not an accio tcp peer"), "{e}");
    // The junk connection was closed.
    let mut rest = Vec::new();
    junk.set_read_timeout(Some(T)).unwrap();
    let _ = junk.read_to_end(&mut rest);

    // A proper connection still works.
    let t = std::thread::spawn(move || {
        let c = TcpEndpoint::connect(&addr, T).unwrap();
        c.send(b"after the junk").unwrap();
        recv_u64(&c)
    });
    let ep = l.accept(Some(T)).unwrap();
    let mut buf = Vec::new();
    ep.recv_timeout(&mut buf, Some(T)).unwrap();
    assert_eq!(buf, b"after the junk");
    send_u64(&*ep, 7);
    assert_eq!(t.join().unwrap(), 7);
}

#[test]
fn silent_connection_is_refused_after_the_handshake_timeout() {
    let opts = TcpOptions::new().handshake_timeout(Duration::from_millis(200));
    let l = TcpListener::bind_with(&loopback(), opts).unwrap();
    let Addr::Tcp { port, .. } = l.local_addr().clone() else {
        panic!()
    };
    let _silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let t = Instant::now();
    let e = expect_kind(l.accept(Some(T)), ErrorKind::Protocol);
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(e.to_string().contains("no accio greeting"), "{e}");
}

#[test]
fn a_silent_connection_does_not_hold_up_the_next_one() {
    let opts = TcpOptions::new().handshake_timeout(Duration::from_secs(3));
    let l = TcpListener::bind_with(&loopback(), opts).unwrap();
    let addr = l.local_addr().clone();
    let Addr::Tcp { port, .. } = addr.clone() else {
        panic!()
    };
    // Connects first and never says a word; a half-sent greeting waits aside as well.
    let _silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut half = TcpStream::connect(("127.0.0.1", port)).unwrap();
    half.write_all(b"ACCIO").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let t = std::thread::spawn(move || {
        let c = TcpEndpoint::connect(&addr, T).unwrap();
        c.send(b"not held up").unwrap();
        recv_u64(&c)
    });
    let started = Instant::now();
    let ep = l.accept(Some(T)).unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the proper connection waited {:?} behind the silent ones",
        started.elapsed()
    );
    let mut buf = Vec::new();
    ep.recv_timeout(&mut buf, Some(T)).unwrap();
    assert_eq!(buf, b"not held up");
    send_u64(&*ep, 9);
    assert_eq!(t.join().unwrap(), 9);
    // The silent ones are dropped, with the reason, once their handshake time is up; the
    // listener sleeps meanwhile, though the half greeting keeps its socket readable.
    let (cpu, wall) = (thread_cpu_time(), Instant::now());
    for _ in 0..2 {
        let e = expect_kind(l.accept(Some(T)), ErrorKind::Protocol);
        assert!(e.to_string().contains("no accio greeting"), "{e}");
    }
    let (cpu, wall) = (thread_cpu_time() - cpu, wall.elapsed());
    assert!(
        cpu < Duration::from_millis(300),
        "accept used {cpu:?} of CPU in {wall:?} waiting for a half greeting"
    );
}

/// CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    // SAFETY: `getrusage` fills the zeroed struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut ru), 0);
        ru
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(us(ru.ru_utime) + us(ru.ru_stime))
}

#[test]
fn addresses_and_capabilities() {
    let (a, c) = pair();
    assert_eq!(a.local_addr(), c.peer_addr());
    assert_eq!(a.peer_addr(), c.local_addr());
    let caps = a.capabilities();
    assert!(!caps.map_remote && !caps.cpu_free_rma);
    assert_eq!(caps.max_try_send, 256 * 1024);
    // Exactly the limit is accepted on an idle connection.
    let m = pattern(caps.max_try_send, 1);
    let start = Instant::now();
    while c.try_send(&m).unwrap() == Progress::WouldBlock {
        assert!(
            start.elapsed() < T,
            "idle connection refuses max_try_send bytes"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut buf = Vec::new();
    a.recv_timeout(&mut buf, Some(T)).unwrap();
    assert!(buf == m);
    let e = expect_kind(a.map_remote(1 << 20, 8), ErrorKind::Unsupported);
    assert_eq!(
        e.to_string(),
        "map_remote is not supported by the tcp backend"
    );
}

// ---- messages --------------------------------------------------------------------------

#[test]
fn messages_of_many_sizes_arrive_whole_and_in_order_both_ways() {
    let (a, c) = pair();
    let sizes = [
        0usize,
        1,
        39,
        40,
        41,
        4095,
        4096,
        65_535,
        65_536,
        65_537,
        (1 << 20) + 7,
        16 << 20,
        3,
    ];
    std::thread::scope(|s| {
        for (from, to, salt) in [(&a, &c, 1u64), (&c, &a, 2)] {
            s.spawn(move || {
                for (i, &n) in sizes.iter().enumerate() {
                    from.send(&pattern(n, salt * 100 + i as u64)).unwrap();
                }
            });
            s.spawn(move || {
                let mut buf = vec![1u8; 10];
                for (i, &n) in sizes.iter().enumerate() {
                    let got = to.recv_timeout(&mut buf, Some(T)).unwrap();
                    assert_eq!(got, n);
                    assert!(
                        buf == pattern(n, salt * 100 + i as u64),
                        "message {i} of {n} bytes"
                    );
                }
            });
        }
    });
}

#[test]
fn many_small_messages_and_buffer_recycling() {
    let (a, c) = pair();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..20_000u64 {
                a.send(&i.to_le_bytes()[..(i % 9) as usize]).unwrap();
            }
        });
        let mut buf = Vec::new();
        for i in 0..20_000u64 {
            let n = c.recv_timeout(&mut buf, Some(T)).unwrap();
            assert_eq!(
                &buf[..],
                &i.to_le_bytes()[..(i % 9) as usize],
                "message {i}"
            );
            assert_eq!(n, buf.len());
        }
    });
}

#[test]
fn nonblocking_receives_and_timeouts_consume_nothing() {
    let (a, c) = pair();
    let mut buf = vec![9u8; 3];
    assert_eq!(a.try_recv(&mut buf).unwrap(), Progress::WouldBlock);
    let t = Instant::now();
    expect_kind(
        a.recv_timeout(&mut buf, Some(Duration::from_millis(100))),
        ErrorKind::Timeout,
    );
    assert!(t.elapsed() >= Duration::from_millis(100));
    assert_eq!(buf, [9, 9, 9], "a timeout must not touch the buffer");
    c.send(b"x").unwrap();
    let start = Instant::now();
    loop {
        match a.try_recv(&mut buf).unwrap() {
            Progress::Ready(n) => {
                assert_eq!((n, &buf[..]), (1, &b"x"[..]));
                break;
            }
            Progress::WouldBlock => {
                assert!(start.elapsed() < T);
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

#[test]
fn try_send_limit_and_would_block_when_the_peer_does_not_read() {
    let opts = TcpOptions::new()
        .recv_queue_bytes(1 << 20)
        .max_try_send(64 * 1024);
    let (a, c) = pair_with(opts);
    let e = expect_kind(
        a.try_send(&vec![0; 64 * 1024 + 1]),
        ErrorKind::MessageTooLarge,
    );
    assert!(
        e.to_string().contains("65537") && e.to_string().contains("65536"),
        "{e}"
    );

    let mut sent = 0u64;
    let start = Instant::now();
    loop {
        let m = pattern(64 * 1024, sent);
        match a.try_send(&m).unwrap() {
            Progress::Ready(()) => sent += 1,
            Progress::WouldBlock => break,
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never would block"
        );
        assert!(
            sent < 16 * 1024,
            "{sent} messages queued without would-block"
        );
    }
    assert!(sent > 0);
    // The would-block send enqueued nothing: the next message follows the accepted ones.
    std::thread::scope(|s| {
        s.spawn(|| a.send(b"last").unwrap());
        let mut buf = Vec::new();
        for i in 0..sent {
            c.recv_timeout(&mut buf, Some(T)).unwrap();
            assert!(buf == pattern(64 * 1024, i), "message {i}");
        }
        c.recv_timeout(&mut buf, Some(T)).unwrap();
        assert_eq!(buf, b"last");
    });
}

#[test]
fn send_refuses_messages_above_the_peer_limit() {
    let (a, c) = pair_with(TcpOptions::new().max_message(1000));
    let e = expect_kind(c.send(&[0u8; 1001]), ErrorKind::MessageTooLarge);
    assert!(e.to_string().contains("1000-byte limit"), "{e}");
    c.send(&[5u8; 1000]).unwrap();
    let mut buf = Vec::new();
    assert_eq!(a.recv_timeout(&mut buf, Some(T)).unwrap(), 1000);
}

#[test]
fn messages_larger_than_the_credit_window_still_flow() {
    let (a, c) = pair_with(TcpOptions::new().recv_queue_bytes(64 * 1024));
    let size = |i: u64| ((i as usize % 3) << 19) | 1;
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..20u64 {
                a.send(&pattern(size(i), i)).unwrap();
            }
        });
        let mut buf = Vec::new();
        for i in 0..20u64 {
            c.recv_timeout(&mut buf, Some(T)).unwrap();
            assert!(buf == pattern(size(i), i), "message {i}");
        }
    });
}

#[test]
fn a_peer_that_ignores_its_credit_is_a_protocol_error() {
    let (ep, mut raw) = RawPeer::pair_with(TcpOptions::new().recv_queue_bytes(4096));
    // The first message may exceed what is left (the window is empty); the second may not.
    raw.send(&Header::message(2000), &[1; 2000]);
    raw.send(&Header::message(2000), &[2; 2000]);
    // Receive only once the endpoint has judged both: a `recv` of the first message before
    // the second is read would return its credit and make the second legal. The endpoint
    // shuts the socket down on the protocol error, which the raw peer sees as its end.
    let mut rest = Vec::new();
    raw.s.read_to_end(&mut rest).unwrap();
    let mut buf = Vec::new();
    ep.recv_timeout(&mut buf, Some(T)).unwrap();
    assert_eq!(buf, [1; 2000]);
    let e = expect_kind(ep.recv_timeout(&mut buf, Some(T)), ErrorKind::Protocol);
    assert!(e.to_string().contains("without credit"), "{e}");
}

/// Fills the peer's message credit with messages it does not receive yet.
fn fill_credit(from: &TcpEndpoint) -> u64 {
    let mut sent = 0u64;
    while from.try_send(&pattern(60_000, sent)).unwrap() == Progress::Ready(()) {
        sent += 1;
    }
    sent
}

fn drain(to: &TcpEndpoint, sent: u64) {
    let mut buf = Vec::new();
    for i in 0..sent {
        to.recv_timeout(&mut buf, Some(T)).unwrap();
        assert!(buf == pattern(60_000, i), "message {i}");
    }
}

/// Regression: RMA must not wait for the peer to receive its messages. (A first design
/// stopped the reader while the receive queue was full; a peer waiting on a signal word
/// before calling `recv` then deadlocked.)
#[test]
fn rma_is_not_held_up_by_unreceived_messages() {
    let (x, y) = pair_with(TcpOptions::new().recv_queue_bytes(1 << 20));
    let wy = y.register(1 << 20, Access::READ_WRITE).unwrap();
    let wx = x.register(4096, Access::READ).unwrap();
    wx.write_at(0, b"from x").unwrap();
    send_u64(&y, wy.offset());
    send_u64(&x, wx.offset());
    let (ry, rx) = (recv_u64(&x), recv_u64(&y));

    // x fills y's window; y waits on a signal word without receiving anything.
    let sent = fill_credit(&x);
    assert!(sent >= 16, "only {sent} messages before would-block");
    let data = pattern(1 << 20, 77);
    x.vwrite_to(&data[8..], ry + 8, RmaFlags::ASYNC).unwrap();
    x.fence_signal(None, Some((ry, 0x5151))).unwrap();
    wy.wait_u64(0, 0x5151, Some(T)).unwrap();
    assert!(window_bytes(&wy)[8..] == data[8..]);
    // y reads from x, which does not receive y's messages either.
    let sent_y = fill_credit(&y);
    let mut got = [0u8; 6];
    y.vread_from(&mut got, rx, RmaFlags::SYNC).unwrap();
    assert_eq!(&got, b"from x");
    x.fence_wait(x.fence_mark().unwrap()).unwrap();

    // A send blocked on credit resumes once the peer receives.
    std::thread::scope(|s| {
        s.spawn(|| x.send(b"after").unwrap());
        drain(&y, sent);
        let mut buf = Vec::new();
        y.recv_timeout(&mut buf, Some(T)).unwrap();
        assert_eq!(buf, b"after");
    });
    drain(&x, sent_y);
}

// ---- RMA -------------------------------------------------------------------------------

/// x and y each register a window of `len` bytes (read-write) and learn the other's offset.
fn windows(
    x: &TcpEndpoint,
    y: &TcpEndpoint,
    len: usize,
) -> (accio_core::Window, accio_core::Window, u64, u64) {
    let wx = x.register(len, Access::READ_WRITE).unwrap();
    let wy = y.register(len, Access::READ_WRITE).unwrap();
    send_u64(x, wx.offset());
    send_u64(y, wy.offset());
    let ry = recv_u64(x);
    let rx = recv_u64(y);
    (wx, wy, rx, ry)
}

fn window_bytes(w: &accio_core::Window) -> Vec<u8> {
    let mut v = vec![0u8; w.len()];
    w.read_at(0, &mut v).unwrap();
    v
}

#[test]
fn rma_moves_the_right_bytes() {
    let (x, y) = pair();
    const LEN: usize = 3 * PAGE + 100;
    let (wx, wy, _rx, ry) = windows(&x, &y, LEN);
    assert_eq!(window_bytes(&wy), vec![0; LEN], "fresh windows are zeroed");
    for flags in [RmaFlags::SYNC, RmaFlags::ASYNC] {
        for (i, &(lo, len, ro)) in [(0, 1, 0), (3, 17, 5), (0, LEN, 0), (1, PAGE + 1, PAGE - 3)]
            .iter()
            .enumerate()
        {
            let seed = i as u64 * 10 + u64::from(flags.sync);
            let src = pattern(LEN, seed);
            let before = pattern(LEN, seed + 1);
            wx.write_at(0, &src).unwrap();
            wy.write_at(0, &before).unwrap();
            x.write_to(wx.offset() + lo as u64, len, ry + ro as u64, flags)
                .unwrap();
            if !flags.sync {
                x.fence_wait(x.fence_mark().unwrap()).unwrap();
            }
            let mut want = before.clone();
            want[ro..ro + len].copy_from_slice(&src[lo..lo + len]);
            assert!(window_bytes(&wy) == want, "write_to case {i} {flags:?}");

            // read_from back into another place of the local window.
            wx.write_at(0, &before).unwrap();
            wy.write_at(0, &src).unwrap();
            x.read_from(wx.offset() + lo as u64, len, ry + ro as u64, flags)
                .unwrap();
            let mut want = before.clone();
            want[lo..lo + len].copy_from_slice(&src[ro..ro + len]);
            assert!(window_bytes(&wx) == want, "read_from case {i} {flags:?}");

            // v-variants.
            wy.write_at(0, &before).unwrap();
            x.vwrite_to(&src[..len], ry + ro as u64, flags).unwrap();
            let mut dst = vec![0xa5u8; len + 2];
            x.vread_from(&mut dst[1..len + 1], ry + ro as u64, flags)
                .unwrap();
            assert_eq!(&dst[1..len + 1], &src[..len], "vwrite/vread case {i}");
            assert_eq!((dst[0], dst[len + 1]), (0xa5, 0xa5));
        }
    }
}

#[test]
fn sixty_four_mib_in_one_call() {
    let (x, y) = pair();
    const BIG: usize = (64 << 20) + 12_345;
    let wy = y.register(BIG, Access::READ_WRITE).unwrap();
    send_u64(&y, wy.offset());
    let ry = recv_u64(&x);
    let src = pattern(BIG, 3);
    x.vwrite_to(&src, ry, RmaFlags::SYNC).unwrap();
    assert!(window_bytes(&wy) == src);
    let mut back = vec![0u8; BIG];
    x.vread_from(&mut back, ry, RmaFlags::ASYNC).unwrap();
    assert!(back == src);
}

#[test]
fn fences_and_signals_order_after_earlier_writes() {
    let (x, y) = pair();
    let (wx, wy, _rx, ry) = windows(&x, &y, 1 << 20);
    let sig = y.register(PAGE, Access::WRITE).unwrap();
    send_u64(&y, sig.offset());
    let rs = recv_u64(&x);
    let lsig = x.register(PAGE, Access::NONE).unwrap();

    // Nothing issued yet: the mark is 0 and waiting on it is immediate.
    assert_eq!(x.fence_mark().unwrap(), Mark(0));
    x.fence_wait(Mark(0)).unwrap();
    expect_kind(x.fence_wait(Mark(1 << 40)), ErrorKind::InvalidArgument);

    for round in 1..=5u64 {
        let data = pattern(1 << 20, round);
        wx.write_at(0, &data).unwrap();
        for k in (0..16).rev() {
            let at = k * (64 << 10);
            x.write_to(
                wx.offset() + at as u64,
                64 << 10,
                ry + at as u64,
                RmaFlags::ASYNC,
            )
            .unwrap();
        }
        x.fence_signal(Some((lsig.offset() + 8, round)), Some((rs + 16, round)))
            .unwrap();
        sig.wait_u64(16, round, Some(T)).unwrap();
        assert!(
            window_bytes(&wy) == data,
            "round {round}: data before signal"
        );
        lsig.wait_u64(8, round, Some(T)).unwrap();
        // A local-only signal after everything completed.
        let m = x.fence_mark().unwrap();
        x.fence_wait(m).unwrap();
        x.fence_signal(Some((lsig.offset() + 24, round)), None)
            .unwrap();
        lsig.wait_u64(24, round, Some(T)).unwrap();
    }
    expect_kind(
        x.fence_signal(Some((lsig.offset() + 4, 1)), None),
        ErrorKind::InvalidArgument,
    );
}

#[test]
fn bad_rma_fails_at_the_initiator_and_sends_nothing() {
    let (x, y) = pair();
    let wx = x.register(2 * PAGE, Access::READ_WRITE).unwrap();
    let ro = y.register(PAGE, Access::READ).unwrap();
    let wo = y.register(PAGE, Access::WRITE).unwrap();
    send_u64(&y, ro.offset());
    send_u64(&y, wo.offset());
    let (rro, rwo) = (recv_u64(&x), recv_u64(&x));
    let peer = x.peer_addr().to_string();

    // Past the end of the remote window.
    let e = expect_kind(
        x.write_to(wx.offset(), 16, rwo + PAGE as u64 - 8, RmaFlags::SYNC),
        ErrorKind::OutOfWindow,
    );
    assert_eq!(
        e.to_string(),
        format!(
            "remote window {:#x}..{:#x} (-w) of {peer} does not cover {:#x} + 16",
            rwo,
            rwo + PAGE as u64,
            rwo + PAGE as u64 - 8
        )
    );
    // Wrong rights.
    let e = expect_kind(
        x.write_to(wx.offset(), 8, rro, RmaFlags::ASYNC),
        ErrorKind::AccessDenied,
    );
    assert!(e.to_string().contains("does not allow -w"), "{e}");
    expect_kind(
        x.vread_from(&mut [0u8; 8], rwo, RmaFlags::SYNC),
        ErrorKind::AccessDenied,
    );
    expect_kind(
        x.fence_signal(None, Some((rro, 1))),
        ErrorKind::AccessDenied,
    );
    // Local side: no local window there.
    let e = expect_kind(
        x.write_to(wx.offset() + 2 * PAGE as u64, 1, rwo, RmaFlags::SYNC),
        ErrorKind::OutOfWindow,
    );
    assert!(e.to_string().starts_with("local window"), "{e}");
    expect_kind(
        x.read_from(12345, 1, rro, RmaFlags::SYNC),
        ErrorKind::OutOfWindow,
    );
    // Zero lengths.
    expect_kind(
        x.vwrite_to(&[], rwo, RmaFlags::SYNC),
        ErrorKind::InvalidArgument,
    );
    // Nothing was sent: no RMA has a sequence number, and the windows are untouched.
    assert_eq!(x.fence_mark().unwrap(), Mark(0));
    assert_eq!(window_bytes(&wo), vec![0; PAGE]);

    // Unregister: unknown offsets are refused; a withdrawn window is refused at the
    // initiator once the notice arrived (it travels before the next message).
    let e = expect_kind(y.unregister(12345), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("0x3039"), "{e}");
    y.unregister(wo.offset()).unwrap();
    send_u64(&y, 1);
    recv_u64(&x);
    expect_kind(
        x.vwrite_to(&[1], rwo, RmaFlags::SYNC),
        ErrorKind::OutOfWindow,
    );
}

// ---- a lying peer ----------------------------------------------------------------------

#[test]
fn a_lying_peer_cannot_reach_outside_a_window() {
    let (ep, mut raw) = RawPeer::pair_with(TcpOptions::default());
    let w = ep.register(PAGE, Access::READ).unwrap();
    let h = raw.recv_header();
    assert_eq!(h, Header::register(w.offset(), PAGE, Access::READ));

    // A write to a read-only window, one past its end, and one to no window at all.
    for (seq, off, len, code) in [
        (1, w.offset(), 8, FaultCode::AccessDenied),
        (2, w.offset() + PAGE as u64 - 4, 8, FaultCode::OutOfWindow),
        (3, 0x7000_0000, 100_000, FaultCode::OutOfWindow),
    ] {
        raw.send(&Header::write(seq, off, len, true), &vec![0xff; len]);
        assert_eq!(
            raw.recv_header(),
            Header::fault(seq, code, off, len as u64, Access::WRITE)
        );
        assert_eq!(raw.recv_header(), Header::ack(seq));
    }
    // A read outside the window.
    raw.send(&Header::read_request(4, w.offset() + 8, PAGE), &[]);
    assert_eq!(
        raw.recv_header(),
        Header::fault(
            4,
            FaultCode::OutOfWindow,
            w.offset() + 8,
            PAGE as u64,
            Access::READ
        )
    );
    // A valid read is answered with the window's bytes.
    w.write_at(0, b"window!!").unwrap();
    raw.send(&Header::read_request(5, w.offset(), 8), &[]);
    assert_eq!(raw.recv_header(), Header::read_data(5, 8));
    assert_eq!(raw.recv_payload(8), b"window!!");
    assert_eq!(window_bytes(&w)[8..], vec![0u8; PAGE - 8]);
    // The endpoint is still healthy.
    raw.send(&Header::message(2), b"ok");
    let mut buf = Vec::new();
    ep.recv_timeout(&mut buf, Some(T)).unwrap();
    assert_eq!(buf, b"ok");
}

#[test]
fn refusals_by_the_peer_surface_at_the_next_fence() {
    let (ep, mut raw) = RawPeer::pair_with(TcpOptions::default());
    // The peer announces a writable window, then refuses writes to it anyway.
    raw.send(&Header::register(1 << 20, PAGE, Access::WRITE), &[]);
    raw.send(&Header::message(0), &[]);
    let mut buf = Vec::new();
    ep.recv_timeout(&mut buf, Some(T)).unwrap();
    ep.vwrite_to(&[1; 8], (1 << 20) + 8, RmaFlags::ASYNC)
        .unwrap();
    let h = raw.recv_header();
    assert_eq!((h.kind, h.seq, h.len), (Kind::Write, 1, 8));
    raw.recv_payload(8);
    raw.send(
        &Header::fault(1, FaultCode::AccessDenied, (1 << 20) + 8, 8, Access::WRITE),
        &[],
    );
    let m = ep.fence_mark().unwrap();
    // Whether the fault arrives before or after the first fence_wait starts, exactly one
    // fence request goes out (the first call either finds the fault at once or asks).
    let t = std::thread::spawn(move || {
        let h = raw.recv_header();
        assert_eq!(h, Header::fence_request(1));
        raw.send(&Header::ack(1), &[]);
        raw
    });
    let e = expect_kind(ep.fence_wait(m), ErrorKind::AccessDenied);
    assert!(
        e.to_string()
            .starts_with("remote window 0x100000..0x101000 (-w)"),
        "{e}"
    );
    // Reported once; the fence then completes.
    ep.fence_wait(m).unwrap();
    let _raw = t.join().unwrap();
}

#[test]
fn a_garbage_frame_closes_the_connection_with_a_protocol_error() {
    let mut unknown = Header::ack(0).encode();
    unknown[0] = 0x7f;
    for (bytes, reason) in [
        (unknown.to_vec(), "frame type 0x7f is unknown".to_string()),
        (
            // A message header claiming 4 EiB: refused before any allocation.
            Header::message(1 << 62).encode().to_vec(),
            format!(
                "message frame of {} bytes exceeds the 1073741824-byte limit",
                1u64 << 62
            ),
        ),
        (
            Header::ack(99).encode().to_vec(),
            "ack for sequence number 99, but only 0 were sent".to_string(),
        ),
        (
            Header::read_data(5, 10).encode().to_vec(),
            "read-data frame for read 5 (10 bytes) matches no pending read".to_string(),
        ),
        (
            Header::credit(100).encode().to_vec(),
            "the peer returned 100 bytes of message credit, more than was spent".to_string(),
        ),
        (
            Header::unregister(1 << 20).encode().to_vec(),
            "the peer withdrew a window at 0x100000, which it never announced".to_string(),
        ),
    ] {
        let (ep, mut raw) = RawPeer::pair_with(TcpOptions::default());
        let peer = ep.peer_addr().to_string();
        let t = Instant::now();
        raw.send_bytes(&bytes);
        let mut buf = Vec::new();
        let e = expect_kind(ep.recv_timeout(&mut buf, Some(T)), ErrorKind::Protocol);
        assert!(t.elapsed() < Duration::from_secs(3));
        assert_eq!(
            e.to_string(),
            format!("protocol error from {peer}: {reason}")
        );
        // Every later call fails the same way, and the peer sees the connection closed.
        expect_kind(ep.send(b"x"), ErrorKind::Protocol);
        expect_kind(ep.register(8, Access::READ), ErrorKind::Protocol);
        let mut rest = Vec::new();
        let _ = raw.s.read_to_end(&mut rest);
    }
}

#[test]
fn every_length_from_the_wire_is_checked_against_its_limit_before_use() {
    use accio_tcp::frame::MAX_RMA;
    let over = MAX_RMA + 1;
    // Headers whose length exceeds the stated limit close the connection at once,
    // before anything is allocated, read or addressed on their word.
    let mut register_huge = Header::register(1 << 20, 4096, Access::READ).encode();
    register_huge[8..16].copy_from_slice(&over.to_le_bytes());
    let mut write_huge = Header::write(1, 1 << 20, 1, false).encode();
    write_huge[8..16].copy_from_slice(&over.to_le_bytes());
    let mut read_huge = Header::read_request(1, 1 << 20, 1).encode();
    read_huge[8..16].copy_from_slice(&over.to_le_bytes());
    let mut data_huge = Header::read_data(1, 1).encode();
    data_huge[8..16].copy_from_slice(&over.to_le_bytes());
    for (opts, bytes, reason) in [
        (
            TcpOptions::new().max_message(1000),
            Header::message(1001).encode(),
            "message frame of 1001 bytes exceeds the 1000-byte limit".to_string(),
        ),
        (
            TcpOptions::new(),
            register_huge,
            format!("register frame of {over} bytes exceeds the {MAX_RMA}-byte limit"),
        ),
        (
            TcpOptions::new(),
            write_huge,
            format!("write frame of {over} bytes exceeds the {MAX_RMA}-byte limit"),
        ),
        (
            TcpOptions::new(),
            read_huge,
            format!("read-request frame of {over} bytes exceeds the {MAX_RMA}-byte limit"),
        ),
        (
            TcpOptions::new(),
            data_huge,
            format!("read-data frame of {over} bytes exceeds the {MAX_RMA}-byte limit"),
        ),
    ] {
        let (ep, mut raw) = RawPeer::pair_with(opts);
        let peer = ep.peer_addr().to_string();
        raw.send_bytes(&bytes);
        let mut buf = Vec::new();
        let e = expect_kind(ep.recv_timeout(&mut buf, Some(T)), ErrorKind::Protocol);
        assert_eq!(
            e.to_string(),
            format!("protocol error from {peer}: {reason}")
        );
    }
    // Within the limits, a range no window covers is refused by the window table (a
    // fault report), never read from or written to: 1 TiB asked of a 4 KiB window.
    let (ep, mut raw) = RawPeer::pair_with(TcpOptions::new());
    let w = ep.register(PAGE, Access::READ_WRITE).unwrap();
    let reg = raw.recv_header();
    assert_eq!((reg.kind, reg.offset), (Kind::Register, w.offset()));
    raw.send(&Header::read_request(1, w.offset(), MAX_RMA as usize), &[]);
    let f = raw.recv_header();
    assert_eq!(f.kind, Kind::Fault);
    assert_eq!(
        (f.seq, f.aux, f.len),
        (1, FaultCode::OutOfWindow as u32, MAX_RMA)
    );
}

// ---- peer death ------------------------------------------------------------------------

#[test]
fn peer_drop_wakes_every_blocked_call_with_peer_gone() {
    let (x, y) = pair();
    let wx = x.register(PAGE, Access::READ_WRITE).unwrap();
    let wy = y.register(PAGE, Access::READ_WRITE).unwrap();
    send_u64(&y, wy.offset());
    let ry = recv_u64(&x);
    let _ = wx;
    // The peer stops answering: its reader keeps running, but we drop it while x waits.
    let gone_at = std::thread::scope(|s| {
        let recv = s.spawn(|| {
            let mut buf = Vec::new();
            let r = x.recv(&mut buf);
            (r.map(|_| ()), Instant::now())
        });
        std::thread::sleep(Duration::from_millis(100));
        let dropped = Instant::now();
        drop(y);
        let (r, at) = recv.join().unwrap();
        let e = expect_kind(r, ErrorKind::PeerGone);
        assert!(e.to_string().contains("closed the connection"), "{e}");
        at.duration_since(dropped)
    });
    assert!(gone_at < Duration::from_secs(1), "{gone_at:?}");
    let mut buf = Vec::new();
    expect_kind(x.recv(&mut buf), ErrorKind::PeerGone);
    expect_kind(x.try_recv(&mut buf), ErrorKind::PeerGone);
    expect_kind(x.send(b"x"), ErrorKind::PeerGone);
    expect_kind(x.try_send(b"x"), ErrorKind::PeerGone);
    expect_kind(x.vwrite_to(&[1], ry, RmaFlags::SYNC), ErrorKind::PeerGone);
    expect_kind(
        x.vread_from(&mut [0], ry, RmaFlags::SYNC),
        ErrorKind::PeerGone,
    );
    expect_kind(x.fence_mark(), ErrorKind::PeerGone);
}

#[test]
fn messages_sent_before_a_close_are_still_delivered() {
    let (x, y) = pair();
    for i in 0..100u64 {
        send_u64(&y, i);
    }
    y.send(&pattern(4 << 20, 9)).unwrap();
    drop(y);
    for i in 0..100u64 {
        assert_eq!(recv_u64(&x), i);
    }
    let mut buf = Vec::new();
    x.recv_timeout(&mut buf, Some(T)).unwrap();
    assert!(buf == pattern(4 << 20, 9));
    expect_kind(x.recv_timeout(&mut buf, Some(T)), ErrorKind::PeerGone);
}

#[test]
fn blocked_read_and_fence_fail_when_the_peer_dies() {
    // A raw peer takes the request and then closes without answering.
    let (ep, mut raw) = RawPeer::pair_with(TcpOptions::default());
    raw.send(&Header::register(1 << 20, PAGE, Access::READ_WRITE), &[]);
    raw.send(&Header::message(0), &[]);
    let mut buf = Vec::new();
    ep.recv_timeout(&mut buf, Some(T)).unwrap();
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut dst = [0u8; 64];
            let r = ep.vread_from(&mut dst, 1 << 20, RmaFlags::SYNC);
            (r, Instant::now())
        });
        let h = raw.recv_header();
        assert_eq!(h.kind, Kind::ReadRequest);
        std::thread::sleep(Duration::from_millis(50));
        let closed = Instant::now();
        // Half a read-data frame, then the connection drops.
        raw.send_bytes(&Header::read_data(h.seq, 64).encode());
        raw.send_bytes(&[7; 10]);
        drop(raw);
        let (r, at) = reader.join().unwrap();
        let e = expect_kind(r, ErrorKind::PeerGone);
        assert!(at.duration_since(closed) < Duration::from_secs(1));
        assert!(e.to_string().contains("in the middle of"), "{e}");
    });
    expect_kind(ep.fence_wait(Mark(1)), ErrorKind::PeerGone);
}

/// The peer side of `peer_killed_by_sigkill_is_peer_gone`, run in a child process.
#[test]
#[ignore = "run by peer_killed_by_sigkill_is_peer_gone in a child process"]
fn child_peer_process() {
    let Ok(addr) = std::env::var("ACCIO_TCP_CHILD_CONNECT") else {
        return;
    };
    let ep = TcpEndpoint::connect(&addr.parse().unwrap(), T).unwrap();
    let w = ep.register(PAGE, Access::READ_WRITE).unwrap();
    send_u64(&ep, w.offset());
    // Wait to be killed.
    let mut buf = Vec::new();
    let _ = ep.recv(&mut buf);
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn peer_killed_by_sigkill_is_peer_gone() {
    let l = TcpListener::bind(&loopback()).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["child_peer_process", "--exact", "--ignored", "--nocapture"])
        .env("ACCIO_TCP_CHILD_CONNECT", l.local_addr().to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ep = l.accept_tcp(Some(Duration::from_secs(20))).unwrap();
    let roff = recv_u64(&ep);
    let (r, after) = std::thread::scope(|s| {
        let blocked = s.spawn(|| {
            let mut buf = Vec::new();
            let r = ep.recv(&mut buf);
            (r.map(|_| ()), Instant::now())
        });
        // Keep writes flowing too, so that a send meets the dead peer.
        std::thread::sleep(Duration::from_millis(100));
        let killed = Instant::now();
        child.kill().unwrap();
        child.wait().unwrap();
        let (r, at) = blocked.join().unwrap();
        (r, at.duration_since(killed))
    });
    expect_kind(r, ErrorKind::PeerGone);
    assert!(after < Duration::from_secs(1), "{after:?}");
    expect_kind(
        ep.vwrite_to(&[1; 8], roff, RmaFlags::ASYNC),
        ErrorKind::PeerGone,
    );
    expect_kind(ep.send(&[0; 1 << 20]), ErrorKind::PeerGone);
}
