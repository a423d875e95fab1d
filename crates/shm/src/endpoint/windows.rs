//! Window tables: ours (what we registered) and the peer's (read from its shared table,
//! mapped on first use), and the control-socket records that carry window memory.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use accio_core::{
    Access, Error, MemView, OffsetAllocator, Region, Result, Side, Window, WindowTable, PAGE,
};

use super::device::{DeviceRecord, DeviceWin, DEVICE_RECORD};
use super::ShmEndpoint;
use crate::link::{Entry, TABLE_SLOTS};
use crate::sys;

/// Control-socket record: kind, access, window offset, length, and where the window starts
/// in the memory object sent with it (windows; zero for files).
pub(super) const CTL_RECORD: usize = 32;
pub(super) const CTL_WINDOW: u32 = 1;
/// Control record of a file lent to the peer ([`accio_core::Endpoint::send_file`]).
pub(super) const CTL_FILE: u32 = 2;
/// Control record of a device window: no descriptor, [`DEVICE_RECORD`] bytes follow it
/// (see `device`).
pub(super) const CTL_DEVICE: u32 = 3;

/// One of our registered windows: the handle and its slot in our shared table.
#[derive(Debug)]
pub(super) struct LocalWin {
    pub(super) window: Window,
    pub(super) slot: usize,
}

#[derive(Debug, Default)]
pub(super) struct LocalSpace {
    pub(super) table: WindowTable<LocalWin>,
    /// Our device windows, apart from host ones: the RMA fast paths never see them.
    pub(super) devices: WindowTable<DeviceWin>,
    pub(super) alloc: OffsetAllocator,
    pub(super) free_slots: Vec<usize>,
    next_slot: usize,
}

/// A peer window we have mapped, valid while its table stamp is unchanged.
#[derive(Debug, Clone)]
pub(super) struct PeerWin {
    entry: Entry,
    view: MemView,
}

#[derive(Debug, Default)]
pub(super) struct Ctl {
    /// Window memory received from the peer, by window offset, not yet mapped: the memory
    /// object and where in it the window starts.
    pending: HashMap<u64, (OwnedFd, u64)>,
    /// Files received from the peer, not taken yet, in the order sent.
    files: VecDeque<OwnedFd>,
    /// Device windows announced by the peer, by window offset, not yet opened.
    pub(super) devices: HashMap<u64, DeviceRecord>,
}

/// A window one thread used last, with its mapping held, so that the next RMA to it takes
/// no lock and touches no shared counter: the small-RMA hot path is this cache, a
/// validity check (the peer table's stamp, or our generation of local windows) and the
/// copy. A withdrawn window's memory stays mapped until the thread's next RMA that misses
/// (RMA to it is refused by the check meanwhile). Dropping an endpoint empties the
/// dropping thread's cache at once, and every other thread's at its next shm RMA call
/// (any endpoint) or its exit: until then such a thread keeps at most one peer and one
/// local window of the closed endpoint mapped.
///
/// The entries are plain values in a thread-local without a destructor (an access is one
/// address computation: no lazy-registration check, no borrow flag, ~30 of the ~190
/// instructions a 64 B `write_to` took with a `RefCell` of entries that held their
/// mappings); the mappings they point into are held apart, in [`KEEP`], whose destructor
/// empties the entries first.
#[derive(Clone, Copy)]
struct Hot {
    /// 0: empty (endpoint ids start at 1).
    endpoint: u64,
    /// [`DROPS`] when filled.
    drops: u64,
    /// Peer windows: the table stamp; local ones: `local_gen`.
    version: u64,
    slot: usize,
    start: u64,
    end: u64,
    access: Access,
    base: *mut u8,
}

const EMPTY: Hot = Hot {
    endpoint: 0,
    drops: 0,
    version: 0,
    slot: 0,
    start: 0,
    end: 0,
    access: Access::NONE,
    base: std::ptr::null_mut(),
};

