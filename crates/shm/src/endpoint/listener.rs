//! [`ShmListener`]: binds `shm://NAME` and accepts connections (owner check, handshake).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use accio_core::{Addr, Endpoint, Error, Listener, Region, Result};

use super::{check_peer_uid, socket_name, ShmEndpoint, ShmOptions, HELLO};
use crate::link::Link;
use crate::sys;

/// Listens on `shm://NAME`: an abstract Unix socket (no file to clean up, gone with the
/// process) through which connecting endpoints hand over their link segment.
#[derive(Debug)]
pub struct ShmListener {
    addr: Addr,
    sock: UnixListener,
    /// What accepted endpoints use besides the rings (the connecting side chooses those),
    /// and whom this listener admits.
    opts: ShmOptions,
}

impl ShmListener {
    /// Binds `addr` (must be `shm://NAME`) with [`ShmOptions::from_env`]. Names are per
    /// user: the socket is named after this process's user, and a connecting process of
    /// another user is refused unless [`ShmOptions::allow_uids`] admits it.
    pub fn bind(addr: &Addr) -> Result<ShmListener> {
        ShmListener::bind_with(addr, ShmOptions::from_env())
    }

    /// Binds `addr` with explicit options: who may connect (`allow_uids`), and how
    /// accepted endpoints wait, store and register (`spin`, `stores`, `register_limit`).
    pub fn bind_with(addr: &Addr, opts: ShmOptions) -> Result<ShmListener> {
        let Addr::Shm(name) = addr else {
            return Err(Error::BadAddress {
                addr: addr.to_string(),
                reason: "the shm backend needs an shm:// address".into(),
            });
        };
        let sa = SocketAddr::from_abstract_name(socket_name(sys::euid(), name))
            .map_err(|e| Error::io("bind", addr.to_string(), e))?;
        let sock = UnixListener::bind_addr(&sa).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => Error::AddrInUse {
                addr: addr.to_string(),
            },
            _ => Error::io("bind", addr.to_string(), e),
        })?;
        Ok(ShmListener {
            addr: addr.clone(),
            sock,
            opts,
        })
    }

    /// Accepts one connection (see [`Listener::accept`]), with the concrete type.
    ///
    /// Connections that fail their handshake (another user, a bad segment, a client that
    /// gave up) are dropped and waiting continues until the deadline.
    pub fn accept_shm(&self, timeout: Option<Duration>) -> Result<ShmEndpoint> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let ready = sys::wait_readable(self.sock.as_raw_fd(), left)
                .map_err(|e| Error::io("poll", self.addr.to_string(), e))?;
            if !ready {
                return Err(Error::Timeout {
                    op: "accept",
                    resource: self.addr.to_string(),
                    after: timeout.unwrap_or_default(),
                });
            }
            let (stream, _) = self
                .sock
                .accept()
                .map_err(|e| Error::io("accept", self.addr.to_string(), e))?;
            if let Ok(ep) = self.handshake(stream) {
                return Ok(ep);
            }
        }
    }

    fn handshake(&self, stream: UnixStream) -> Result<ShmEndpoint> {
        let what = self.addr.to_string();
        if let Err(e) = check_peer_uid(&stream, &self.opts.allow_uids, &what, "connecting process")
        {
            // One byte that says why, so the other side's error is not a bare hang-up;
            // nothing of ours goes with it.
            let _ = sys::send_with_fd(stream.as_raw_fd(), b"U", None);
            return Err(e);
        }
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| Error::io("setsockopt", &*what, e))?;
        let mut hello = [0u8; 16];
        let mut fds = Vec::new();
        sys::recv_with_fds(stream.as_raw_fd(), &mut hello, &mut fds, false)
            .map_err(|e| Error::io("recvmsg", &*what, e))?;
        if &hello[..8] != HELLO || fds.len() != 1 {
            return Err(Error::protocol(&what, "bad connect hello"));
        }
        let len = u64::from_le_bytes(hello[8..].try_into().expect("8 bytes")) as usize;
        let file = File::from(fds.pop().expect("one fd"));
        let size = file
            .metadata()
            .map_err(|e| Error::io("fstat", &*what, e))?
            .len() as usize;
        if !sys::is_size_sealed(&file) || size < len {
            return Err(Error::protocol(
                &what,
                "link segment is not size-sealed or too small",
            ));
        }
        let region = Arc::new(Region::shared(&file, 0, len, false, "shm link segment")?);
        // SAFETY: the region maps `len` bytes and lives in the endpoint as long as the link.
        let link =
            unsafe { Link::open(region.as_ptr(), len) }.map_err(|r| Error::protocol(&what, r))?;
        link.note_barrier(1);
        sys::send_with_fd(stream.as_raw_fd(), b"K", None)
            .map_err(|e| Error::io("send", &*what, e))?;
        stream
            .set_read_timeout(None)
            .map_err(|e| Error::io("setsockopt", &*what, e))?;
        ShmEndpoint::new(self.addr.clone(), stream, region, link, 1, self.opts)
    }
}

impl Listener for ShmListener {
    fn local_addr(&self) -> &Addr {
        &self.addr
    }

    fn accept(&self, timeout: Option<Duration>) -> Result<Box<dyn Endpoint>> {
        Ok(Box::new(self.accept_shm(timeout)?))
    }
}
