//! Tunables of a tcp endpoint, as a builder.

use std::time::Duration;

use crate::auth::Secret;
use crate::frame::{DEFAULT_MAX_MESSAGE, MAX_CREDIT};

/// Settings of tcp endpoints, passed to [`crate::TcpListener::bind_with`] (for every
/// endpoint it accepts) and [`crate::TcpEndpoint::connect_with`].
///
/// ```
/// use std::time::Duration;
/// let opts = accio_tcp::TcpOptions::new()
///     .max_message(64 << 20)
///     .handshake_timeout(Duration::from_secs(2));
/// # let _ = opts;
/// ```
#[derive(Clone, Debug)]
pub struct TcpOptions {
    pub(crate) max_message: usize,
    pub(crate) max_try_send: usize,
    pub(crate) recv_queue_bytes: usize,
    pub(crate) handshake_timeout: Duration,
    pub(crate) close_linger: Duration,
    pub(crate) spin: Duration,
    pub(crate) secret: Option<Secret>,
}

impl Default for TcpOptions {
    fn default() -> Self {
        TcpOptions {
            max_message: DEFAULT_MAX_MESSAGE as usize,
            max_try_send: 256 * 1024,
            recv_queue_bytes: 16 << 20,
            handshake_timeout: Duration::from_secs(5),
            close_linger: Duration::from_secs(1),
            spin: std::env::var("ACCIO_TCP_SPIN_US")
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map_or(Duration::from_micros(50), Duration::from_micros),
            secret: None,
        }
    }
}

impl TcpOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Largest message this endpoint accepts from its peer (and announces in the
    /// handshake, so the peer's `send` refuses larger ones up front). A frame announcing
    /// more is a protocol error that closes the connection before anything is allocated.
    /// Default: 1 GiB.
    pub fn max_message(mut self, bytes: usize) -> Self {
        self.max_message = bytes;
        self
    }

    /// Largest message `try_send` accepts ([`accio_core::Capabilities::max_try_send`]);
    /// larger ones fail with `MessageTooLarge`. Kept well below the socket send buffer
    /// (about 1 to 4 MiB on Linux) so that an idle connection can always take one.
    /// Default: 256 KiB.
    pub fn max_try_send(mut self, bytes: usize) -> Self {
        self.max_try_send = bytes.max(1);
        self
    }

    /// The message credit this endpoint grants its peer: how many bytes of messages not
    /// yet taken by `recv` (each message counting 64 bytes more) the peer may send
    /// before its `send` waits and its `try_send` returns `WouldBlock`. This bounds the
    /// memory a fast sender can make a slow receiver hold, without ever holding up RMA
    /// (only messages are flow-controlled). One message larger than the window is let
    /// through when the window is nearly empty. At least 4 KiB. Default: 16 MiB: received
    /// messages sit in recycled buffers, and a window that fits the last-level cache keeps
    /// the kernel-to-user copy cache-hot (with 64 MiB, 2 MiB streaming ran at 0.89x
    /// `iperf3 -l 1M` here; with 16 MiB at 1.0-1.4x, noisy).
    pub fn recv_queue_bytes(mut self, bytes: usize) -> Self {
        self.recv_queue_bytes = bytes;
        self
    }

    /// How long an accepting listener waits for the connecting side's greeting before it
    /// drops the connection. Default: 5 s.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// The credit window as announced in the greeting.
    pub(crate) fn window(&self) -> u64 {
        (self.recv_queue_bytes as u64).clamp(4096, MAX_CREDIT)
    }

    /// How long a waiting call (`recv`, a fence, `read_from`, `send` short of credit)
    /// reads the socket without sleeping before it sleeps in `poll`. Spinning keeps a
    /// round trip at the kernel's loopback cost (a sleep and wake-up cost about 20 µs on
    /// a virtual machine); sleeping frees the core. Default: 50 µs, or
    /// `ACCIO_TCP_SPIN_US` where set (unparsable values are ignored).
    pub fn spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// The secret both sides of a connection must hold (see [`crate::auth`]): the
    /// listener and the connector each prove it to the other before any endpoint traffic,
    /// and refuse a peer that cannot. At least [`crate::auth::MIN_SECRET_LEN`] bytes.
    /// Default: none here, so `ACCIO_TCP_SECRET`, else the key file named by
    /// `ACCIO_TCP_KEY_FILE`, else the per-user key file `~/.config/accio/tcp.key`
    /// (created on first use), at bind and at connect. The secret never appears in an
    /// error, a log or this struct's `Debug`.
    pub fn secret(mut self, secret: impl Into<Vec<u8>>) -> Self {
        self.secret = Some(Secret::explicit(secret.into()));
        self
    }

    /// On drop, how long an endpoint waits for the peer to acknowledge the close (so that
    /// nothing it sent last is lost to a reset) before it closes anyway. Default: 1 s.
    pub fn close_linger(mut self, linger: Duration) -> Self {
        self.close_linger = linger;
        self
    }
}
