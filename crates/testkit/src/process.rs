//! Endpoints in two OS processes, and peer death.
//!
//! The parent (the test) listens and spawns `accio-conformance-peer SCENARIO ADDRESS` (see
//! [`crate::peer`]), accepts it and plays the other half. Peer-death tests `SIGKILL` the
//! child mid-transfer, measure how long the survivor takes to fail with `PeerGone`, and
//! then check that nothing of accio's shared memory outlives the two sides. They run
//! [`Isolation::Exclusive`]: the residue check reads this whole process's mappings.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use accio::{Access, Endpoint, ErrorKind, Listener, Progress, RmaFlags};

use crate::harness::{
    assert_no_residue, assert_window, expect_err, fill_window, guarded, ok, recv_u64s, send_u64s,
    with_timeout, ChildGuard, Isolation, Residue,
};
use crate::messages::{message_sizes, recv_stream, send_stream, PEER_GONE_WITHIN};
use crate::pattern;
use crate::peer::{self, CHECK, RMA_LEN, SEED_CHILD, SEED_CHILD_WINDOW, SEED_PARENT, SEED_STREAM};
use crate::Backend;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A listening parent with its connected child.
pub(crate) struct Peer {
    pub(crate) listener: Box<dyn Listener>,
    pub(crate) child: ChildGuard,
    pub(crate) ep: Box<dyn Endpoint>,
}

