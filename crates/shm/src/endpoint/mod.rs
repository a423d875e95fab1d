//! `ShmListener` and `ShmEndpoint`: the endpoint contract over shared memory.
//!
//! This file holds the options, the endpoint itself (its state, connecting, closing);
//! its jobs are split by what they touch:
//!
//! - `listener`: [`ShmListener`], binding `shm://NAME` and the accepting handshake;
//! - `liveness`: noticing a closed or vanished peer, and waiting (spin, then futex);
//! - `messages`: the send and receive paths over the rings;
//! - `windows`: our window table and the peer's (mapped on first use), with the
//!   control-socket records that carry window memory;
//! - `contract`: the [`Endpoint`](accio_core::Endpoint) implementation, which the trait
//!   keeps in one block: messages, window registration, RMA and fences, built from the
//!   parts above.

mod contract;
mod listener;
mod liveness;
mod messages;
mod windows;

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use accio_core::{Addr, Error, Region, Result};

use crate::link::{Geometry, Gone, Link};
use crate::ring::{Consumer, Producer};
use crate::stores::ShmStores;
use crate::sys;

pub use self::listener::ShmListener;
use self::windows::{Ctl, LocalSpace, PeerWin};

/// Tuning of shm endpoints. The connecting side's choice is used by both ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmOptions {
    /// Data bytes of each message ring, a power of two from 64 KiB to 1 GiB (default 4 MiB).
    pub ring_bytes: usize,
    /// Largest record: messages longer than this are split (default 256 KiB, at most a
    /// quarter of the ring, so producer and consumer copy different records at once).
    pub chunk_bytes: usize,
    /// How long a waiting call spins before it sleeps (default 50 µs). Spinning keeps
    /// latency at cache-transfer cost; sleeping frees the core.
    pub spin: Duration,
    /// How payloads of 1 KiB and more are written into the ring (default: following the
    /// host's placement of the two cores, see [`ShmStores`]).
    pub stores: ShmStores,
}

impl Default for ShmOptions {
    fn default() -> Self {
        ShmOptions {
            ring_bytes: 4 << 20,
            chunk_bytes: 256 << 10,
            spin: Duration::from_micros(50),
            stores: ShmStores::Auto,
        }
    }
}

impl ShmOptions {
    /// The defaults, overridden by `ACCIO_SHM_RING_BYTES`, `ACCIO_SHM_CHUNK_BYTES`,
    /// `ACCIO_SHM_SPIN_US` and `ACCIO_SHM_STORES` where set (as UCX reads `UCX_*`): tuning
    /// without a rebuild. Unparsable values are ignored.
    pub fn from_env() -> ShmOptions {
        let var = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let d = ShmOptions::default();
        ShmOptions {
            ring_bytes: var("ACCIO_SHM_RING_BYTES").map_or(d.ring_bytes, |v| v as usize),
            chunk_bytes: var("ACCIO_SHM_CHUNK_BYTES").map_or(d.chunk_bytes, |v| v as usize),
            spin: var("ACCIO_SHM_SPIN_US").map_or(d.spin, Duration::from_micros),
            stores: std::env::var("ACCIO_SHM_STORES")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(d.stores),
        }
    }
}

/// First bytes of the connect hello. The digit names the ring layout (2: control words 128
/// bytes apart; 3: records published by a stamp in their header): peers of different
/// layouts refuse each other.
const HELLO: &[u8; 8] = b"ACCIOSH3";

fn socket_name(name: &str) -> Vec<u8> {
    format!("accio.{}.{}", sys::euid(), name).into_bytes()
}

/// An endpoint connected over shared memory. See the crate docs for the design.
#[derive(Debug)]
pub struct ShmEndpoint {
    addr: Addr,
    side: usize,
    opts: ShmOptions,
    _segment: Arc<Region>,
    link: Link,
    sock: UnixStream,
    tx: Mutex<Producer>,
    rx: Mutex<Consumer>,
    local: RwLock<LocalSpace>,
    peer: RwLock<BTreeMap<u64, PeerWin>>,
    /// Key in `peer` of the window the last RMA hit: most RMA streams address one window,
    /// found with one comparison instead of a tree search.
    peer_hint: AtomicU64,
    /// The same for our own windows (`write_to`'s source, `read_from`'s destination).
    local_hint: AtomicU64,
    /// Identifies this endpoint in the threads' RMA caches (see `windows`); never reused.
    id: u64,
    /// Bumped when a local window is withdrawn: cached local windows of an older
    /// generation are looked up again.
    local_gen: AtomicU64,
    ctl: Mutex<Ctl>,
    /// Set once the peer is known gone; shared with the hang-up watcher thread.
    gone: Arc<Gone>,
    /// Whether the hang-up watcher runs (see `liveness`): then calls that do not wait learn
    /// of a vanished peer from `gone` alone, with no clock read and no `poll`.
    watched: AtomicBool,
    watcher: Mutex<Option<JoinHandle<()>>>,
    rma_issued: AtomicU64,
    /// When a call last probed for a hang-up, in ns of [`sys::coarse_clock_ns`].
    probed: AtomicU64,
}

impl ShmEndpoint {
    /// Connects to the listener at `addr` with [`ShmOptions::from_env`].
    pub fn connect(addr: &Addr, timeout: Duration) -> Result<ShmEndpoint> {
        ShmEndpoint::connect_with(addr, timeout, ShmOptions::from_env())
    }