impl Hot {
    fn at(&self, endpoint: u64, offset: u64, len: usize) -> Option<*mut u8> {
        let end = offset.checked_add(len as u64)?;
        if self.endpoint != endpoint || offset < self.start || end > self.end {
            return None;
        }
        // SAFETY: offset..end lies inside the window, which this thread's [`KEEP`] keeps
        // mapped while the entry is filled.
        Some(unsafe { self.base.add((offset - self.start) as usize) })
    }
}

/// This thread's entries: the last peer window and the last local window.
struct HotCache {
    peer: Cell<Hot>,
    local: Cell<Hot>,
}

impl HotCache {
    fn entry(&self, peer: bool) -> &Cell<Hot> {
        if peer {
            &self.peer
        } else {
            &self.local
        }
    }

    fn clear(&self) {
        self.peer.set(EMPTY);
        self.local.set(EMPTY);
    }
}

/// The mappings of this thread's [`HOT`] entries: `[local, peer]`.
struct Keep(RefCell<[Option<Arc<Region>>; 2]>);

impl Drop for Keep {
    fn drop(&mut self) {
        // The entries must not outlive the mappings they point into.
        let _ = HOT.try_with(HotCache::clear);
    }
}

thread_local! {
    // `const` and no destructor: no lazy-initialization check on every access.
    static HOT: HotCache = const {
        HotCache {
            peer: Cell::new(EMPTY),
            local: Cell::new(EMPTY),
        }
    };
    static KEEP: Keep = const { Keep(RefCell::new([None, None])) };
}

static NEXT_ENDPOINT_ID: AtomicU64 = AtomicU64::new(1);

/// Endpoints dropped so far in this process: a cache entry filled before a drop is
/// emptied at its thread's next look (a plain load of a line that rarely changes).
static DROPS: AtomicU64 = AtomicU64::new(0);

/// Empties this thread's cache of `endpoint`'s windows and tells other threads to empty
/// theirs (see [`Hot`]); called when the endpoint is dropped.
pub(super) fn forget_endpoint(endpoint: u64) {
    DROPS.fetch_add(1, Ordering::Release);
    for peer in [false, true] {
        if HOT.with(|h| h.entry(peer).get().endpoint) == endpoint {
            HOT.with(|h| h.entry(peer).set(EMPTY));
            // `try_with`: the thread may be exiting, its mappings already let go.
            let _ = KEEP.try_with(|k| k.0.borrow_mut()[peer as usize] = None);
        }
    }
}

/// Fills this thread's `peer` or `local` entry with `hot`, holding `keep` (the mapping it
/// points into). Not cached when the thread is exiting.
fn hot_fill(peer: bool, hot: Hot, keep: Arc<Region>) {
    HOT.with(|h| h.entry(peer).set(EMPTY));
    let kept = KEEP
        .try_with(|k| k.0.borrow_mut()[peer as usize] = Some(keep))
        .is_ok();
    if kept {
        HOT.with(|h| h.entry(peer).set(hot));
    }
}

/// This thread's entry (`peer` or `local`), or `None`: empty, or filled before an
/// endpoint was dropped (then the cache is emptied first).
#[inline]
fn hot_entry(peer: bool) -> Option<Hot> {
    let e = HOT.with(|h| h.entry(peer).get());
    if e.endpoint == 0 {
        return None;
    }
    if e.drops != DROPS.load(Ordering::Relaxed) {
        hot_clear();
        return None;
    }
    Some(e)
}

#[cold]
fn hot_clear() {
    HOT.with(HotCache::clear);
    let _ = KEEP.try_with(|k| *k.0.borrow_mut() = [None, None]);
}

/// Looks up this thread's cache entry (`peer` or `local`) with `hit`.
#[inline]
fn hot_lookup(peer: bool, hit: impl FnOnce(&Hot) -> Option<*mut u8>) -> Option<*mut u8> {
    hit(&hot_entry(peer)?)
}

pub(super) fn next_endpoint_id() -> u64 {
    NEXT_ENDPOINT_ID.fetch_add(1, Ordering::Relaxed)
}

impl ShmEndpoint {
    pub(super) fn local_find(&self, offset: u64, len: usize) -> Result<Window> {
        let space = self.local.read().expect("local windows lock");
        let (_, w) = space
            .table
            .find(offset, len as u64, Access::NONE, Side::Local, &self.addr)?;
        Ok(w.window.clone())
    }

