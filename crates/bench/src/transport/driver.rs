//! The driver side of each scenario: what is timed, and how samples are formed.

use std::time::{Duration, Instant};

use accio::{Access, Endpoint, Error, Listener, Region, RmaFlags};

use super::os;
use super::plan::{count_for, Plan};
use super::proto::{Cmd, Reply};

/// How long the driver waits for a reply that follows a scenario's data flow. Generous: a
/// 64 MiB streaming pass over slow loopback takes well under this, and a dead peer is
/// noticed within a second anyway (`PeerGone`).
const REPLY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the driver waits for each of the peer's connections in the connect scenario.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(20);
/// Byte the RMA source is filled with; the peer checks it arrived.
const RMA_PATTERN: u8 = 0xa5;

/// Why a scenario failed.
#[derive(Debug)]
pub(crate) enum Fail {
    /// An endpoint call failed at the driver.
    Accio(Error),
    /// The peer answered [`Reply::Failed`].
    Peer { unsupported: bool, text: String },
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::Accio(e)
    }
}

/// The connection a backend is measured over.
pub(crate) struct Link<'a> {
    /// The control and data endpoint to the peer.
    pub ep: &'a dyn Endpoint,
    /// The listener the peer connected to (reused by the connect scenario).
    pub listener: &'a dyn Listener,
}

/// A page-aligned, pre-faulted buffer that is only ever touched by this process, used as
/// the source of sends (alignment keeps the backend's copies clear of 4 KiB aliasing).
pub(crate) struct SendBuf {
    region: Region,
}

impl SendBuf {
    pub(crate) fn new(len: usize, fill: u8) -> accio::Result<SendBuf> {
        let region = Region::anonymous(len)?;
        // SAFETY: a fresh private mapping of at least `len` bytes owned by `region`.
        unsafe { std::ptr::write_bytes(region.as_ptr(), fill, len) };
        Ok(SendBuf { region })
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is `len` bytes, private to this process, and never written
        // after construction, so a shared slice of it is sound for its lifetime.
        unsafe { std::slice::from_raw_parts(self.region.as_ptr(), self.region.len()) }
    }
}

fn send_cmd(ep: &dyn Endpoint, cmd: &Cmd) -> accio::Result<()> {
    let mut out = Vec::with_capacity(64);
    cmd.encode(&mut out);
    ep.send(&out)
}

/// Waits for the peer's reply; [`Reply::Failed`] becomes [`Fail::Peer`].
pub(crate) fn recv_reply(ep: &dyn Endpoint, timeout: Duration) -> Result<Reply, Fail> {
    let mut buf = Vec::with_capacity(256);
    ep.recv_timeout(&mut buf, Some(timeout))?;
    match Reply::decode(&buf).map_err(|r| Error::protocol(ep.peer_addr(), r))? {
        Reply::Failed { unsupported, text } => Err(Fail::Peer { unsupported, text }),
        r => Ok(r),
    }
}

fn unexpected(ep: &dyn Endpoint, r: &Reply, wanted: &str) -> Fail {
    Fail::Accio(Error::protocol(
        ep.peer_addr(),
        format!("expected reply {wanted}, got {}", r.name()),
    ))
}

fn expect_done(ep: &dyn Endpoint) -> Result<(), Fail> {
    match recv_reply(ep, REPLY_TIMEOUT)? {
        Reply::Done => Ok(()),
        r => Err(unexpected(ep, &r, "Done")),
    }
}

fn check_len(ep: &dyn Endpoint, got: usize, size: usize) -> accio::Result<()> {
    if got == size {
        Ok(())
    } else {
        Err(Error::protocol(
            ep.peer_addr(),
            format!("pong of {got} bytes, expected {size}"),
        ))
    }
}

/// Median of `v` (sorted in place); `v` must not be empty.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Samples of one figure and the iterations behind each (chosen by calibration).
#[derive(Debug)]
pub(crate) struct Measured {
    /// The samples, in the figure's unit.
    pub samples: Vec<f64>,
    /// Round trips per latency batch, or messages / writes per pass.
    pub per_sample: usize,
}

fn echo(ep: &dyn Endpoint, msg: &[u8], buf: &mut Vec<u8>, count: usize) -> Result<(), Fail> {
    send_cmd(
        ep,
        &Cmd::Echo {
            count: count as u64,
            size: msg.len() as u64,
        },
    )?;
    for _ in 0..count {
        ep.send(msg)?;
        check_len(ep, ep.recv(buf)?, msg.len())?;
    }
    expect_done(ep)
}

