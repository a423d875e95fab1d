//! Setting up connections: [`TcpListener`], `connect`, and the greeting both sides
//! exchange before any frame.

use std::fmt;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use accio_core::{Addr, Endpoint, Error, Listener, Result};

use crate::auth::{self, Role, Secret};
use crate::endpoint::{tcp_addr, TcpEndpoint};
use crate::frame::{
    FrameError, Hello, CLIENT_AUTH_LEN, HELLO_LEN, MAGIC, VERDICT_LEN, VERDICT_OK, VERDICT_REFUSED,
    VERSION_END,
};
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
    Accept { handshake_timeout: Duration },
}

impl Side {
    fn too_late(&self, peer: &Addr) -> Error {
        match self {
            Side::Connect { addr, timeout } => Error::Timeout {
                op: "connect",
                resource: addr.clone(),
                after: *timeout,
            },
            Side::Accept { handshake_timeout } => Error::protocol(
                peer,
                format!("no accio greeting within {handshake_timeout:?} of connecting"),
            ),
        }
    }

    /// The error for a failed read or write of the greeting.
    fn failed(&self, peer: &Addr, e: io::Error) -> Error {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => self.too_late(peer),
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
                None => Error::io("handshake", peer.to_string(), e),
            },
        }
    }
}

/// Sets the socket's timeouts to what is left until `deadline` (`None`: clears them).
fn time_left(
    stream: &TcpStream,
    peer: &Addr,
    deadline: Option<Instant>,
    side: &Side,
) -> Result<()> {
    let left = match deadline {
        None => None,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(side.too_late(peer));
            }
            Some(left)
        }
    };
    stream
        .set_write_timeout(left)
        .and_then(|_| stream.set_read_timeout(left))
        .map_err(|e| Error::io("setsockopt", peer.to_string(), e))
}

/// Reads a greeting into `buf` (at least [`HELLO_LEN`] bytes), checking the magic and
/// the version as soon as they arrive, so that a stranger's short banner or an older
/// accio is named as such at once instead of timing out.
fn read_greeting(mut s: &TcpStream, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    for upto in [MAGIC.len(), VERSION_END, buf.len()] {
        s.read_exact(&mut buf[got..upto])?;
        got = upto;
        if let Err(e @ (FrameError::Magic(_) | FrameError::Version { .. })) =
            Hello::decode(&buf[..got])
        {
            return Err(io::Error::other(e));
        }
    }
    Ok(())
}

/// This side's greeting, with a fresh nonce.
fn our_hello(opts: &TcpOptions) -> Result<Hello> {
    Ok(Hello {
        max_message: opts.max_message as u64,
        recv_window: opts.window(),
        nonce: auth::nonce()?,
    })
}

/// The connecting side of the greeting (see [`crate::auth`]): reads the listener's
/// greeting, answers with its own and its proof, and checks the listener's proof, all by
/// `deadline`. Returns the listener's greeting.
fn client_greeting(
    stream: &TcpStream,
    peer: &Addr,
    deadline: Instant,
    opts: &TcpOptions,
    secret: &Secret,
    side: Side,
) -> Result<Hello> {
    time_left(stream, peer, Some(deadline), &side)?;
    let mut server = [0u8; HELLO_LEN];
    read_greeting(stream, &mut server).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => Error::protocol(
            peer,
            "the peer closed the connection before its accio greeting (not an accio tcp \
             endpoint, or an accio older than protocol version 2, whose listener waits for \
             the connecting side to speak first?)",
        ),
        _ => side.failed(peer, e),
    })?;
    let theirs = Hello::decode(&server).map_err(|e| Error::protocol(peer, e.to_string()))?;
    let client = our_hello(opts)?.encode();
    let mut answer = [0u8; CLIENT_AUTH_LEN];
    answer[..HELLO_LEN].copy_from_slice(&client);
    answer[HELLO_LEN..].copy_from_slice(&secret.prove(Role::Client, &server, &client));
    time_left(stream, peer, Some(deadline), &side)?;
    // MSG_NOSIGNAL: a peer that already closed is an error, not SIGPIPE.
    sys::send_all(stream.as_raw_fd(), &answer).map_err(|e| side.failed(peer, e))?;
    let mut verdict = [0u8; VERDICT_LEN];
    let mut s = stream;
    s.read_exact(&mut verdict).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe => secret.refused(
            peer,
            "the listener closed the connection without a verdict on this side's proof",
        ),
        _ => side.failed(peer, e),
    })?;
    let (word, tag) = verdict.split_at(8);
    if word == VERDICT_REFUSED {
        return Err(secret.refused(
            peer,
            "the listener refused this side's proof (the two sides hold different secrets)",
        ));
    }
    if word != VERDICT_OK {
        return Err(Error::protocol(
            peer,
            format!("the listener's verdict {word:02x?} is neither accepted nor refused"),
        ));
    }
    if !secret.check(Role::Server, &server, &client, tag) {
        return Err(secret.refused(
            peer,
            "the listener's proof does not match: it does not hold this side's secret \
             (another program, or another user's, may listen on this port); nothing was sent",
        ));
    }
    time_left(stream, peer, None, &side)?;
    Ok(theirs)
}