    /// Runs `f` on the address of local window bytes `offset..offset + len` (any rights:
    /// they concern the peer), with the window kept registered meanwhile. No reference
    /// count is touched: the RMA hot path.
    pub(super) fn with_local<R>(
        &self,
        offset: u64,
        len: usize,
        f: impl FnOnce(*mut u8) -> R,
    ) -> Result<R> {
        let gen = self.local_gen.load(Ordering::Acquire);
        let hot = hot_lookup(false, |e| {
            if e.version != gen {
                return None;
            }
            e.at(self.id, offset, len)
        });
        if let Some(p) = hot {
            return Ok(f(p));
        }
        let space = self.local.read().expect("local windows lock");
        let gen = self.local_gen.load(Ordering::Acquire);
        let hint = self.local_hint.load(Ordering::Relaxed);
        let (d, w) = match space.table.get(hint) {
            Some((d, w))
                if offset >= d.offset
                    && offset
                        .checked_add(len as u64)
                        .is_some_and(|end| end <= d.offset + d.len) =>
            {
                (d, w)
            }
            _ => {
                let (d, w) =
                    space
                        .table
                        .find(offset, len as u64, Access::NONE, Side::Local, &self.addr)?;
                self.local_hint.store(d.offset, Ordering::Relaxed);
                (d, w)
            }
        };
        let view = w.window.view();
        let hot = Hot {
            endpoint: self.id,
            drops: DROPS.load(Ordering::Acquire),
            version: gen,
            slot: 0,
            start: d.offset,
            end: d.offset + d.len,
            access: d.access,
            base: view.as_ptr(),
        };
        // SAFETY: the range was checked against the window, which the read guard
        // keeps registered (and its memory mapped) while `f` runs.
        let p = unsafe { view.as_ptr().add((offset - d.offset) as usize) };
        hot_fill(false, hot, view.region().clone());
        Ok(f(p))
    }

    /// Runs `f` on the addresses of local window bytes `local_off..+len` and peer bytes
    /// `remote_off..+len` (checked for `need`): `write_to` and `read_from`. When this
    /// thread's cache holds both windows, one look at it serves both (one load of
    /// [`DROPS`]); otherwise [`ShmEndpoint::with_local`]
    /// and [`ShmEndpoint::with_peer`] fill it.
    pub(super) fn with_both<R>(
        &self,
        local_off: u64,
        remote_off: u64,
        len: usize,
        need: Access,
        f: impl FnOnce(*mut u8, *mut u8) -> R,
    ) -> Result<R> {
        let gen = self.local_gen.load(Ordering::Acquire);
        let table = self.link.table(1 - self.side);
        let hit = (|| {
            let (l, p) = HOT.with(|h| (h.local.get(), h.peer.get()));
            let drops = DROPS.load(Ordering::Relaxed);
            if l.drops != drops
                || p.drops != drops
                || l.version != gen
                || !p.access.contains(need)
                || table.stamp(p.slot) != p.version
            {
                return None;
            }
            // An empty entry has endpoint 0, which no endpoint has: `at` refuses it.
            Some((
                l.at(self.id, local_off, len)?,
                p.at(self.id, remote_off, len)?,
            ))
        })();
        if let Some((l, p)) = hit {
            return Ok(f(l, p));
        }
        self.with_local(local_off, len, |l| {
            self.with_peer(remote_off, len, need, |p| f(l, p))
        })?
    }

