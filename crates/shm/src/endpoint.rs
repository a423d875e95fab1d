//! `ShmListener` and `ShmEndpoint`: the endpoint contract over shared memory.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use accio_core::{
    copy_bytes, Access, Addr, Capabilities, Endpoint, Error, Listener, Mark, MemView,
    OffsetAllocator, Progress, Region, RemoteMap, Result, RmaFlags, Side, Window, WindowTable,
    PAGE,
};

use crate::link::{Entry, Geometry, Gone, Link, TABLE_SLOTS};
use crate::ring::{sleep_once, Consumer, Producer};
use crate::sys;

/// Tuning of shm endpoints. The connecting side's choice is used by both ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmOptions {
    /// Data bytes of each message ring, a power of two (default 4 MiB).
    pub ring_bytes: usize,
    /// Largest record: messages longer than this are split (default 256 KiB, at most a
    /// quarter of the ring, so producer and consumer copy different records at once).
    pub chunk_bytes: usize,
    /// How long a waiting call spins before it sleeps (default 50 µs). Spinning keeps
    /// latency at cache-transfer cost; sleeping frees the core.
    pub spin: Duration,
}

impl Default for ShmOptions {
    fn default() -> Self {
        ShmOptions {
            ring_bytes: 4 << 20,
            chunk_bytes: 256 << 10,
            spin: Duration::from_micros(50),
        }
    }
}

impl ShmOptions {
    /// The defaults, overridden by `ACCIO_SHM_RING_BYTES`, `ACCIO_SHM_CHUNK_BYTES` and
    /// `ACCIO_SHM_SPIN_US` where set (as UCX reads `UCX_*`): tuning without a rebuild.
    /// Unparsable values are ignored.
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
        }
    }
}

/// How often a sleeping waiter wakes to check whether the peer is still there.
const LIVENESS_TICK: Duration = Duration::from_millis(50);
/// How often a call that does not wait (a non-blocking one that would block, a `send` that
/// finds room, an RMA) probes the control socket for a hang-up (one `poll` system call):
/// often enough that a caller sees a killed or exited peer well within a second, rarely
/// enough that these calls stay free of system calls almost always.
const POLL_PROBE_NS: u64 = 10_000_000;
/// Control-socket record: kind, access, window offset, length, and where the window starts
/// in the memory object sent with it.
const CTL_RECORD: usize = 32;
const CTL_WINDOW: u32 = 1;
/// First bytes of the connect hello.
const HELLO: &[u8; 8] = b"ACCIOSH1";

fn socket_name(name: &str) -> Vec<u8> {
    format!("accio.{}.{}", sys::euid(), name).into_bytes()
}

/// Listens on `shm://NAME`: an abstract Unix socket (no file to clean up, gone with the
/// process) through which connecting endpoints hand over their link segment.
#[derive(Debug)]
pub struct ShmListener {
    addr: Addr,
    sock: UnixListener,
}

