//! The peer side: connect to the driver, then obey [`Cmd`]s until [`Cmd::Quit`].

use std::time::{Duration, Instant};

use accio::{Access, Endpoint, Error, ErrorKind, Window};

use super::os;
use super::proto::{Cmd, Reply, VERSION};

/// How long the peer waits for the driver's listener (the driver is already listening when
/// it starts the peer, so this only bounds a broken setup).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// What the peer process is told on its command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerConfig {
    /// The driver's listening address (`shm://...`, `tcp://127.0.0.1:PORT`).
    pub addr: String,
    /// CPU to pin to, if any.
    pub cpu: Option<usize>,
    /// The driver's pid: the peer refuses to run if its parent is not (or no longer) that
    /// process.
    pub parent: Option<u32>,
}

impl PeerConfig {
    /// The command-line arguments that carry this configuration: `--addr ADDR`, then
    /// `--cpu N` and `--parent PID` when set. The `accio` binary's hidden
    /// `__transport-peer` subcommand parses exactly these.
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec!["--addr".to_string(), self.addr.clone()];
        if let Some(c) = self.cpu {
            v.extend(["--cpu".to_string(), c.to_string()]);
        }
        if let Some(p) = self.parent {
            v.extend(["--parent".to_string(), p.to_string()]);
        }
        v
    }
}

/// Runs the peer process: dies with the driver, pins itself, connects to `cfg.addr`, and
/// serves commands until told to quit.
pub fn peer_main(cfg: &PeerConfig) -> accio::Result<()> {
    os::die_with_parent(cfg.parent)
        .map_err(|e| Error::io("prctl(PR_SET_PDEATHSIG)", "the peer process", e))?;
    if let Some(cpu) = cfg.cpu {
        os::pin_current_thread(cpu)
            .map_err(|e| Error::io("sched_setaffinity", format!("cpu {cpu}"), e))?;
    }
    let ep = accio::connect(&cfg.addr, CONNECT_TIMEOUT)?;
    let addr = cfg.addr.clone();
    serve(&*ep, &move || accio::connect(&addr, CONNECT_TIMEOUT))
}

fn reply(ep: &dyn Endpoint, r: &Reply, out: &mut Vec<u8>) -> accio::Result<()> {
    r.encode(out);
    ep.send(out)
}

fn expect_len(ep: &dyn Endpoint, what: &str, got: usize, size: u64) -> accio::Result<()> {
    if got as u64 == size {
        Ok(())
    } else {
        Err(Error::protocol(
            ep.peer_addr(),
            format!("{what} message of {got} bytes, expected {size}"),
        ))
    }
}

/// Makes `buf` able to hold `size` bytes with its pages already touched, so no sample pays
/// for first-touch faults (slow on VMs, `MACHINE_NOTES.md` trait 2).
fn prefault(buf: &mut Vec<u8>, size: u64) {
    buf.clear();
    buf.resize(size as usize, 0);
    buf.clear();
}

/// Serves the driver on `ep`: announces itself with [`Reply::Hello`], then executes commands.
/// `connect` opens a new connection to the driver's listener (for [`Cmd::Connect`]).
///
/// Errors during data flow end the peer (the driver then sees it die and says in which
/// scenario); a failed registration is reported to the driver and serving goes on.
pub fn serve(
    ep: &dyn Endpoint,
    connect: &dyn Fn() -> accio::Result<Box<dyn Endpoint>>,
) -> accio::Result<()> {
    let mut out = Vec::with_capacity(256);
    let mut msg = Vec::with_capacity(256);
    let mut data = Vec::new();
    let mut windows: Vec<Window> = Vec::new();
    reply(
        ep,
        &Reply::Hello {
            version: VERSION,
            pid: u64::from(std::process::id()),
        },
        &mut out,
    )?;
    loop {
        ep.recv(&mut msg)?;
        let cmd = Cmd::decode(&msg).map_err(|r| Error::protocol(ep.peer_addr(), r))?;
        let r = match cmd {
            Cmd::Echo { count, size } => {
                prefault(&mut data, size);
                for _ in 0..count {
                    let n = ep.recv(&mut data)?;
                    expect_len(ep, "ping", n, size)?;
                    ep.send(&data)?;
                }
                Reply::Done
            }
            Cmd::Sink { count, size } => sink(ep, &mut data, &mut out, count, size)?,
            Cmd::Target { size } => match ep.register(size as usize, Access::WRITE) {
                Ok(w) => {
                    let offset = w.offset();
                    windows.push(w);
                    Reply::Window { offset }
                }
                Err(e) => Reply::Failed {
                    unsupported: e.kind() == ErrorKind::Unsupported,
                    text: e.to_string(),
                },
            },
            Cmd::Release {
                offset,
                size,
                pattern,
            } => release(ep, &mut windows, offset, size, pattern)?,
            Cmd::Connect { count } => {
                let mut nanos = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    let t = Instant::now();
                    let c = connect()?;
                    nanos.push(t.elapsed().as_nanos() as u64);
                    // The driver's "accepted": only then is it safe to close without the
                    // driver's accept seeing a half-open connection.
                    ep.recv(&mut msg)?;
                    drop(c);
                }
                Reply::Nanos(nanos)
            }
            Cmd::Quit => {
                reply(ep, &Reply::Done, &mut out)?;
                return Ok(());
            }
        };
        reply(ep, &r, &mut out)?;
    }
}

/// Prepares the receive buffer, says so, receives `count` messages, and reports when the
/// last one had arrived.
fn sink(
    ep: &dyn Endpoint,
    data: &mut Vec<u8>,
    out: &mut Vec<u8>,
    count: u64,
    size: u64,
) -> accio::Result<Reply> {
    prefault(data, size);
    reply(ep, &Reply::Ready, out)?;
    for _ in 0..count {
        let n = ep.recv(data)?;
        expect_len(ep, "stream", n, size)?;
    }
    Ok(Reply::Stream {
        bytes: count * size,
        last_ns: os::monotonic_ns(),
    })
}

/// Checks the driver's RMA landed (first, middle and last byte) and unregisters the window.
fn release(
    ep: &dyn Endpoint,
    windows: &mut Vec<Window>,
    offset: u64,
    size: u64,
    pattern: u8,
) -> accio::Result<Reply> {
    let Some(i) = windows.iter().position(|w| w.offset() == offset) else {
        return Ok(Reply::Failed {
            unsupported: false,
            text: format!("no window at offset {offset:#x} to release"),
        });
    };
    let w = windows.swap_remove(i);
    let mut bad = None;
    if size > 0 {
        for at in [0, size / 2, size - 1] {
            let mut b = [0u8];
            w.read_at(at as usize, &mut b)?;
            if b[0] != pattern {
                bad = Some((at, b[0]));
                break;
            }
        }
    }
    ep.unregister(offset)?;
    Ok(match bad {
        None => Reply::Done,
        Some((at, got)) => Reply::Failed {
            unsupported: false,
            text: format!(
                "RMA data did not land: window {offset:#x} byte {at} is {got:#04x}, \
                 expected {pattern:#04x} after the fence completed"
            ),
        },
    })
}