    /// Runs `f` on the address of `len` bytes of the peer's space at `offset`, checked for
    /// `need`, with the mapping kept meanwhile. The hot path (a mapped window, usually the
    /// last one used) takes one read lock and compares once; no reference count is
    /// touched.
    pub(super) fn with_peer<R>(
        &self,
        offset: u64,
        len: usize,
        need: Access,
        f: impl FnOnce(*mut u8) -> R,
    ) -> Result<R> {
        let table = self.link.table(1 - self.side);
        let hot = hot_lookup(true, |e| {
            if !e.access.contains(need) || table.stamp(e.slot) != e.version {
                return None;
            }
            e.at(self.id, offset, len)
        });
        if let Some(p) = hot {
            return Ok(f(p));
        }
        {
            let cache = self.peer.read().expect("peer windows lock");
            let covers = |pw: &PeerWin| {
                let d = pw.entry.desc;
                offset >= d.offset
                    && offset
                        .checked_add(len as u64)
                        .is_some_and(|end| end <= d.offset + d.len)
            };
            let hint = self.peer_hint.load(Ordering::Relaxed);
            let hit = match cache.get(&hint) {
                Some(pw) if covers(pw) => Some(pw),
                _ => match cache.range(..=offset).next_back() {
                    Some((k, pw)) if covers(pw) => {
                        self.peer_hint.store(*k, Ordering::Relaxed);
                        Some(pw)
                    }
                    _ => None,
                },
            };
            if let Some(pw) = hit {
                if pw.entry.desc.access.contains(need)
                    && table.stamp(pw.entry.slot) == pw.entry.stamp
                {
                    let d = pw.entry.desc;
                    let hot = Hot {
                        endpoint: self.id,
                        drops: DROPS.load(Ordering::Acquire),
                        version: pw.entry.stamp,
                        slot: pw.entry.slot,
                        start: d.offset,
                        end: d.offset + d.len,
                        access: d.access,
                        base: pw.view.as_ptr(),
                    };
                    hot_fill(true, hot, pw.view.region().clone());
                    let start = (offset - d.offset) as usize;
                    // SAFETY: `covers` checked the range against the window, whose
                    // mapping the read guard keeps alive while `f` runs.
                    return Ok(f(unsafe { pw.view.as_ptr().add(start) }));
                }
            }
        }
        let view = self.peer_view_slow(offset, len, need)?;
        Ok(f(view.as_ptr()))
    }

    /// A view of `len` bytes of the peer's space at `offset`, checked for `need`.
    pub(super) fn peer_view(&self, offset: u64, len: usize, need: Access) -> Result<MemView> {
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
        // Device windows are not mapped: RMA to them takes the device path (`device`).
        for e in table.active().filter(|e| !e.device) {
            // Overlapping entries would be a corrupt table; ignore the later ones.
            let _ = snapshot.insert(e.desc, e);
        }
        let (_, entry) = snapshot.find(offset, len as u64, need, Side::Remote, &self.addr)?;
        let entry = *entry;
        let mut cache = self.peer.write().expect("peer windows lock");
        // Drop stale mappings while we hold the lock.
        cache.retain(|_, pw| table.stamp(pw.entry.slot) == pw.entry.stamp);
        let region = match cache.get(&entry.desc.offset) {
            Some(pw) if pw.entry.stamp == entry.stamp => {
                if need.contains(Access::WRITE) && !pw.view.region().is_writable() {
                    // The table entry changed its rights without a new stamp: a broken or
                    // hostile peer. Our mapping is read-only; a store would fault.
                    return Err(Error::protocol(
                        &self.addr,
                        format!("window {} claims write access it was not given", entry.desc),
                    ));
                }
                pw.view.region().clone()
            }
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
                // A window we may not write is mapped read-only: its descriptor is
                // read-only anyway (see `register_view`), and a read-only mapping makes
                // any store through it fault here rather than land in the peer.
                let len = entry.desc.len as usize;
                let region = Arc::new(if entry.desc.access.contains(Access::WRITE) {
                    Region::shared(&file, file_off, len, false, "peer window")?
                } else {
                    Region::shared_read_only(&file, file_off, len, "peer window")?
                });
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
        drop(cache);
        // This endpoint does RMA: from now on its calls learn of a vanished peer from a
        // flag (see `liveness`).
        self.watch_hang_up();
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
            // The peer sends the descriptor before it publishes the table entry, so it
            // is already queued; none there can only mean a broken peer.
            if !self.read_ctl(&mut ctl)? {
                return Err(Error::protocol(
                    &self.addr,
                    format!("window at {offset:#x} was published without its memory"),
                ));
            }
        }
    }

