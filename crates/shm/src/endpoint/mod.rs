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
mod device;
mod listener;
mod liveness;
mod messages;
mod windows;

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
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
    /// Users whose processes are accepted as peers besides this process's own (default:
    /// none, so only processes of the same user connect, in either direction).
    pub allow_uids: PeerUids,
    /// The most bytes one `register` may map (default: half the node's memory, see
    /// [`default_register_limit`]). Larger requests fail before any memory is touched.
    pub register_limit: u64,
}

/// The users (besides its own) whose processes an shm endpoint takes as peers: an
/// allow-list for jobs whose ranks run under several accounts. At most
/// [`PeerUids::MAX`] entries, so that [`ShmOptions`] stays a plain value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerUids {
    uids: [u32; PeerUids::MAX],
    len: usize,
}

impl PeerUids {
    /// The most users one list holds.
    pub const MAX: usize = 16;

    /// No other user: same-user peers only.
    pub const NONE: PeerUids = PeerUids {
        uids: [0; PeerUids::MAX],
        len: 0,
    };

    /// A list of `uids`; `None` if it holds more than [`PeerUids::MAX`].
    pub fn new(uids: &[u32]) -> Option<PeerUids> {
        let mut list = PeerUids::NONE;
        for &u in uids {
            if list.len == PeerUids::MAX {
                return None;
            }
            list.uids[list.len] = u;
            list.len += 1;
        }
        Some(list)
    }

    /// The users listed.
    pub fn as_slice(&self) -> &[u32] {
        &self.uids[..self.len]
    }

    /// Whether a peer running as `uid` is accepted by a process running as `own`.
    pub fn admits(&self, own: u32, uid: u32) -> bool {
        uid == own || self.as_slice().contains(&uid)
    }

    /// Parses `ACCIO_SHM_ALLOW_UIDS`' syntax: user ids separated by commas.
    fn parse(text: &str) -> Option<PeerUids> {
        let uids = text
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| t.parse::<u32>().ok())
            .collect::<Option<Vec<u32>>>()?;
        PeerUids::new(&uids)
    }
}

/// The default [`ShmOptions::register_limit`]: half of the node's memory (`MemTotal` of
/// `/proc/meminfo`), or 1 TiB where it cannot be read. A registration is pre-faulted, so
/// one that the node cannot hold would otherwise fill memory until the kernel's OOM killer
/// ends some process, not necessarily this one.
pub fn default_register_limit() -> u64 {
    static LIMIT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| sys::mem_total_bytes().map_or(1 << 40, |t| t / 2))
}

impl Default for ShmOptions {
    fn default() -> Self {
        ShmOptions {
            ring_bytes: 4 << 20,
            chunk_bytes: 256 << 10,
            spin: Duration::from_micros(50),
            stores: ShmStores::Auto,
            allow_uids: PeerUids::NONE,
            register_limit: default_register_limit(),
        }
    }
}

impl ShmOptions {
    /// The defaults, overridden by `ACCIO_SHM_RING_BYTES`, `ACCIO_SHM_CHUNK_BYTES`,
    /// `ACCIO_SHM_SPIN_US`, `ACCIO_SHM_STORES`, `ACCIO_SHM_ALLOW_UIDS` (user ids separated
    /// by commas) and `ACCIO_SHM_REGISTER_LIMIT` (bytes) where set (as UCX reads `UCX_*`):
    /// tuning without a rebuild. Unparsable values are ignored (an unparsable allow-list
    /// admits no other user).
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
            allow_uids: std::env::var("ACCIO_SHM_ALLOW_UIDS")
                .ok()
                .and_then(|v| PeerUids::parse(&v))
                .unwrap_or(d.allow_uids),
            register_limit: var("ACCIO_SHM_REGISTER_LIMIT").unwrap_or(d.register_limit),
        }
    }
}

