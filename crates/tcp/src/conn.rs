//! Setting up connections: [`TcpListener`], `connect`, and the greeting both sides
//! exchange before any frame.

use std::fmt;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use accio_core::{Addr, Endpoint, Error, Listener, Result};

use crate::endpoint::{tcp_addr, TcpEndpoint};
use crate::frame::{FrameError, Hello, HELLO_LEN, MAGIC};
use crate::options::TcpOptions;
use crate::sys;

fn bad(addr: &Addr, reason: impl Into<String>) -> Error {
    Error::BadAddress {
        addr: addr.to_string(),
        reason: reason.into(),
    }
}

/// Resolves a `tcp://HOST:PORT` address with the system resolver.
fn resolve(addr: &Addr) -> Result<Vec<SocketAddr>> {
    let Addr::Tcp { host, port } = addr else {
        return Err(bad(addr, "the tcp backend needs a tcp://HOST:PORT address"));
    };
    let addrs: Vec<SocketAddr> = (host.as_str(), *port)
        .to_socket_addrs()
        .map_err(|e| bad(addr, format!("cannot resolve host {host:?}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(bad(addr, format!("host {host:?} resolves to no address")));
    }
    Ok(addrs)
}

/// What the greeting exchange reports on failure.
enum Side {
    /// `connect`: a silent peer is a timeout of the connect call.
    Connect { addr: String, timeout: Duration },
    /// `accept`: a silent peer is a protocol error of that connection.
    Accept,
}

/// Exchanges greetings: sends ours, then reads and checks the peer's, by `deadline`.
fn handshake(
    stream: &TcpStream,
    peer: &Addr,
    deadline: Instant,
    opts: &TcpOptions,
    side: Side,
) -> Result<Hello> {
    let too_late = || match &side {
        Side::Connect { addr, timeout } => Error::Timeout {
            op: "connect",
            resource: addr.clone(),
            after: *timeout,
        },
        Side::Accept => Error::protocol(
            peer,
            format!(
                "no accio greeting within {:?} of connecting",
                opts.handshake_timeout
            ),
        ),
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(too_late());
    }
    let io = |op, e| Error::io(op, peer.to_string(), e);
    stream
        .set_write_timeout(Some(left))
        .and_then(|_| stream.set_read_timeout(Some(left)))
        .map_err(|e| io("setsockopt", e))?;
    let hello = Hello {
        max_message: opts.max_message as u64,
        recv_window: opts.window(),
    };
    let mut s = stream;
    let mut theirs = [0u8; HELLO_LEN];
    // MSG_NOSIGNAL: a peer that already closed is an error, not SIGPIPE.
    // The magic first, so that a stranger's short banner is named as such at once.
    let exchanged = sys::send_all(stream.as_raw_fd(), &hello.encode())
        .and_then(|_| s.read_exact(&mut theirs[..MAGIC.len()]))
        .and_then(|_| match Hello::decode(&theirs[..MAGIC.len()]) {
            Err(e @ FrameError::Magic(_)) => Err(io::Error::other(e)),
            _ => s.read_exact(&mut theirs[MAGIC.len()..]),
        });
    if let Err(e) = exchanged {
        return Err(match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => too_late(),
            io::ErrorKind::UnexpectedEof => Error::protocol(
                peer,
                "the peer closed the connection during the accio greeting (not an accio tcp endpoint?)",
            ),
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => Error::protocol(
                peer,
                "the peer reset the connection during the accio greeting (not an accio tcp endpoint?)",
            ),
                                    _ => match e.get_ref().and_then(|i| i.downcast_ref::<FrameError>()) {
                Some(fe) => Error::protocol(peer, fe.to_string()),
                None => io("handshake", e),
            },
        });
    }
    let hello = Hello::decode(&theirs).map_err(|e| Error::protocol(peer, e.to_string()))?;
    stream
        .set_write_timeout(None)
        .and_then(|_| stream.set_read_timeout(None))
        .map_err(|e| io("setsockopt", e))?;
    Ok(hello)
}

/// See [`TcpEndpoint::connect_with`].
pub(crate) fn connect(addr: &Addr, timeout: Duration, opts: TcpOptions) -> Result<TcpEndpoint> {
    let deadline = Instant::now() + timeout;
    let timed_out = || Error::Timeout {
        op: "connect",
        resource: addr.to_string(),
        after: timeout,
    };
    if matches!(addr, Addr::Tcp { port: 0, .. }) {
        return Err(bad(
            addr,
            "port 0 cannot be connected to (it only asks a listener for an ephemeral port)",
        ));
    }
    let mut last = None;
    let mut stream = None;
    for sa in resolve(addr)? {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&sa, left) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some((sa, e)),
        }
    }
    let Some(stream) = stream else {
        return Err(match last {
            None => timed_out(),
            Some((sa, e)) => match e.kind() {
                io::ErrorKind::ConnectionRefused => bad(
                    addr,
                    format!("connection to {sa} refused (nothing listens there)"),
                ),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => timed_out(),
                io::ErrorKind::HostUnreachable
                | io::ErrorKind::NetworkUnreachable
                | io::ErrorKind::AddrNotAvailable => bad(addr, format!("{sa} is unreachable: {e}")),
                _ => Error::io("connect", addr.to_string(), e),
            },
        });
    };
    stream
        .set_nodelay(true)
        .map_err(|e| Error::io("setsockopt TCP_NODELAY", addr.to_string(), e))?;
    let peer = stream
        .peer_addr()
        .map(tcp_addr)
        .unwrap_or_else(|_| addr.clone());
    let side = Side::Connect {
        addr: addr.to_string(),
        timeout,
    };
    let hello = handshake(&stream, &peer, deadline, &opts, side)?;
    TcpEndpoint::start(stream, opts, hello)
}