/// One-way latency in microseconds: ping-pong of `size`-byte messages. The warm-up's round
/// trip time sets how many round trips fill one batch. Every round trip is timed on its own
/// (one clock read per iteration); each sample is the median round trip of one batch,
/// halved. Medians rather than means because on a shared 2-core machine one preemption
/// costs milliseconds and would dominate a mean.
pub(crate) fn latency(link: &Link<'_>, size: usize, plan: &Plan) -> Result<Measured, Fail> {
    let ep = link.ep;
    let msg = SendBuf::new(size, 0x5a)?;
    let msg = &msg.as_slice()[..size];
    let mut buf = vec![0u8; size];
    let t = Instant::now();
    echo(ep, msg, &mut buf, plan.lat_warmup)?;
    // The warm-up includes two control messages; that only shortens the batches a little.
    let rtt = t.elapsed().as_secs_f64() / plan.lat_warmup as f64;
    let iters = count_for(plan.lat_batch_time, rtt, 1, plan.lat_max_iters);

    send_cmd(
        ep,
        &Cmd::Echo {
            count: (plan.lat_batches * iters) as u64,
            size: size as u64,
        },
    )?;
    let mut rtts = vec![0f64; iters];
    let mut samples = Vec::with_capacity(plan.lat_batches);
    for _ in 0..plan.lat_batches {
        let mut t = Instant::now();
        for slot in rtts.iter_mut() {
            ep.send(msg)?;
            let n = ep.recv(&mut buf)?;
            let now = Instant::now();
            *slot = (now - t).as_secs_f64();
            t = now;
            check_len(ep, n, size)?;
        }
        samples.push(median(&mut rtts) / 2.0 * 1e6);
    }
    expect_done(ep)?;
    Ok(Measured {
        samples,
        per_sample: iters,
    })
}

/// One streaming pass: `count` messages back to back; returns GB/s from the driver's first
/// send to the peer's last receive (both on `CLOCK_MONOTONIC`).
fn stream_pass(ep: &dyn Endpoint, msg: &[u8], count: usize) -> Result<f64, Fail> {
    send_cmd(
        ep,
        &Cmd::Sink {
            count: count as u64,
            size: msg.len() as u64,
        },
    )?;
    match recv_reply(ep, REPLY_TIMEOUT)? {
        Reply::Ready => {}
        r => return Err(unexpected(ep, &r, "Ready")),
    }
    let start = os::monotonic_ns();
    for _ in 0..count {
        ep.send(msg)?;
    }
    match recv_reply(ep, REPLY_TIMEOUT)? {
        // bytes / ns = GB/s; a pass too short to time reads as very fast rather than
        // dividing by zero.
        Reply::Stream { bytes, last_ns } => {
            Ok(bytes as f64 / last_ns.saturating_sub(start).max(1) as f64)
        }
        r => Err(unexpected(ep, &r, "Stream")),
    }
}

/// Streaming bandwidth in GB/s, counted at the receiver: the peer prepares its receive
/// buffer and says so; the driver then sends messages back to back (flow control is the
/// backend's own); a pass lasts from the driver's first send to the peer's last completed
/// receive (one clock for both processes), so bytes the backend had buffered are not
/// counted as instantly received. An untimed warm-up pass sets how many messages fill a
/// pass.
pub(crate) fn stream(link: &Link<'_>, size: usize, plan: &Plan) -> Result<Measured, Fail> {
    let ep = link.ep;
    let msg = SendBuf::new(size, 0x5a)?;
    let msg = &msg.as_slice()[..size];
    let warm = stream_pass(ep, msg, plan.warmup_msgs)?;
    let count = count_for(
        plan.pass_time,
        size as f64 / (warm * 1e9),
        plan.min_msgs,
        plan.max_msgs,
    );
    let samples = (0..plan.passes)
        .map(|_| stream_pass(ep, msg, count))
        .collect::<Result<_, _>>()?;
    Ok(Measured {
        samples,
        per_sample: count,
    })
}

/// RMA write bandwidth in GB/s: the peer registers a `size`-byte window; the driver
/// registers a local one, fills it once (pre-faulting it), and per pass issues `write_to`
/// (asynchronous) of the whole window, then `fence_mark` + `fence_wait`, timed until the
/// fence completes (data in the peer's window). An untimed warm-up pass sets how many
/// writes fill a pass. The peer checks that the data arrived.
pub(crate) fn rma_write(link: &Link<'_>, size: usize, plan: &Plan) -> Result<Measured, Fail> {
    let ep = link.ep;
    send_cmd(ep, &Cmd::Target { size: size as u64 })?;
    let remote = match recv_reply(ep, REPLY_TIMEOUT)? {
        Reply::Window { offset } => offset,
        r => return Err(unexpected(ep, &r, "Window")),
    };
    let local = ep.register(size, Access::READ)?;
    local.fill(RMA_PATTERN)?;
    let pass = |writes: usize| -> Result<f64, Fail> {
        let t = Instant::now();
        for _ in 0..writes {
            ep.write_to(local.offset(), size, remote, RmaFlags::ASYNC)?;
        }
        let mark = ep.fence_mark()?;
        ep.fence_wait(mark)?;
        Ok((writes * size) as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e9)
    };
    let warm = pass(plan.warmup_msgs)?;
    let writes = count_for(
        plan.pass_time,
        size as f64 / (warm * 1e9),
        plan.min_msgs,
        plan.max_msgs,
    );
    let samples = (0..plan.passes)
        .map(|_| pass(writes))
        .collect::<Result<_, _>>()?;
    send_cmd(
        ep,
        &Cmd::Release {
            offset: remote,
            size: size as u64,
            pattern: RMA_PATTERN,
        },
    )?;
    expect_done(ep)?;
    ep.unregister(local.offset())?;
    Ok(Measured {
        samples,
        per_sample: writes,
    })
}