fn child_stderr(child: &mut std::process::Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// Listens, spawns the peer binary in `scenario`, and accepts it (failing with the child's
/// stderr if it exits first).
pub(crate) fn start_peer(b: &Backend, scenario: &str) -> Peer {
    let (listener, addr) = b.listen();
    let exe = b.peer_exe();
    let child = Command::new(&exe)
        .args([scenario, &addr])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", exe.display()));
    let mut child = ChildGuard(Some(child));
    let start = Instant::now();
    let ep = loop {
        match listener.accept(Some(Duration::from_millis(250))) {
            Ok(ep) => break ep,
            Err(e) if e.kind() == ErrorKind::Timeout => {
                let c = child.0.as_mut().unwrap();
                if let Some(status) = c.try_wait().unwrap() {
                    panic!(
                        "peer {scenario} exited ({status}) before connecting to {addr}: {}",
                        child_stderr(c)
                    );
                }
                assert!(
                    start.elapsed() < secs(15),
                    "peer {scenario} did not connect in 15 s"
                );
            }
            Err(e) => panic!("accept of peer {scenario} on {addr}: {e}"),
        }
    };
    Peer {
        listener,
        child,
        ep,
    }
}

/// Waits (at most 15 s) for the child to exit; returns its status and stderr.
pub(crate) fn finish(child: &mut ChildGuard) -> (ExitStatus, String) {
    let mut c = child.take();
    let start = Instant::now();
    loop {
        if let Some(status) = c.try_wait().unwrap() {
            let err = child_stderr(&mut c);
            return (status, err);
        }
        if start.elapsed() > secs(15) {
            let _ = c.kill();
            let _ = c.wait();
            panic!("peer did not exit within 15 s: {}", child_stderr(&mut c));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[track_caller]
fn assert_exit_ok(child: &mut ChildGuard, what: &str) {
    let (status, err) = finish(child);
    assert!(status.success(), "{what}: peer exited with {status}: {err}");
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our unreaped child.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// Kills `pid` with `SIGKILL` once `progress` reaches `needed` (unless `stop` is set
/// first); returns when it was killed.
fn kill_when(pid: u32, progress: &AtomicU64, needed: u64, stop: &AtomicBool) -> Option<Instant> {
    let start = Instant::now();
    while progress.load(Ordering::Acquire) < needed {
        if stop.load(Ordering::Acquire) || start.elapsed() > secs(20) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // Let the transfer run a little more so the kill lands mid-transfer.
    std::thread::sleep(Duration::from_millis(20));
    let at = Instant::now();
    signal(pid, libc::SIGKILL);
    Some(at)
}

/// Calls `step(n)` for n = 0, 1, 2, … until it fails, while a second thread sends `SIGKILL`
/// to `pid` once `after` steps have succeeded. Returns the first error, when it came, and
/// when the kill was sent (`None` if it never was).
fn until_killed(
    pid: u32,
    after: u64,
    mut step: impl FnMut(u64) -> Result<(), accio::Error>,
) -> (accio::Error, Instant, Option<Instant>) {
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let killer = s.spawn(|| kill_when(pid, &done, after, &stop));
        let mut n = 0u64;
        let (err, at) = loop {
            match step(n) {
                Ok(()) => {
                    n += 1;
                    done.store(n, Ordering::Release);
                }
                Err(e) => break (e, Instant::now()),
            }
        };
        stop.store(true, Ordering::Release);
        (err, at, killer.join().unwrap())
    })
}

/// Messages of 0 B..8 MiB through a peer process that echoes them.
pub fn two_processes_echo(b: &Backend) {
    let b = b.clone();
    guarded(
        "two_processes_echo",
        secs(60),
        Isolation::Shared,
        move || {
            let mut p = start_peer(&b, peer::ECHO);
            let sizes = message_sizes(0xEC40, 150, 8 << 20);
            let ep = &*p.ep;
            send_u64s(ep, &[sizes.len() as u64]);
            std::thread::scope(|s| {
                s.spawn(|| send_stream(ep, 0xEC, &sizes));
                recv_stream(ep, 0xEC, &sizes);
            });
            send_u64s(ep, &[0]);
            assert_exit_ok(&mut p.child, "echo");
        },
    );
}

/// RMA between processes: the parent writes the child's window and signals, the child
/// checks it, writes the parent's window and signals back; the parent reads the child's
/// window back.
pub fn two_processes_rma(b: &Backend) {
    let b = b.clone();
    guarded(
        "two_processes_rma",
        secs(60),
        Isolation::Shared,
        move || {
            let mut p = start_peer(&b, peer::RMA);
            let ep = &*p.ep;
            let [c_off, c_len] = recv_u64s(ep)[..] else {
                panic!("bad window message from the peer")
            };
            assert_eq!(c_len as usize, RMA_LEN);
            let mine = ok(ep.register(RMA_LEN, Access::READ_WRITE), "register");
            send_u64s(ep, &[mine.offset(), RMA_LEN as u64]);

            let src = ok(ep.register(RMA_LEN, Access::READ_WRITE), "register");
            fill_window(&src, SEED_PARENT);
            // Bytes 8.. in four async pieces (two write_to, two vwrite_to), then the signal.
            let cuts = [8, RMA_LEN / 4, RMA_LEN / 2, 3 * RMA_LEN / 4 + 5, RMA_LEN];
            for (k, c) in cuts.windows(2).enumerate() {
                let (at, n) = (c[0], c[1] - c[0]);
                if k % 2 == 0 {
                    ok(
                        ep.write_to(
                            src.offset() + at as u64,
                            n,
                            c_off + at as u64,
                            RmaFlags::ASYNC,
                        ),
                        "write_to",
                    );
                } else {
                    let piece = pattern::vec(n, SEED_PARENT, at as u64);
                    ok(
                        ep.vwrite_to(&piece, c_off + at as u64, RmaFlags::ASYNC),
                        "vwrite_to",
                    );
                }
            }
            ok(ep.fence_signal(None, Some((c_off, 1))), "fence_signal");

            ok(
                mine.wait_u64(0, 2, Some(secs(20))),
                "wait for the peer's signal",
            );
            let got = crate::harness::window_bytes(&mine, 8, RMA_LEN - 8);
            pattern::assert_matches(&got, SEED_CHILD, 8, "window written by the peer process");
            assert_eq!(recv_u64s(ep), [1], "peer's ok");
            ok(
                ep.read_from(src.offset() + 8, RMA_LEN - 8, c_off + 8, RmaFlags::SYNC),
                "read_from",
            );
            assert_window(
                &src,
                SEED_PARENT,
                Some((8, RMA_LEN - 8, SEED_CHILD_WINDOW, 8)),
                "read_from the peer process",
            );
            let mut v = vec![0u8; 12_345];
            ok(
                ep.vread_from(&mut v, c_off + 1001, RmaFlags::SYNC),
                "vread_from",
            );
            pattern::assert_matches(&v, SEED_CHILD_WINDOW, 1001, "vread_from the peer process");
            send_u64s(ep, &[0]);
            assert_exit_ok(&mut p.child, "rma");
        },
    );
}

fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the parenthesized command name.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// `cpu_free_rma` (where advertised), the strong form: RMA to a peer *process* stopped with
/// `SIGSTOP` completes, and the peer finds the data once it runs again.
pub fn cpu_free_rma_with_stopped_peer_process(b: &Backend) {
    let b = b.clone();
    guarded(
        "cpu_free_rma_with_stopped_peer_process",
        secs(60),
        Isolation::Shared,
        move || {
            let mut p = start_peer(&b, peer::WINDOW);
            let [w_off, w_len] = recv_u64s(&*p.ep)[..] else {
                panic!("bad window message from the peer")
            };
            if !p.ep.capabilities().cpu_free_rma {
                drop(p.ep);
                assert_exit_ok(&mut p.child, "window");
                return;
            }
            let len = w_len as usize;
            let ep: Arc<Box<dyn Endpoint>> = Arc::new(p.ep);
            let src = ok(ep.register(len, Access::READ_WRITE), "register");
            fill_window(&src, 0x5709);
            let back = ok(ep.register(len, Access::READ_WRITE), "register");

            let pid = p.child.id();
            signal(pid, libc::SIGSTOP);
            let t = Instant::now();
            while process_state(pid) != Some('T') {
                assert!(t.elapsed() < secs(5), "peer {pid} did not stop");
                std::thread::sleep(Duration::from_millis(1));
            }
            let (ep2, src2, back2) = (ep.clone(), src.clone(), back.clone());
            with_timeout(
                "RMA while the peer process is stopped",
                secs(5),
                move || {
                    ok(
                        ep2.write_to(src2.offset(), len, w_off, RmaFlags::SYNC),
                        "write_to SYNC to a stopped peer",
                    );
                    ok(
                        ep2.read_from(back2.offset(), len, w_off, RmaFlags::SYNC),
                        "read_from a stopped peer",
                    );
                    let m = ok(ep2.fence_mark(), "fence_mark");
                    ok(ep2.fence_wait(m), "fence_wait with the peer stopped");
                },
            );
            assert_eq!(
                process_state(pid),
                Some('T'),
                "the peer ran during the test"
            );
            assert_window(&back, 0x5709, None, "read back from a stopped peer");
            signal(pid, libc::SIGCONT);

            send_u64s(&**ep, &[CHECK, 0x5709]);
            assert_eq!(
                recv_u64s(&**ep),
                [1],
                "peer's check of the data written while it was stopped"
            );
            drop(ep);
            assert_exit_ok(&mut p.child, "window");
        },
    );
}

/// Asserts that every later call on `ep` fails with `PeerGone`.
fn later_calls_fail(ep: &dyn Endpoint, what: &str) {
    let mut buf = Vec::new();
    let gone = ErrorKind::PeerGone;
    expect_err(ep.recv(&mut buf), gone, &format!("{what}: recv"));
    expect_err(
        ep.recv_timeout(&mut buf, Some(secs(1))),
        gone,
        &format!("{what}: recv_timeout"),
    );
    expect_err(ep.try_recv(&mut buf), gone, &format!("{what}: try_recv"));
    expect_err(ep.send(b"late"), gone, &format!("{what}: send"));
    expect_err(ep.try_send(b"late"), gone, &format!("{what}: try_send"));
}

/// Checks the measured delay and error of a peer-death test.
#[track_caller]
fn assert_gone_in_time(
    err: accio::Error,
    err_at: Instant,
    killed_at: Option<Instant>,
    child: &mut ChildGuard,
    what: &str,
) {
    let Some(killed_at) = killed_at else {
        let (status, stderr) = finish(child);
        panic!(
            "{what}: the call failed before the peer was killed: {:?}: {err} (peer: {status}, \
             stderr: {stderr:?})",
            err.kind()
        )
    };
    assert_eq!(
        err.kind(),
        ErrorKind::PeerGone,
        "{what}: after SIGKILL of the peer: {err}"
    );
    let after = err_at.saturating_duration_since(killed_at);
    eprintln!("{what}: PeerGone {after:?} after SIGKILL: {err}");
    assert!(
        after <= PEER_GONE_WITHIN,
        "{what}: PeerGone came {after:?} after SIGKILL of the peer; the contract says 1 s ({err})"
    );
}

/// `SIGKILL` of an idle peer while the survivor only polls with `try_recv` and never
/// blocks: polling must notice the death too, with `PeerGone` within 1 s, instead of
/// reporting `WouldBlock` forever. Regression: shm's `try_recv` noticed a peer that closed,
/// but never one that was killed while its ring was empty.
pub fn peer_death_seen_by_polling(b: &Backend) {
    let b = b.clone();
    guarded(
        "peer_death_seen_by_polling",
        secs(30),
        Isolation::Exclusive,
        move || {
            let before = Residue::now();
            let Peer {
                listener,
                mut child,
                ep,
            } = start_peer(&b, peer::ECHO);
            // One echoed message proves the peer is up; it then idles waiting for more.
            let sizes = [64usize];
            send_u64s(&*ep, &[sizes.len() as u64]);
            send_stream(&*ep, 0x1D, &sizes);
            recv_stream(&*ep, 0x1D, &sizes);
            std::thread::sleep(Duration::from_millis(20));
            let killed_at = Instant::now();
            signal(child.id(), libc::SIGKILL);
            let mut buf = Vec::new();
            let (err, err_at) = loop {
                match ep.try_recv(&mut buf) {
                    Ok(Progress::WouldBlock) => {
                        assert!(
                            killed_at.elapsed() < 3 * PEER_GONE_WITHIN,
                            "try_recv still reports WouldBlock {:?} after SIGKILL of the peer",
                            killed_at.elapsed()
                        );
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    Ok(Progress::Ready(n)) => panic!("a {n}-byte message from a killed idle peer"),
                    Err(e) => break (e, Instant::now()),
                }
            };
            assert_gone_in_time(
                err,
                err_at,
                Some(killed_at),
                &mut child,
                "try_recv polling an idle peer",
            );
            later_calls_fail(&*ep, "after the idle peer was killed");
            reap_killed(&mut child);
            drop((ep, listener));
            assert_no_residue(
                &before,
                Duration::from_millis(500),
                "peer_death_seen_by_polling",
            );
        },
    );
}

/// Reaps the killed child and checks it died of `SIGKILL`.
fn reap_killed(child: &mut ChildGuard) {
    let (status, err) = finish(child);
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "peer status {status}: {err}"
    );
}

/// `SIGKILL` of a peer that streams 4 MiB messages: the survivor's blocked `recv` fails with
/// `PeerGone` within 1 s (messages delivered before that are intact), later calls fail the
/// same way, and no shared memory is left once both sides are gone.
pub fn peer_death_during_recv(b: &Backend) {
    let b = b.clone();
    guarded(
        "peer_death_during_recv",
        secs(60),
        Isolation::Exclusive,
        move || {
            let before = Residue::now();
            let Peer {
                listener,
                mut child,
                ep,
            } = start_peer(&b, peer::STREAM_SEND);
            let mut buf = Vec::new();
            let (err, err_at, killed_at) = until_killed(child.id(), 3, |seq| {
                ep.recv(&mut buf)?;
                if let Err(e) = pattern::check_message(&buf, SEED_STREAM, seq, peer::STREAM_LEN) {
                    panic!("stream from the peer, message {seq}: {e}");
                }
                Ok(())
            });
            assert_gone_in_time(
                err,
                err_at,
                killed_at,
                &mut child,
                "recv while the peer streams",
            );
            later_calls_fail(&*ep, "after the peer was killed");
            reap_killed(&mut child);
            drop((ep, listener));
            assert_no_residue(
                &before,
                Duration::from_millis(500),
                "peer_death_during_recv",
            );
        },
    );
}

/// `SIGKILL` of a peer that receives 4 MiB messages: the survivor's `send` loop fails with
/// `PeerGone` within 1 s; later calls fail; no shared memory is left behind.
pub fn peer_death_during_send(b: &Backend) {
    let b = b.clone();
    guarded(
        "peer_death_during_send",
        secs(60),
        Isolation::Exclusive,
        move || {
            let before = Residue::now();
            let Peer {
                listener,
                mut child,
                ep,
            } = start_peer(&b, peer::STREAM_RECV);
            let (err, err_at, killed_at) = until_killed(child.id(), 3, |seq| {
                ep.send(&pattern::message(SEED_STREAM, seq, peer::STREAM_LEN))
            });
            assert_gone_in_time(
                err,
                err_at,
                killed_at,
                &mut child,
                "send while the peer receives",
            );
            later_calls_fail(&*ep, "after the peer was killed");
            reap_killed(&mut child);
            drop((ep, listener));
            assert_no_residue(
                &before,
                Duration::from_millis(500),
                "peer_death_during_send",
            );
        },
    );
}

/// `SIGKILL` of a peer whose window the survivor reads and writes in a loop: an RMA call
/// fails with `PeerGone` within 1 s; later RMA and message calls fail; no shared memory is
/// left behind (the survivor had the dead peer's window mapped, for `shm`).
pub fn peer_death_during_rma(b: &Backend) {
    let b = b.clone();
    guarded(
        "peer_death_during_rma",
        secs(60),
        Isolation::Exclusive,
        move || {
            let before = Residue::now();
            let Peer {
                listener,
                mut child,
                ep,
            } = start_peer(&b, peer::WINDOW);
            let [w_off, w_len] = recv_u64s(&*ep)[..] else {
                panic!("bad window message from the peer")
            };
            const CHUNK: usize = 1 << 20;
            let half = w_len as usize / 2;
            let lw = ok(ep.register(CHUNK, Access::READ_WRITE), "register");
            let during = Residue::now().new_since(&before);
            eprintln!(
                "peer_death_during_rma: while connected: {} accio mappings, {} /dev/shm entries",
                during.mappings.len(),
                during.dev_shm.len()
            );
            // Where the backend can map peer windows, the mapping must stay valid memory
            // after the peer's death ("no memory error follows a peer's death").
            let mapped = if ep.capabilities().map_remote {
                Some(ok(ep.map_remote(w_off, CHUNK), "map_remote"))
            } else {
                None
            };
            let (err, err_at, killed_at) = until_killed(child.id(), 8, |k| {
                let at = (k as usize * CHUNK) % half;
                if k.is_multiple_of(2) {
                    ep.read_from(lw.offset(), CHUNK, w_off + at as u64, RmaFlags::SYNC)?;
                    let got = crate::harness::window_bytes(&lw, 0, CHUNK);
                    pattern::assert_matches(
                        &got,
                        SEED_CHILD_WINDOW,
                        at as u64,
                        "read_from the peer",
                    );
                    Ok(())
                } else {
                    ep.write_to(
                        lw.offset(),
                        CHUNK,
                        w_off + (half + at) as u64,
                        RmaFlags::SYNC,
                    )
                }
            });
            assert_gone_in_time(
                err,
                err_at,
                killed_at,
                &mut child,
                "RMA loop on the peer's window",
            );
            let gone = ErrorKind::PeerGone;
            expect_err(
                ep.write_to(lw.offset(), 8, w_off, RmaFlags::SYNC),
                gone,
                "write_to after PeerGone",
            );
            expect_err(
                ep.read_from(lw.offset(), 8, w_off, RmaFlags::SYNC),
                gone,
                "read_from after PeerGone",
            );
            let mut v = [0u8; 8];
            expect_err(
                ep.vread_from(&mut v, w_off, RmaFlags::SYNC),
                gone,
                "vread_from after PeerGone",
            );
            expect_err(
                ep.vwrite_to(&v, w_off, RmaFlags::SYNC),
                gone,
                "vwrite_to after PeerGone",
            );
            later_calls_fail(&*ep, "after the peer was killed");
            reap_killed(&mut child);
            if let Some(m) = &mapped {
                let mut got = vec![0u8; CHUNK];
                ok(
                    m.read_at(0, &mut got),
                    "read through a mapping of a dead peer's window",
                );
                pattern::assert_matches(
                    &got,
                    SEED_CHILD_WINDOW,
                    0,
                    "mapping of a dead peer's window",
                );
            }
            drop((mapped, lw, ep, listener));
            assert_no_residue(&before, Duration::from_millis(500), "peer_death_during_rma");
        },
    );
}