/// A bound TCP address accepting accio connections.
///
/// It binds exactly the host given (`tcp://127.0.0.1:0` listens on loopback only); port 0
/// picks an ephemeral port, reported by [`Listener::local_addr`].
pub struct TcpListener {
    inner: std::net::TcpListener,
    local: Addr,
    opts: TcpOptions,
    /// Connections accepted from the backlog whose greeting has not fully arrived: a
    /// client that connects and stays silent waits here, not in front of the others.
    pending: std::sync::Mutex<Vec<Pending>>,
}

/// An accepted connection waiting for its greeting.
struct Pending {
    stream: TcpStream,
    peer: Addr,
    deadline: Instant,
}

/// How far a pending connection's greeting has come.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Greeting {
    /// Nothing has arrived yet.
    Nothing,
    /// Part of it arrived: its socket stays readable, so it is looked at again on a short
    /// tick instead of polled (which would return at once, and spin).
    Partial,
    /// All of it arrived, or the peer closed or failed, or sent something else (the
    /// handshake then reports why): it can be read without waiting.
    Ready,
}

/// How often connections with a partial greeting are looked at again.
const PARTIAL_GREETING_TICK: Duration = Duration::from_millis(5);

impl Pending {
    fn greeting(&self) -> Greeting {
        let mut buf = [0u8; HELLO_LEN];
        // SAFETY: `buf` is valid for HELLO_LEN bytes; MSG_PEEK leaves the data queued.
        let n = unsafe {
            libc::recv(
                self.stream.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                HELLO_LEN,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Greeting::Nothing,
                _ => Greeting::Ready,
            };
        }
        let n = n as usize;
        let m = n.min(MAGIC.len());
        if n == 0 || n >= HELLO_LEN || buf[..m] != MAGIC[..m] {
            Greeting::Ready
        } else {
            Greeting::Partial
        }
    }
}