/// Connection setup in microseconds, timed by the peer around `connect()` to the driver's
/// listener, one connection at a time; the driver accepts each and tells the peer over the
/// main endpoint before the next.
pub(crate) fn connect(link: &Link<'_>, count: usize) -> Result<Vec<f64>, Fail> {
    let ep = link.ep;
    send_cmd(
        ep,
        &Cmd::Connect {
            count: count as u64,
        },
    )?;
    let mut buf = Vec::new();
    for _ in 0..count {
        let deadline = Instant::now() + ACCEPT_TIMEOUT;
        // Short accepts, so that a peer whose connect() failed (it then exits) is noticed
        // on the main endpoint at once instead of after the whole accept timeout.
        let c = loop {
            match link.listener.accept(Some(Duration::from_millis(100))) {
                Ok(c) => break c,
                Err(e) if e.kind() == accio::ErrorKind::Timeout => {}
                Err(e) => return Err(e.into()),
            }
            if ep.try_recv(&mut buf)?.is_ready() {
                return Err(Fail::Accio(Error::protocol(
                    ep.peer_addr(),
                    "message on the main endpoint while connections were expected",
                )));
            }
            if Instant::now() >= deadline {
                return Err(Fail::Accio(Error::Timeout {
                    op: "accept",
                    resource: link.listener.local_addr().to_string(),
                    after: ACCEPT_TIMEOUT,
                }));
            }
        };
        ep.send(b"accepted")?;
        drop(c);
    }
    match recv_reply(ep, REPLY_TIMEOUT)? {
        Reply::Nanos(v) if v.len() == count => Ok(v.iter().map(|&ns| ns as f64 / 1e3).collect()),
        r => Err(unexpected(ep, &r, &format!("Nanos with {count} samples"))),
    }
}

/// Registration cost in microseconds: `register(size, READ_WRITE)` alone, and
/// `unregister()` plus dropping the last handle (which unmaps the memory). Every iteration
/// is cold — fresh memory each time, as an application registering a new buffer sees it —
/// so there is no warm-up. Runs at least `min` and at most `max` iterations, stopping after
/// `budget` once `min` are done.
pub(crate) fn register(
    ep: &dyn Endpoint,
    size: usize,
    min: usize,
    max: usize,
    budget: Duration,
) -> Result<(Vec<f64>, Vec<f64>), Fail> {
    let (mut reg, mut unreg) = (Vec::new(), Vec::new());
    let start = Instant::now();
    while reg.len() < max && (reg.len() < min || start.elapsed() < budget) {
        let t0 = Instant::now();
        let w = ep.register(size, Access::READ_WRITE)?;
        let t1 = Instant::now();
        ep.unregister(w.offset())?;
        drop(w);
        let t2 = Instant::now();
        reg.push((t1 - t0).as_secs_f64() * 1e6);
        unreg.push((t2 - t1).as_secs_f64() * 1e6);
    }
    Ok((reg, unreg))
}

/// Tells the peer to exit and waits for its acknowledgement.
pub(crate) fn quit(ep: &dyn Endpoint) -> Result<(), Fail> {
    send_cmd(ep, &Cmd::Quit)?;
    expect_done(ep)
}

/// Waits for the peer's [`Reply::Hello`] and returns its pid.
pub(crate) fn hello(ep: &dyn Endpoint, timeout: Duration) -> Result<u64, Fail> {
    match recv_reply(ep, timeout)? {
        Reply::Hello { version, pid } if version == super::proto::VERSION => Ok(pid),
        Reply::Hello { version, .. } => Err(Fail::Accio(Error::protocol(
            ep.peer_addr(),
            format!(
                "peer speaks bench protocol {version}, this driver {}; \
                 run the same accio build on both sides",
                super::proto::VERSION
            ),
        ))),
        r => Err(unexpected(ep, &r, "Hello")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