/// Refuses a peer of a user `allow` does not admit, naming both users: `who` is
/// "listener" or "connecting process".
fn check_peer_uid(sock: &UnixStream, allow: &PeerUids, addr: &str, who: &str) -> Result<()> {
    let uid = sys::peer_uid(sock.as_raw_fd()).map_err(|e| Error::io("SO_PEERCRED", addr, e))?;
    let own = sys::euid();
    if allow.admits(own, uid) {
        return Ok(());
    }
    Err(Error::Untrusted {
        peer: addr.to_string(),
        reason: format!(
            "the {who} runs as uid {uid}, not as this process's uid {own}{}; set \
             ACCIO_SHM_ALLOW_UIDS to admit another user",
            if allow.as_slice().is_empty() {
                String::new()
            } else {
                format!(" nor one of the allowed uids {:?}", allow.as_slice())
            }
        ),
    })
}

/// The largest message: 4 GiB (the contract asks for at least 1 GiB). A receiver refuses
/// a longer announced message before it allocates anything.
const MAX_MESSAGE: usize = 1 << 32;

/// Connects the stream socket of `shm://NAME`: the listener of this process's own user,
/// else (with an allow-list) the first listening one of the allowed users.
fn connect_socket(name: &str, allow: &PeerUids, what: &str) -> Result<UnixStream> {
    let own = sys::euid();
    for uid in std::iter::once(own).chain(allow.as_slice().iter().copied()) {
        let sa = SocketAddr::from_abstract_name(socket_name(uid, name))
            .map_err(|e| Error::io("connect", what, e))?;
        match UnixStream::connect_addr(&sa) {
            Ok(s) => return Ok(s),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
                ) => {}
            Err(e) => return Err(Error::io("connect", what, e)),
        }
    }
    Err(Error::BadAddress {
        addr: what.to_string(),
        reason: "no listener is bound to this name".into(),
    })
}

/// First bytes of the connect hello. The digit names the ring layout (2: control words 128
/// bytes apart; 3: records published by a stamp in their header): peers of different
/// layouts refuse each other.
const HELLO: &[u8; 8] = b"ACCIOSH3";

/// The error of a connecting side whose user the listener does not admit.
fn refused_by_listener(what: String) -> Error {
    Error::Untrusted {
        peer: what,
        reason: format!(
            "the listener does not admit this process's uid {}: it must list it in \
             ACCIO_SHM_ALLOW_UIDS",
            sys::euid()
        ),
    }
}

/// The abstract socket name of `shm://NAME` for the listener's user `uid`.
fn socket_name(uid: u32, name: &str) -> Vec<u8> {
    format!("accio.{uid}.{name}").into_bytes()
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
    /// Set once the peer is known gone; shared with the hang-up watcher thread.
    gone: Arc<Gone>,
    /// Whether the hang-up watcher runs (see `liveness`): then calls that do not wait learn
    /// of a vanished peer from `gone` alone, with no clock read and no `poll`.
    watched: AtomicBool,
    watcher: Mutex<Option<JoinHandle<()>>>,
    rma_issued: AtomicU64,
    /// The highest mark `fence_mark` returned: `rma_issued` is counted without a
    /// read-modify-write and may step back under racing threads, so `fence_wait` checks a
    /// mark against this too before calling it one never issued.
    marked: AtomicU64,
    /// When a call last probed for a hang-up, in ns of [`sys::coarse_clock_ns`].
    probed: AtomicU64,
    /// The CPU word this side last stored in the link (see `peer_on_this_cpu`).
    cpu_noted: AtomicU32,
    /// When this endpoint last moved its waiting thread off its peer's CPU (coarse ns).
    moved_off: AtomicU64,
    /// Whether a message was sent since the last one was received: a receive then most
    /// likely awaits its answer (see `liveness`'s `wait`).
    sent_last: AtomicBool,
    /// Whether the last wait that looked found the peer on its CPU, this thread pinned to
    /// it (see `liveness`'s `wait`): the next waits hand the core over from the start.
    beside: AtomicBool,
    // Cold and bulky, after the fields that RMA calls read: placed among them, they moved
    // those further apart (64 B and 4 KiB `write_to`s measured 3.5% slower than before
    // device windows; with them here, 2% and 0%, within the spread of the runs).
    ctl: Mutex<Ctl>,
    /// The peer's device windows opened so far, by offset: their table entry and memory.
    peer_devices: Mutex<BTreeMap<u64, device::OpenedDevice>>,
}