/// The listening side of the greeting, after its own greeting `server` went out on
/// accept: reads the connecting side's greeting and proof, checks the proof, and answers
/// with its verdict (and its own proof). Returns the connecting side's greeting.
fn server_greeting(
    stream: &TcpStream,
    peer: &Addr,
    deadline: Instant,
    server: &[u8; HELLO_LEN],
    secret: &Secret,
    side: Side,
) -> Result<Hello> {
    time_left(stream, peer, Some(deadline), &side)?;
    let mut answer = [0u8; CLIENT_AUTH_LEN];
    read_greeting(stream, &mut answer).map_err(|e| side.failed(peer, e))?;
    let theirs =
        Hello::decode(&answer[..HELLO_LEN]).map_err(|e| Error::protocol(peer, e.to_string()))?;
    let client: [u8; HELLO_LEN] = answer[..HELLO_LEN].try_into().expect("HELLO_LEN bytes");
    let mut verdict = [0u8; VERDICT_LEN];
    if !secret.check(Role::Client, server, &client, &answer[HELLO_LEN..]) {
        verdict[..8].copy_from_slice(&VERDICT_REFUSED);
        // Best effort: the connection is refused whether or not the peer hears why.
        let _ = sys::send_all(stream.as_raw_fd(), &verdict);
        return Err(secret.refused(
            peer,
            "its proof does not match: it does not hold this side's secret",
        ));
    }
    verdict[..8].copy_from_slice(&VERDICT_OK);
    verdict[8..].copy_from_slice(&secret.prove(Role::Server, server, &client));
    sys::send_all(stream.as_raw_fd(), &verdict).map_err(|e| side.failed(peer, e))?;
    time_left(stream, peer, None, &side)?;
    Ok(theirs)
}

/// See [`TcpEndpoint::connect_with`].
pub(crate) fn connect(addr: &Addr, timeout: Duration, opts: TcpOptions) -> Result<TcpEndpoint> {
    let deadline = Instant::now() + timeout;
    // Before any traffic: a missing or unsafe key fails here, not at the peer.
    let secret = auth::resolve(opts.secret.as_ref())?;
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
    // Refused everywhere: nothing listens yet; try again until the deadline.
    let mut wait = accio_core::ListenerWait::new(timeout);
    loop {
        for sa in resolve(addr)? {
            let left = wait.left();
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
        let refused = matches!(&last, Some((_, e)) if e.kind() == io::ErrorKind::ConnectionRefused);
        if stream.is_some() || !refused {
            break;
        }
        if !wait.pause() {
            return Err(wait.gave_up(&addr.to_string(), "nothing listened there"));
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
    let hello = client_greeting(&stream, &peer, deadline, &opts, &secret, side)?;
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
    /// The secret connecting sides must prove, resolved once at bind.
    secret: Secret,
    /// Connections accepted from the backlog whose greeting has not fully arrived: a
    /// client that connects and stays silent waits here, not in front of the others.
    pending: std::sync::Mutex<Vec<Pending>>,
}

/// An accepted connection waiting for its greeting.
struct Pending {
    stream: TcpStream,
    peer: Addr,
    deadline: Instant,
    /// The greeting this side sent it on accept (its proof covers it).
    hello: [u8; HELLO_LEN],
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
        let mut buf = [0u8; CLIENT_AUTH_LEN];
        // SAFETY: `buf` is valid for CLIENT_AUTH_LEN bytes; MSG_PEEK leaves the data queued.
        let n = unsafe {
            libc::recv(
                self.stream.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                CLIENT_AUTH_LEN,
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
        let stranger = matches!(
            Hello::decode(&buf[..n.min(HELLO_LEN)]),
            Err(FrameError::Magic(_) | FrameError::Version { .. })
        );
        if n == 0 || n >= CLIENT_AUTH_LEN || stranger {
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
    ///
    /// The secret connecting sides must prove is resolved here (see [`crate::auth`]):
    /// a missing, unreadable or unsafe key file fails the bind.
    pub fn bind_with(addr: &Addr, opts: TcpOptions) -> Result<TcpListener> {
        let secret = auth::resolve(opts.secret.as_ref())?;
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
            secret,
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
    /// [`TcpOptions::handshake_timeout`]); [`Error::Untrusted`] if it fails
    /// authentication (it does not hold this listener's secret). Either way that
    /// connection is closed and the listener stays usable.
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
                        // The listener speaks first: its greeting carries the challenge
                        // the connecting side's proof must cover. 64 bytes fit any fresh
                        // socket's buffer; one that cannot take them is dropped.
                        let hello = our_hello(&self.opts)?.encode();
                        if sys::send_now(stream.as_raw_fd(), &hello) {
                            pending.push(Pending {
                                stream,
                                peer,
                                deadline: Instant::now() + self.opts.handshake_timeout,
                                hello,
                            });
                        }
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
            hello,
        } = p;
        stream
            .set_nonblocking(false)
            .and_then(|_| stream.set_nodelay(true))
            .map_err(|e| Error::io("setsockopt", peer.to_string(), e))?;
        let side = Side::Accept {
            handshake_timeout: self.opts.handshake_timeout,
        };
        let hello = server_greeting(&stream, &peer, deadline, &hello, &self.secret, side)?;
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