    /// Connects with explicit options (ring geometry, spin time).
    pub fn connect_with(addr: &Addr, timeout: Duration, opts: ShmOptions) -> Result<ShmEndpoint> {
        let Addr::Shm(name) = addr else {
            return Err(Error::BadAddress {
                addr: addr.to_string(),
                reason: "the shm backend needs an shm:// address".into(),
            });
        };
        let what = addr.to_string();
        if !opts.ring_bytes.is_power_of_two()
            || !(16 * 4096..=crate::ring::MAX_CAP).contains(&opts.ring_bytes)
            || opts.chunk_bytes == 0
            || opts.chunk_bytes > opts.ring_bytes / 4
        {
            return Err(Error::invalid(
                "connect",
                format!("ring of {} bytes with {}-byte chunks: the ring must be a power of two from 64 KiB to 1 GiB and chunks at most a quarter of it", opts.ring_bytes, opts.chunk_bytes),
            ));
        }
        let sa = SocketAddr::from_abstract_name(socket_name(name))
            .map_err(|e| Error::io("connect", &*what, e))?;
        let stream = UnixStream::connect_addr(&sa).map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound => {
                Error::BadAddress {
                    addr: what.clone(),
                    reason: "no listener is bound to this name".into(),
                }
            }
            _ => Error::io("connect", &*what, e),
        })?;
        let geo = Geometry {
            ring_cap: opts.ring_bytes,
            max_chunk: opts.chunk_bytes,
        };
        let len = geo.segment_bytes();
        let region = Arc::new(Region::shareable(
            len,
            &format!("accio-link-{name}"),
            false,
        )?);
        let file = region
            .file()
            .expect("a shareable region has its memory object");
        // SAFETY: the fresh memfd mapping is zeroed, `len` bytes, kept in the endpoint.
        let link = unsafe { Link::init(region.as_ptr(), geo) };
        let mut hello = [0u8; 16];
        hello[..8].copy_from_slice(HELLO);
        hello[8..].copy_from_slice(&(len as u64).to_le_bytes());
        sys::send_with_fd(stream.as_raw_fd(), &hello, Some(file.as_raw_fd()))
            .map_err(|e| Error::io("sendmsg", &*what, e))?;
        stream
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| Error::io("setsockopt", &*what, e))?;
        let mut ok = [0u8; 1];
        let mut fds = Vec::new();
        match sys::recv_with_fds(stream.as_raw_fd(), &mut ok, &mut fds, false) {
            Ok(_) if ok[0] == b'K' => {}
            Ok(_) => return Err(Error::protocol(&what, "bad handshake reply")),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return Err(Error::Timeout {
                    op: "connect",
                    resource: what,
                    after: timeout,
                })
            }
            Err(e) => return Err(Error::io("connect handshake", &*what, e)),
        }
        stream
            .set_read_timeout(None)
            .map_err(|e| Error::io("setsockopt", &*what, e))?;
        let mut ep = ShmEndpoint::new(addr.clone(), stream, region, link, 0)?;
        ep.opts.spin = opts.spin;
        ep.set_stores(opts.stores);
        Ok(ep)
    }

    fn new(
        addr: Addr,
        sock: UnixStream,
        segment: Arc<Region>,
        link: Link,
        side: usize,
    ) -> Result<ShmEndpoint> {
        let geo = link.geometry();
        let opts = ShmOptions {
            ring_bytes: geo.ring_cap,
            chunk_bytes: geo.max_chunk,
            ..ShmOptions::from_env()
        };
        let mut tx = Producer::new(link.ring(side), geo.max_chunk);
        tx.set_stores(opts.stores);
        Ok(ShmEndpoint {
            addr,
            side,
            opts,
            _segment: segment,
            tx: Mutex::new(tx),
            rx: Mutex::new(Consumer::new(link.ring(1 - side), geo.max_chunk)),
            link,
            sock,
            local: RwLock::new(LocalSpace::default()),
            peer: RwLock::new(BTreeMap::new()),
            peer_hint: AtomicU64::new(0),
            local_hint: AtomicU64::new(0),
            id: windows::next_endpoint_id(),
            local_gen: AtomicU64::new(0),
            ctl: Mutex::new(Ctl::default()),
            gone: Arc::new(Gone::new()),
            watched: AtomicBool::new(false),
            watcher: Mutex::new(None),
            rma_issued: AtomicU64::new(0),
            probed: AtomicU64::new(0),
        })
    }

    /// Sets how long waiting calls spin before sleeping.
    pub fn set_spin(&mut self, spin: Duration) {
        self.opts.spin = spin;
    }

    /// Sets how this end writes payloads of 1 KiB and more into its ring.
    pub fn set_stores(&mut self, stores: ShmStores) {
        self.opts.stores = stores;
        self.tx.get_mut().expect("send lock").set_stores(stores);
    }

    /// The options in effect (ring geometry as agreed with the peer).
    pub fn options(&self) -> ShmOptions {
        self.opts
    }
}

impl Drop for ShmEndpoint {
    fn drop(&mut self) {
        windows::forget_endpoint(self.id);
        self.link.mark_closed(self.side);
        // Wake a peer sleeping on either ring so it notices at once.
        sys::futex_wake(self.link.ring(self.side).consumer_wait());
        sys::futex_wake(self.link.ring(1 - self.side).producer_wait());
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        // The shutdown hangs up the watcher's `poll` too.
        if let Some(w) = self.watcher.get_mut().ok().and_then(Option::take) {
            let _ = w.join();
        }
    }
}