impl ShmEndpoint {
    /// Connects to the listener at `addr` with [`ShmOptions::from_env`]. A listener not
    /// bound yet is waited for, up to `timeout` (then [`Error::Timeout`], saying nobody
    /// listened): a connect may start before its listener.
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
        // A listener not bound yet is waited for, up to the timeout.
        let mut wait = accio_core::ListenerWait::new(timeout);
        let stream = loop {
            match connect_socket(name, &opts.allow_uids, &what) {
                Ok(s) => break s,
                Err(Error::BadAddress { .. }) if wait.pause() => {}
                Err(Error::BadAddress { .. }) => {
                    return Err(wait.gave_up(&what, "no listener was bound to this name"))
                }
                Err(e) => return Err(e),
            }
        };
        // Anyone may bind any abstract name: before a byte (and the ring memory) goes out,
        // the listener must be a process of an admitted user.
        check_peer_uid(&stream, &opts.allow_uids, &what, "listener")?;
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
        link.note_barrier(0);
        let mut hello = [0u8; 16];
        hello[..8].copy_from_slice(HELLO);
        hello[8..].copy_from_slice(&(len as u64).to_le_bytes());
        if let Err(e) = sys::send_with_fd(stream.as_raw_fd(), &hello, Some(file.as_raw_fd())) {
            // A listener that refused us may have hung up before the hello: its reason byte
            // is still to be read.
            let mut why = [0u8; 1];
            let mut fds = Vec::new();
            if matches!(
                sys::recv_with_fds(stream.as_raw_fd(), &mut why, &mut fds, true),
                Ok(true)
            ) && why[0] == b'U'
            {
                return Err(refused_by_listener(what));
            }
            return Err(Error::io("sendmsg", &*what, e));
        }
        stream
            .set_read_timeout(Some(wait.left().max(Duration::from_millis(1))))
            .map_err(|e| Error::io("setsockopt", &*what, e))?;
        let mut ok = [0u8; 1];
        let mut fds = Vec::new();
        match sys::recv_with_fds(stream.as_raw_fd(), &mut ok, &mut fds, false) {
            Ok(_) if ok[0] == b'K' => {}
            Ok(_) if ok[0] == b'U' => return Err(refused_by_listener(what)),
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
        ShmEndpoint::new(addr.clone(), stream, region, link, 0, opts)
    }

    /// The largest message `send` takes, and the largest a peer may announce.
    pub const MAX_MESSAGE: usize = MAX_MESSAGE;

    fn new(
        addr: Addr,
        sock: UnixStream,
        segment: Arc<Region>,
        link: Link,
        side: usize,
        opts: ShmOptions,
    ) -> Result<ShmEndpoint> {
        let geo = link.geometry();
        // The connecting side chose the rings; the rest is this side's own.
        let opts = ShmOptions {
            ring_bytes: geo.ring_cap,
            chunk_bytes: geo.max_chunk,
            ..opts
        };
        let mut tx = Producer::new(link.ring(side), geo.max_chunk);
        tx.set_stores(opts.stores);
        let mut rx = Consumer::new(link.ring(1 - side), geo.max_chunk);
        rx.set_light_wake(link.light_wake(side));
        Ok(ShmEndpoint {
            addr,
            side,
            opts,
            _segment: segment,
            tx: Mutex::new(tx),
            rx: Mutex::new(rx),
            link,
            sock,
            local: RwLock::new(LocalSpace::default()),
            peer: RwLock::new(BTreeMap::new()),
            peer_hint: AtomicU64::new(0),
            local_hint: AtomicU64::new(0),
            id: windows::next_endpoint_id(),
            local_gen: AtomicU64::new(0),
            ctl: Mutex::new(Ctl::default()),
            peer_devices: Mutex::new(BTreeMap::new()),
            gone: Arc::new(Gone::new()),
            watched: AtomicBool::new(false),
            watcher: Mutex::new(None),
            rma_issued: AtomicU64::new(0),
            marked: AtomicU64::new(0),
            probed: AtomicU64::new(0),
            cpu_noted: AtomicU32::new(0),
            moved_off: AtomicU64::new(0),
            sent_last: AtomicBool::new(false),
            beside: AtomicBool::new(false),
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