    /// The next file the peer sent ([`accio_core::Endpoint::send_file`]).
    pub(super) fn take_file(&self) -> Result<File> {
        let mut ctl = self.ctl.lock().expect("control socket lock");
        loop {
            if let Some(fd) = ctl.files.pop_front() {
                return Ok(File::from(fd));
            }
            // As for windows: the file goes out before the message that announces it.
            if !self.read_ctl(&mut ctl)? {
                return Err(Error::protocol(
                    &self.addr,
                    "a file was announced but not sent",
                ));
            }
        }
    }

    /// Reads one record from the control socket, if one is queued, and files it in `ctl`.
    pub(super) fn read_ctl(&self, ctl: &mut Ctl) -> Result<bool> {
        let mut rec = [0u8; CTL_RECORD];
        let mut fds = Vec::new();
        let got =
            sys::recv_with_fds(self.sock.as_raw_fd(), &mut rec, &mut fds, true).map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    self.gone.set();
                    self.peer_gone_error()
                } else {
                    Error::io("recvmsg", self.addr.to_string(), e)
                }
            })?;
        if !got {
            return Ok(false);
        }
        let kind = u32::from_le_bytes(rec[..4].try_into().expect("4 bytes"));
        let off = u64::from_le_bytes(rec[8..16].try_into().expect("8 bytes"));
        let file_off = u64::from_le_bytes(rec[24..32].try_into().expect("8 bytes"));
        if kind == CTL_DEVICE {
            // No descriptor; the record's payload follows it on the stream.
            let mut payload = [0u8; DEVICE_RECORD];
            let mut more = Vec::new();
            let whole = fds.is_empty()
                && sys::recv_with_fds(self.sock.as_raw_fd(), &mut payload, &mut more, false)
                    .map_err(|e| Error::io("recvmsg", self.addr.to_string(), e))?
                && more.is_empty();
            if !whole {
                return Err(Error::protocol(
                    &self.addr,
                    "a device window record came with a descriptor or without its payload",
                ));
            }
            ctl.devices.insert(off, DeviceRecord::decode(&payload));
            return Ok(true);
        }
        // Exactly one descriptor per record: more would leak, none is a broken peer.
        let fd = match (fds.pop(), fds.is_empty()) {
            (Some(fd), true) => fd,
            _ => {
                return Err(Error::protocol(
                    &self.addr,
                    format!("control record kind {kind} came without exactly one descriptor"),
                ))
            }
        };
        match kind {
            CTL_WINDOW => {
                ctl.pending.insert(off, (fd, file_off));
            }
            CTL_FILE => ctl.files.push_back(fd),
            _ => {
                return Err(Error::protocol(
                    &self.addr,
                    format!("control record kind {kind} is unknown"),
                ))
            }
        }
        Ok(true)
    }

    /// Sends a control record with its descriptor (see [`CTL_RECORD`]).
    pub(super) fn send_ctl(&self, rec: &[u8; CTL_RECORD], fd: &impl AsRawFd) -> Result<()> {
        self.send_ctl_bytes(rec, Some(fd.as_raw_fd()))
    }

    /// Sends `bytes` (records, and a device record's payload) on the control socket, with
    /// `fd` along with the first byte.
    pub(super) fn send_ctl_bytes(
        &self,
        bytes: &[u8],
        fd: Option<std::os::fd::RawFd>,
    ) -> Result<()> {
        sys::send_with_fd(self.sock.as_raw_fd(), bytes, fd).map_err(|e| {
            if e.kind() == std::io::ErrorKind::BrokenPipe
                || e.kind() == std::io::ErrorKind::ConnectionReset
            {
                self.gone.set();
                self.peer_gone_error()
            } else {
                Error::io("sendmsg", self.addr.to_string(), e)
            }
        })
    }

    pub(super) fn alloc_slot(space: &mut LocalSpace) -> Option<usize> {
        if let Some(s) = space.free_slots.pop() {
            return Some(s);
        }
        if space.next_slot < TABLE_SLOTS {
            space.next_slot += 1;
            return Some(space.next_slot - 1);
        }
        None
    }
}
