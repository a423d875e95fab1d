//! The other process of the two-process tests, run as
//! `accio-conformance-peer SCENARIO ADDRESS`: it connects to ADDRESS and plays SCENARIO.
//!
//! Exit status: 0 when the scenario ran to its end (or the parent went away where the
//! scenario expects it), [`EXIT_CHECK`] when data did not match, [`EXIT_ACCIO`] when an
//! accio call failed, [`EXIT_USAGE`] for bad arguments. The reason goes to stderr.

use std::time::Duration;

use accio::{Access, Endpoint, Error, ErrorKind, RmaFlags};

use crate::pattern;

/// Echo `n` messages back (the first message holds `n`), then wait for one more.
pub const ECHO: &str = "echo";
/// Register a window, let the parent fill it and signal, check it, write into the parent's
/// window and signal back.
pub const RMA: &str = "rma";
/// Send [`STREAM_LEN`]-byte stream messages until the parent is gone.
pub const STREAM_SEND: &str = "stream-send";
/// Receive and check stream messages until the parent is gone.
pub const STREAM_RECV: &str = "stream-recv";
/// Register a [`WINDOW_LEN`]-byte window filled with [`SEED_CHILD_WINDOW`], then serve
/// `[CHECK, seed]` requests (verify the whole window holds stream `seed`) until the parent
/// is gone.
pub const WINDOW: &str = "window";

/// Register a [`EXIT_WINDOW_LEN`]-byte window, send `[offset, len]`, then receive until
/// the message `[EXIT_NOW]` and exit at once, without closing the endpoint (as a process
/// that calls `exit` or crashes does): only the operating system's cleanup tells the parent.
pub const EXIT: &str = "exit";

/// Every scenario.
pub const SCENARIOS: &[&str] = &[ECHO, RMA, STREAM_SEND, STREAM_RECV, WINDOW, EXIT];

/// Data was wrong.
pub const EXIT_CHECK: i32 = 3;
/// An accio call failed.
pub const EXIT_ACCIO: i32 = 4;
/// Bad command line.
pub const EXIT_USAGE: i32 = 2;

/// Stream the parent writes into the child's window (`rma`).
pub const SEED_PARENT: u64 = 0x7061_7265_6e74;
/// Stream the child writes into the parent's window (`rma`).
pub const SEED_CHILD: u64 = 0x0063_6869_6c64;
/// Stream the child's own window holds (`rma` after its check, `window` from the start).
pub const SEED_CHILD_WINDOW: u64 = 0x7769_6e64_6f77;
/// Message stream of `stream-send` / `stream-recv`.
pub const SEED_STREAM: u64 = 0x7374_7265_616d;
/// Length of each stream message.
pub const STREAM_LEN: usize = 4 << 20;
/// Length of the `rma` windows (odd on purpose).
pub const RMA_LEN: usize = (8 << 20) + 24 + 3;
/// Length of the `window` window.
pub const WINDOW_LEN: usize = 16 << 20;
/// Request code of `window`: check the window against a stream.
pub const CHECK: u64 = 0xc4ec;
/// Length of the `exit` window.
pub const EXIT_WINDOW_LEN: usize = 4096;
/// Request code of `exit`: exit now without closing the endpoint.
pub const EXIT_NOW: u64 = 0xe817;