impl ShmListener {
    /// Binds `addr` (must be `shm://NAME`). Names are per user.
    pub fn bind(addr: &Addr) -> Result<ShmListener> {
        let Addr::Shm(name) = addr else {
            return Err(Error::BadAddress {
                addr: addr.to_string(),
                reason: "the shm backend needs an shm:// address".into(),
            });
        };
        let sa = SocketAddr::from_abstract_name(socket_name(name))
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
        let uid =
            sys::peer_uid(stream.as_raw_fd()).map_err(|e| Error::io("SO_PEERCRED", &*what, e))?;
        if uid != sys::euid() {
            return Err(Error::protocol(
                &what,
                format!("connection from uid {uid} refused (owner-only)"),
            ));
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
        sys::send_with_fd(stream.as_raw_fd(), b"K", None)
            .map_err(|e| Error::io("send", &*what, e))?;
        stream
            .set_read_timeout(None)
            .map_err(|e| Error::io("setsockopt", &*what, e))?;
        ShmEndpoint::new(self.addr.clone(), stream, region, link, 1)
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

/// One of our registered windows: the handle and its slot in our shared table.
#[derive(Debug)]
struct LocalWin {
    window: Window,
    slot: usize,
}

#[derive(Debug, Default)]
struct LocalSpace {
    table: WindowTable<LocalWin>,
    alloc: OffsetAllocator,
    free_slots: Vec<usize>,
    next_slot: usize,
}

/// A peer window we have mapped, valid while its table stamp is unchanged.
#[derive(Debug, Clone)]
struct PeerWin {
    entry: Entry,
    view: MemView,
}

#[derive(Debug, Default)]
struct Ctl {
    /// Window memory received from the peer, by window offset, not yet mapped: the memory
    /// object and where in it the window starts.
    pending: HashMap<u64, (OwnedFd, u64)>,
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
    ctl: Mutex<Ctl>,
    gone: Gone,
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
            || opts.ring_bytes < 16 * 4096
            || opts.chunk_bytes == 0
            || opts.chunk_bytes > opts.ring_bytes / 4
        {
            return Err(Error::invalid(
                "connect",
                format!("ring of {} bytes with {}-byte chunks: the ring must be a power of two of at least 64 KiB and chunks at most a quarter of it", opts.ring_bytes, opts.chunk_bytes),
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
        Ok(ShmEndpoint {
            addr,
            side,
            opts: ShmOptions {
                ring_bytes: geo.ring_cap,
                chunk_bytes: geo.max_chunk,
                ..ShmOptions::from_env()
            },
            _segment: segment,
            tx: Mutex::new(Producer::new(link.ring(side), geo.max_chunk)),
            rx: Mutex::new(Consumer::new(link.ring(1 - side), geo.max_chunk)),
            link,
            sock,
            local: RwLock::new(LocalSpace::default()),
            peer: RwLock::new(BTreeMap::new()),
            ctl: Mutex::new(Ctl::default()),
            gone: Gone::new(),
            rma_issued: AtomicU64::new(0),
            probed: AtomicU64::new(0),
        })
    }

    /// Sets how long waiting calls spin before sleeping.
    pub fn set_spin(&mut self, spin: Duration) {
        self.opts.spin = spin;
    }

    /// The options in effect (ring geometry as agreed with the peer).
    pub fn options(&self) -> ShmOptions {
        self.opts
    }

    // ---- liveness -------------------------------------------------------------------

    fn peer_gone_error(&self) -> Error {
        let cause = if self.link.is_closed(1 - self.side) {
            "it closed the endpoint"
        } else {
            "its process exited or was killed (control socket hung up)"
        };
        Error::peer_gone(&self.addr, cause)
    }

    /// Ok if the peer is still there; checks the shared "closed" word and the control
    /// socket's hang-up state (one `poll` system call).
    fn check_alive(&self) -> Result<()> {
        if self.gone.get()
            || self.link.is_closed(1 - self.side)
            || sys::hung_up(self.sock.as_raw_fd())
        {
            self.gone.set();
            return Err(self.peer_gone_error());
        }
        Ok(())
    }

    /// The last look at the ring after the peer was found gone (by this thread or, through
    /// `gone`, another): see [`Link::last_look`].
    fn last_look(&self, ready: impl FnOnce() -> bool) -> bool {
        self.link.last_look(1 - self.side, ready)
    }

    /// For calls that do not wait: [`ShmEndpoint::check_alive`], but at most once per
    /// [`POLL_PROBE_NS`], so a `try_recv` loop notices a killed peer (whose ring simply
    /// stays empty), and a `send` one that exited (whose ring still has room), without a
    /// system call on every turn.
    fn probe_alive_now_and_then(&self) -> Result<()> {
        // A peer that closed says so in shared memory: that costs one load, check it always.
        if self.link.is_closed(1 - self.side) {
            self.gone.set();
            return Err(self.peer_gone_error());
        }
        let now = sys::coarse_clock_ns();
        if now.saturating_sub(self.probed.load(Ordering::Relaxed)) < POLL_PROBE_NS {
            return Ok(());
        }
        self.probed.store(now, Ordering::Relaxed);
        self.check_alive()
    }

    /// Waits until `ready()`: spins for `opts.spin`, then sleeps on `word` (a futex the
    /// other side wakes), checking the peer's liveness every [`LIVENESS_TICK`].
    fn wait(
        &self,
        word: &AtomicU32,
        mut ready: impl FnMut() -> bool,
        deadline: Option<Instant>,
        op: &'static str,
    ) -> Result<()> {
        let start = Instant::now();
        while start.elapsed() < self.opts.spin {
            for _ in 0..64 {
                if ready() {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
        }
        loop {
            if let Err(gone) = self.check_alive() {
                // The peer may have made us ready just before it went (a last message,
                // then close): what it did before going still counts.
                return if self.last_look(ready) {
                    Ok(())
                } else {
                    Err(gone)
                };
            }
            let mut tick = LIVENESS_TICK;
            if let Some(d) = deadline {
                let now = Instant::now();
                if now >= d {
                    return Err(Error::Timeout {
                        op,
                        resource: self.addr.to_string(),
                        after: d.saturating_duration_since(start),
                    });
                }
                tick = tick.min(d - now);
            }
            if sleep_once(word, &mut ready, tick) {
                return Ok(());
            }
        }
    }

    // ---- messages -------------------------------------------------------------------

    fn send_locked(&self, tx: &mut Producer, msg: &[u8]) -> Result<()> {
        let chunk = tx.max_chunk();
        let total = msg.len() as u64;
        let mut sent = 0usize;
        loop {
            let n = (msg.len() - sent).min(chunk);
            let piece = &msg[sent..sent + n];
            let (first, more) = (sent == 0, sent + n < msg.len());
            if !tx.try_push(piece, first, more, total) {
                let ring = *tx.ring();
                self.wait(ring.producer_wait(), || tx.fits(n), None, "send")?;
                let pushed = tx.try_push(piece, first, more, total);
                debug_assert!(pushed);
            }
            sent += n;
            if sent >= msg.len() {
                return Ok(());
            }
        }
    }

    fn recv_locked(
        &self,
        rx: &mut Consumer,
        buf: &mut Vec<u8>,
        deadline: Option<Instant>,
        block: bool,
    ) -> Result<Progress<usize>> {
        buf.clear();
        let mut started = false;
        loop {
            let rec = match rx.peek() {
                Ok(Some(rec)) => rec,
                Ok(None) => {
                    if !block && !started {
                        if !self.gone.get() {
                            return Ok(Progress::WouldBlock);
                        }
                        // `gone` may have been set by another thread (a `send` that found
                        // the peer closed) after our look at the ring: what the peer sent
                        // before it closed still comes first.
                        if self.last_look(|| rx.ready()) {
                            continue;
                        }
                        return Err(self.peer_gone_error());
                    }
                    let ring = *rx.ring();
                    // Once a message has begun, its rest is already on the way: wait for it
                    // without the deadline so a timeout never consumes half a message.
                    let dl = if started { None } else { deadline };
                    self.wait(ring.consumer_wait(), || rx.ready(), dl, "recv")?;
                    continue;
                }
                Err(corrupt) => {
                    self.gone.set();
                    return Err(Error::protocol(&self.addr, corrupt.0));
                }
            };
            if rec.first == started {
                self.gone.set();
                return Err(Error::protocol(
                    &self.addr,
                    "message records out of sequence",
                ));
            }
            if rec.first {
                started = true;
                // Reserve up front, but never trust a huge announced length blindly.
                buf.reserve((rec.total as usize).min(64 << 20));
            }
            buf.reserve(rec.len);
            let at = buf.len();
            // SAFETY: `reserve` guaranteed `rec.len` bytes of spare capacity at `at`; they
            // are fully written by `copy_out` before `set_len` exposes them.
            unsafe {
                rx.copy_out(&rec, buf.as_mut_ptr().add(at));
                buf.set_len(at + rec.len);
            }
            rx.pop(&rec);
            if !rec.more {
                return Ok(Progress::Ready(buf.len()));
            }
        }
    }

    // ---- windows ----------------------------------------------------------------------

    fn local_find(&self, offset: u64, len: usize) -> Result<Window> {
        let space = self.local.read().expect("local windows lock");
        let (_, w) = space
            .table
            .find(offset, len as u64, Access::NONE, Side::Local, &self.addr)?;
        Ok(w.window.clone())
    }

    /// A view of `len` bytes of the peer's space at `offset`, checked for `need`.
    fn peer_view(&self, offset: u64, len: usize, need: Access) -> Result<MemView> {
        let table = self.link.table(1 - self.side);
        {
            let cache = self.peer.read().expect("peer windows lock");
            if let Some((_, pw)) = cache.range(..=offset).next_back() {
                let d = pw.entry.desc;
                let inside = offset
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= d.offset + d.len);
                if inside && d.access.contains(need) && table.stamp(pw.entry.slot) == pw.entry.stamp
                {
                    let start = (offset - d.offset) as usize;
                    return Ok(MemView::sub(pw.view.region().clone(), start, len)
                        .expect("inside the window"));
                }
            }
        }
        self.peer_view_slow(offset, len, need)
    }

    /// Cache miss: read the peer's table, check the range there (precise errors), map the
    /// window if it is new.
    fn peer_view_slow(&self, offset: u64, len: usize, need: Access) -> Result<MemView> {
        let table = self.link.table(1 - self.side);
        let mut snapshot = WindowTable::default();
        for e in table.active() {
            // Overlapping entries would be a corrupt table; ignore the later ones.
            let _ = snapshot.insert(e.desc, e);
        }
        let (_, entry) = snapshot.find(offset, len as u64, need, Side::Remote, &self.addr)?;
        let entry = *entry;
        let mut cache = self.peer.write().expect("peer windows lock");
        // Drop stale mappings while we hold the lock.
        cache.retain(|_, pw| table.stamp(pw.entry.slot) == pw.entry.stamp);
        let region = match cache.get(&entry.desc.offset) {
            Some(pw) if pw.entry.stamp == entry.stamp => pw.view.region().clone(),
            _ => {
                let (fd, file_off) = self.take_window_fd(entry.desc.offset)?;
                let file = File::from(fd);
                let size = file
                    .metadata()
                    .map_err(|e| Error::io("fstat", self.addr.to_string(), e))?
                    .len();
                let fits = file_off.is_multiple_of(PAGE as u64)
                    && file_off
                        .checked_add(entry.desc.len)
                        .is_some_and(|end| end <= size);
                if !sys::is_size_sealed(&file) || !fits {
                    return Err(Error::protocol(
                        &self.addr,
                        format!(
                            "window {} memory is not size-sealed, or {} bytes at {file_off:#x} \
                             do not fit in its {size} bytes",
                            entry.desc, entry.desc.len
                        ),
                    ));
                }
                let region = Arc::new(Region::shared(
                    &file,
                    file_off,
                    entry.desc.len as usize,
                    false,
                    "peer window",
                )?);
                cache.insert(
                    entry.desc.offset,
                    PeerWin {
                        entry,
                        view: MemView::whole(region.clone()),
                    },
                );
                region
            }
        };
        let start = (offset - entry.desc.offset) as usize;
        Ok(MemView::sub(region, start, len).expect("inside the window"))
    }

    /// The memory object of the peer window at `offset` and where in it the window starts,
    /// read from the control socket.
    fn take_window_fd(&self, offset: u64) -> Result<(OwnedFd, u64)> {
        let mut ctl = self.ctl.lock().expect("control socket lock");
        loop {
            if let Some(got) = ctl.pending.remove(&offset) {
                return Ok(got);
            }
            let mut rec = [0u8; CTL_RECORD];
            let mut fds = Vec::new();
            // The peer sends the descriptor before it publishes the table entry, so it
            // is already queued; blocking here can only mean a broken peer.
            let got = sys::recv_with_fds(self.sock.as_raw_fd(), &mut rec, &mut fds, true).map_err(
                |e| {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        self.gone.set();
                        self.peer_gone_error()
                    } else {
                        Error::io("recvmsg", self.addr.to_string(), e)
                    }
                },
            )?;
            if !got {
                return Err(Error::protocol(
                    &self.addr,
                    format!("window at {offset:#x} was published without its memory"),
                ));
            }
            let kind = u32::from_le_bytes(rec[..4].try_into().expect("4 bytes"));
            let off = u64::from_le_bytes(rec[8..16].try_into().expect("8 bytes"));
            let file_off = u64::from_le_bytes(rec[24..32].try_into().expect("8 bytes"));
            match (kind, fds.pop()) {
                (CTL_WINDOW, Some(fd)) => {
                    ctl.pending.insert(off, (fd, file_off));
                }
                _ => {
                    return Err(Error::protocol(
                        &self.addr,
                        format!("control record kind {kind} is unknown"),
                    ))
                }
            }
        }
    }

    fn alloc_slot(space: &mut LocalSpace) -> Option<usize> {
        if let Some(s) = space.free_slots.pop() {
            return Some(s);
        }
        if space.next_slot < TABLE_SLOTS {
            space.next_slot += 1;
            return Some(space.next_slot - 1);
        }
        None
    }

    fn count_rma(&self) {
        self.rma_issued.fetch_add(1, Ordering::Relaxed);
    }

    /// Ok unless the peer is gone, for calls that may not wait and so would otherwise never
    /// look: the sticky `gone` flag, the peer's closed word (one load), and now and then the
    /// control socket (a peer that exited or was killed sets no closed word).
    fn check_not_gone(&self) -> Result<()> {
        if self.gone.get() {
            return Err(self.peer_gone_error());
        }
        self.probe_alive_now_and_then()
    }

    fn finish_rma(&self, flags: RmaFlags) -> Result<()> {
        self.count_rma();
        if flags.sync {
            fence(Ordering::SeqCst);
            self.check_alive()?;
        }
        Ok(())
    }
}

impl Endpoint for ShmEndpoint {
    fn backend(&self) -> &'static str {
        "shm"
    }

    fn local_addr(&self) -> &Addr {
        &self.addr
    }

    fn peer_addr(&self) -> &Addr {
        &self.addr
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            map_remote: true,
            cpu_free_rma: true,
            max_try_send: self.opts.chunk_bytes,
        }
    }

    fn send(&self, msg: &[u8]) -> Result<()> {
        self.check_not_gone()?;
        let mut tx = self.tx.lock().expect("send lock");
        self.send_locked(&mut tx, msg)
    }

    fn try_send(&self, msg: &[u8]) -> Result<Progress<()>> {
        self.check_not_gone()?;
        let limit = self.opts.chunk_bytes;
        if msg.len() > limit {
            return Err(Error::MessageTooLarge {
                op: "try_send",
                endpoint: self.addr.to_string(),
                len: msg.len(),
                limit,
            });
        }
        let Ok(mut tx) = self.tx.try_lock() else {
            return Ok(Progress::WouldBlock);
        };
        if tx.try_push(msg, true, false, msg.len() as u64) {
            Ok(Progress::Ready(()))
        } else {
            self.probe_alive_now_and_then()?;
            Ok(Progress::WouldBlock)
        }
    }

    fn recv_timeout(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut rx = self.rx.lock().expect("receive lock");
        match self.recv_locked(&mut rx, buf, deadline, true)? {
            Progress::Ready(n) => Ok(n),
            Progress::WouldBlock => unreachable!("blocking receive"),
        }
    }

    fn try_recv(&self, buf: &mut Vec<u8>) -> Result<Progress<usize>> {
        let Ok(mut rx) = self.rx.try_lock() else {
            return Ok(Progress::WouldBlock);
        };
        let r = self.recv_locked(&mut rx, buf, None, false)?;
        if !r.is_ready() && self.probe_alive_now_and_then().is_err() {
            // A peer that sent its last message and closed between the look above and the
            // probe: the message is delivered first (the probe marked the endpoint gone, so
            // this takes the last look, and with the ring empty it is the peer-gone error).
            return self.recv_locked(&mut rx, buf, None, false);
        }
        Ok(r)
    }

    fn register(&self, len: usize, access: Access) -> Result<Window> {
        if len == 0 {
            return Err(Error::invalid(
                "register",
                "window length must be at least 1 byte",
            ));
        }
        self.check_not_gone()?;
        let name = format!("accio-window-of-{}", self.addr);
        let region = Region::shareable(len, &name, true)?;
        self.register_view(&MemView::whole(Arc::new(region)), access)
    }

    fn register_view(&self, view: &MemView, access: Access) -> Result<Window> {
        let Some(file) = view.region().file() else {
            return Err(Error::invalid(
                "register_view",
                format!(
                    "{} shares window memory with its peer process: register a view of a \
                     Region::shareable region, not of private memory",
                    self.addr
                ),
            ));
        };
        if view.is_empty() || !view.start().is_multiple_of(PAGE) {
            return Err(Error::invalid(
                "register_view",
                format!(
                    "a window must start on a page boundary and hold at least 1 byte \
                     (got {} bytes at byte {:#x} of its region)",
                    view.len(),
                    view.start()
                ),
            ));
        }
        self.check_not_gone()?;
        let len = view.len();
        let mut space = self.local.write().expect("local windows lock");
        let slot = ShmEndpoint::alloc_slot(&mut space).ok_or_else(|| {
            Error::invalid(
                "register",
                format!(
                    "{} already has the maximum of {TABLE_SLOTS} windows registered",
                    self.addr
                ),
            )
        })?;
        let offset = space.alloc.allocate(len);
        let window = Window::new(view.clone(), offset, access);
        // The descriptor goes out before the table entry is published, so a peer that
        // sees the entry always finds the descriptor queued.
        let mut rec = [0u8; CTL_RECORD];
        rec[..4].copy_from_slice(&CTL_WINDOW.to_le_bytes());
        rec[4] = access.bits();
        rec[8..16].copy_from_slice(&offset.to_le_bytes());
        rec[16..24].copy_from_slice(&(len as u64).to_le_bytes());
        rec[24..32].copy_from_slice(&(view.start() as u64).to_le_bytes());
        sys::send_with_fd(self.sock.as_raw_fd(), &rec, Some(file.as_raw_fd())).map_err(|e| {
            space.free_slots.push(slot);
            if e.kind() == std::io::ErrorKind::BrokenPipe
                || e.kind() == std::io::ErrorKind::ConnectionReset
            {
                self.gone.set();
                self.peer_gone_error()
            } else {
                Error::io("sendmsg", self.addr.to_string(), e)
            }
        })?;
        let desc = window.desc();
        space.table.insert(
            desc,
            LocalWin {
                window: window.clone(),
                slot,
            },
        )?;
        self.link.table(self.side).publish(slot, desc);
        Ok(window)
    }

    fn unregister(&self, offset: u64) -> Result<()> {
        let mut space = self.local.write().expect("local windows lock");
        let (_, w) = space.table.remove(offset).ok_or_else(|| {
            Error::invalid(
                "unregister",
                format!("no window of {} starts at {offset:#x}", self.addr),
            )
        })?;
        self.link.table(self.side).retire(w.slot);
        space.free_slots.push(w.slot);
        Ok(())
    }

    fn write_to(&self, local_off: u64, len: usize, remote_off: u64, flags: RmaFlags) -> Result<()> {
        self.check_not_gone()?;
        let src = self.local_find(local_off, len)?;
        let dst = self.peer_view(remote_off, len, Access::WRITE)?;
        let at = (local_off - src.offset()) as usize;
        // SAFETY: both ranges were checked against their windows; they are different
        // mappings (ours and the peer's), so they do not overlap.
        unsafe { copy_bytes(dst.as_ptr(), src.as_ptr().add(at), len) };
        self.finish_rma(flags)
    }

    fn read_from(
        &self,
        local_off: u64,
        len: usize,
        remote_off: u64,
        flags: RmaFlags,
    ) -> Result<()> {
        self.check_not_gone()?;
        let dst = self.local_find(local_off, len)?;
        let src = self.peer_view(remote_off, len, Access::READ)?;
        let at = (local_off - dst.offset()) as usize;
        // SAFETY: as in write_to, with the roles swapped.
        unsafe { copy_bytes(dst.as_ptr().add(at), src.as_ptr(), len) };
        self.finish_rma(flags)
    }

    fn vwrite_to(&self, src: &[u8], remote_off: u64, flags: RmaFlags) -> Result<()> {
        self.check_not_gone()?;
        let dst = self.peer_view(remote_off, src.len(), Access::WRITE)?;
        // SAFETY: `dst` covers src.len() checked bytes of a peer mapping; `src` is a Rust
        // slice of caller memory, which is never a peer window mapping of this endpoint.
        unsafe { copy_bytes(dst.as_ptr(), src.as_ptr(), src.len()) };
        self.finish_rma(flags)
    }

    fn vread_from(&self, dst: &mut [u8], remote_off: u64, flags: RmaFlags) -> Result<()> {
        self.check_not_gone()?;
        let src = self.peer_view(remote_off, dst.len(), Access::READ)?;
        // SAFETY: as in vwrite_to.
        unsafe { copy_bytes(dst.as_mut_ptr(), src.as_ptr(), dst.len()) };
        self.finish_rma(flags)
    }

    fn fence_mark(&self) -> Result<Mark> {
        // Every RMA completes before its call returns, so a mark names completed work.
        fence(Ordering::SeqCst);
        Ok(Mark(self.rma_issued.load(Ordering::Relaxed)))
    }

    fn fence_wait(&self, _mark: Mark) -> Result<()> {
        fence(Ordering::SeqCst);
        self.check_alive()
    }

    fn fence_signal(&self, local: Option<(u64, u64)>, remote: Option<(u64, u64)>) -> Result<()> {
        self.check_not_gone()?;
        // Check both targets before storing either, so a bad argument stores nothing.
        // Windows start on page boundaries, so offset alignment is address alignment.
        for (side, target) in [("local", local), ("remote", remote)] {
            if let Some((off, _)) = target {
                if off % 8 != 0 {
                    return Err(Error::invalid(
                        "fence_signal",
                        format!("{side} signal offset {off:#x} is not 8-byte aligned"),
                    ));
                }
            }
        }
        let local_view = match local {
            Some((off, _)) => {
                let w = self.local_find(off, 8)?;
                Some(
                    MemView::sub(w.view().region().clone(), (off - w.offset()) as usize, 8)
                        .expect("checked"),
                )
            }
            None => None,
        };
        let remote_view = match remote {
            Some((off, _)) => Some(self.peer_view(off, 8, Access::WRITE)?),
            None => None,
        };
        // Earlier RMAs are complete (they are synchronous copies); the release stores
        // order their data before the signal values for any acquiring reader.
        if let (Some(v), Some((_, val))) = (&remote_view, remote) {
            v.store_u64(0, val)?;
        }
        if let (Some(v), Some((_, val))) = (&local_view, local) {
            v.store_u64(0, val)?;
        }
        self.count_rma();
        Ok(())
    }

    fn map_remote(&self, remote_off: u64, len: usize) -> Result<RemoteMap> {
        self.check_not_gone()?;
        let view = self.peer_view(remote_off, len, Access::READ)?;
        Ok(RemoteMap::new(view, remote_off))
    }
}

impl Drop for ShmEndpoint {
    fn drop(&mut self) {
        self.link.mark_closed(self.side);
        // Wake a peer sleeping on either ring so it notices at once.
        sys::futex_wake(self.link.ring(self.side).consumer_wait());
        sys::futex_wake(self.link.ring(1 - self.side).producer_wait());
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
    }
}