impl fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpListener")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl TcpListener {
    /// Binds `addr` (`tcp://HOST:PORT`) with default options.
    ///
    /// Errors: [`Error::AddrInUse`] if another socket listens there,
    /// [`Error::BadAddress`] if the host cannot be resolved or is not an address of this
    /// machine.
    pub fn bind(addr: &Addr) -> Result<TcpListener> {
        Self::bind_with(addr, TcpOptions::default())
    }

    /// [`TcpListener::bind`] with options for every endpoint it accepts.
    pub fn bind_with(addr: &Addr, opts: TcpOptions) -> Result<TcpListener> {
        let addrs = resolve(addr)?;
        let inner = std::net::TcpListener::bind(&addrs[..]).map_err(|e| match e.kind() {
            io::ErrorKind::AddrInUse => Error::AddrInUse {
                addr: addr.to_string(),
            },
            io::ErrorKind::AddrNotAvailable => bad(addr, "not an address of this host"),
            _ => Error::io("bind", addr.to_string(), e),
        })?;
        inner
            .set_nonblocking(true)
            .map_err(|e| Error::io("fcntl O_NONBLOCK", addr.to_string(), e))?;
        let local = tcp_addr(
            inner
                .local_addr()
                .map_err(|e| Error::io("getsockname", addr.to_string(), e))?,
        );
        Ok(TcpListener {
            inner,
            local,
            opts,
            pending: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Waits for the next connection, at most `timeout` (`None`: forever), and greets it.
    ///
    /// Connections are greeted in the order their greetings arrive, so one that connects
    /// and says nothing does not hold up the others: it waits aside until its greeting
    /// comes or [`TcpOptions::handshake_timeout`] passes.
    ///
    /// Errors: [`Error::Timeout`] if nobody connects in time; [`Error::Protocol`] if the
    /// connecting side is not an accio tcp endpoint (wrong greeting, or none within
    /// [`TcpOptions::handshake_timeout`]): that connection is closed and the listener
    /// stays usable.
    pub fn accept_tcp(&self, timeout: Option<Duration>) -> Result<TcpEndpoint> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            // Everything in the backlog joins the connections waiting for their greeting.
            loop {
                match self.inner.accept() {
                    Ok((stream, _)) => {
                        let peer = stream
                            .peer_addr()
                            .map(tcp_addr)
                            .unwrap_or_else(|_| self.local.clone());
                        pending.push(Pending {
                            stream,
                            peer,
                            deadline: Instant::now() + self.opts.handshake_timeout,
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // A connection that died in the backlog, or a signal: try again.
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::Interrupted
                                | io::ErrorKind::ConnectionAborted
                                | io::ErrorKind::ConnectionReset
                        ) => {}
                    Err(e) => return Err(Error::io("accept", self.local.to_string(), e)),
                }
            }
            // The first connection whose greeting is complete (or hopeless) is greeted back;
            // one silent past its handshake deadline is dropped with the reason.
            let now = Instant::now();
            let greetings: Vec<Greeting> = pending.iter().map(Pending::greeting).collect();
            if let Some(i) = (0..pending.len())
                .find(|&i| pending[i].deadline <= now || greetings[i] == Greeting::Ready)
            {
                let p = pending.swap_remove(i);
                drop(pending);
                return self.greet(p);
            }
            let mut wait = pending
                .iter()
                .map(|p| p.deadline.saturating_duration_since(now))
                .min()
                .unwrap_or(Duration::from_secs(3600));
            if greetings.contains(&Greeting::Partial) {
                wait = wait.min(PARTIAL_GREETING_TICK);
            }
            if let Some(d) = deadline {
                let left = d.saturating_duration_since(now);
                if left.is_zero() {
                    return Err(Error::Timeout {
                        op: "accept",
                        resource: self.local.to_string(),
                        after: timeout.unwrap_or_default(),
                    });
                }
                wait = wait.min(left);
            }
            let mut fds = vec![self.inner.as_raw_fd()];
            fds.extend(
                pending
                    .iter()
                    .zip(&greetings)
                    .filter(|(_, g)| **g == Greeting::Nothing)
                    .map(|(p, _)| p.stream.as_raw_fd()),
            );
            sys::poll_any_readable(&fds, wait)
                .map_err(|e| Error::io("poll", self.local.to_string(), e))?;
        }
    }

    /// Completes the greeting of an accepted connection and starts its endpoint.
    fn greet(&self, p: Pending) -> Result<TcpEndpoint> {
        let Pending {
            stream,
            peer,
            deadline,
        } = p;
        stream
            .set_nonblocking(false)
            .and_then(|_| stream.set_nodelay(true))
            .map_err(|e| Error::io("setsockopt", peer.to_string(), e))?;
        let hello = handshake(&stream, &peer, deadline, &self.opts, Side::Accept)?;
        TcpEndpoint::start(stream, self.opts.clone(), hello)
    }
}

impl Listener for TcpListener {
    fn local_addr(&self) -> &Addr {
        &self.local
    }

    fn accept(&self, timeout: Option<Duration>) -> Result<Box<dyn Endpoint>> {
        Ok(Box::new(self.accept_tcp(timeout)?))
    }
}