enum Failure {
    Check(String),
    Accio(&'static str, Error),
}

type Outcome = Result<(), Failure>;

fn at<T>(what: &'static str, r: accio::Result<T>) -> Result<T, Failure> {
    r.map_err(|e| Failure::Accio(what, e))
}

fn words(buf: &[u8]) -> Vec<u64> {
    buf.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn send_words(ep: &dyn Endpoint, w: &[u64]) -> Outcome {
    let msg: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    at("send", ep.send(&msg))
}

fn recv_words(ep: &dyn Endpoint) -> Result<Vec<u64>, Failure> {
    let mut buf = Vec::new();
    at("recv", ep.recv(&mut buf))?;
    Ok(words(&buf))
}

/// Runs the peer with its command-line arguments (without the program name); returns the
/// exit status.
pub fn main_with_args(args: &[String]) -> i32 {
    let [scenario, addr] = args else {
        eprintln!(
            "usage: accio-conformance-peer SCENARIO ADDRESS  (scenarios: {})",
            SCENARIOS.join(", ")
        );
        return EXIT_USAGE;
    };
    if !SCENARIOS.contains(&scenario.as_str()) {
        eprintln!("accio-conformance-peer: unknown scenario {scenario:?}");
        return EXIT_USAGE;
    }
    let ep = match accio::connect(addr, Duration::from_secs(10)) {
        Ok(ep) => ep,
        Err(e) => {
            eprintln!("accio-conformance-peer: connect to {addr}: {e}");
            return EXIT_ACCIO;
        }
    };
    let ep = &*ep;
    let outcome = match scenario.as_str() {
        ECHO => echo(ep),
        RMA => rma(ep),
        STREAM_SEND => stream_send(ep),
        STREAM_RECV => stream_recv(ep),
        EXIT => exit_unclosed(ep),
        _ => window(ep),
    };
    match outcome {
        Ok(()) => 0,
        Err(Failure::Check(why)) => {
            eprintln!("accio-conformance-peer {scenario}: {why}");
            EXIT_CHECK
        }
        Err(Failure::Accio(what, e)) => {
            eprintln!("accio-conformance-peer {scenario}: {what}: {e}");
            EXIT_ACCIO
        }
    }
}

fn echo(ep: &dyn Endpoint) -> Outcome {
    let n = match recv_words(ep)?[..] {
        [n] => n,
        ref other => return Err(Failure::Check(format!("bad count message {other:?}"))),
    };
    let mut buf = Vec::new();
    for _ in 0..n {
        at("recv", ep.recv(&mut buf))?;
        at("send", ep.send(&buf))?;
    }
    recv_words(ep).map(drop)
}

fn rma(ep: &dyn Endpoint) -> Outcome {
    let w = at("register", ep.register(RMA_LEN, Access::READ_WRITE))?;
    send_words(ep, &[w.offset(), w.len() as u64])?;
    let (p_off, p_len) = match recv_words(ep)?[..] {
        [o, l] => (o, l as usize),
        ref other => return Err(Failure::Check(format!("bad window message {other:?}"))),
    };
    at(
        "wait for the parent's signal",
        w.wait_u64(0, 1, Some(Duration::from_secs(20))),
    )?;
    let mut got = vec![0u8; RMA_LEN - 8];
    at("read_at", w.read_at(8, &mut got))?;
    pattern::check(&got, SEED_PARENT, 8)
        .map_err(|m| Failure::Check(format!("window written by the parent: {m}")))?;
    at(
        "write_at",
        w.write_at(8, &pattern::vec(RMA_LEN - 8, SEED_CHILD_WINDOW, 8)),
    )?;
    let src = pattern::vec(p_len - 8, SEED_CHILD, 8);
    at("vwrite_to", ep.vwrite_to(&src, p_off + 8, RmaFlags::ASYNC))?;
    at("fence_signal", ep.fence_signal(None, Some((p_off, 2))))?;
    send_words(ep, &[1])?;
    recv_words(ep).map(drop)
}

fn stream_send(ep: &dyn Endpoint) -> Outcome {
    for seq in 0.. {
        match ep.send(&pattern::message(SEED_STREAM, seq, STREAM_LEN)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::PeerGone => return Ok(()),
            Err(e) => return Err(Failure::Accio("send", e)),
        }
    }
    Ok(())
}

fn stream_recv(ep: &dyn Endpoint) -> Outcome {
    let mut buf = Vec::new();
    for seq in 0.. {
        match ep.recv(&mut buf) {
            Ok(_) => pattern::check_message(&buf, SEED_STREAM, seq, STREAM_LEN)
                .map_err(Failure::Check)?,
            Err(e) if e.kind() == ErrorKind::PeerGone => return Ok(()),
            Err(e) => return Err(Failure::Accio("recv", e)),
        }
    }
    Ok(())
}

fn window(ep: &dyn Endpoint) -> Outcome {
    let w = at("register", ep.register(WINDOW_LEN, Access::READ_WRITE))?;
    at(
        "write_at",
        w.write_at(0, &pattern::vec(WINDOW_LEN, SEED_CHILD_WINDOW, 0)),
    )?;
    send_words(ep, &[w.offset(), w.len() as u64])?;
    let mut buf = Vec::new();
    loop {
        match ep.recv(&mut buf) {
            Ok(_) => match words(&buf)[..] {
                [CHECK, seed] => {
                    let mut got = vec![0u8; WINDOW_LEN];
                    at("read_at", w.read_at(0, &mut got))?;
                    pattern::check(&got, seed, 0)
                        .map_err(|m| Failure::Check(format!("window: {m}")))?;
                    send_words(ep, &[1])?;
                }
                ref other => return Err(Failure::Check(format!("bad request {other:?}"))),
            },
            Err(e) if e.kind() == ErrorKind::PeerGone => return Ok(()),
            Err(e) => return Err(Failure::Accio("recv", e)),
        }
    }
}

fn exit_unclosed(ep: &dyn Endpoint) -> Outcome {
    let w = at("register", ep.register(EXIT_WINDOW_LEN, Access::READ_WRITE))?;
    send_words(ep, &[w.offset(), w.len() as u64])?;
    loop {
        if recv_words(ep)? == [EXIT_NOW] {
            // `exit` runs no destructor of this stack: the endpoint is never closed.
            std::process::exit(0);
        }
    }
}
