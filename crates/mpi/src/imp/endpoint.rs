//! The endpoint: messages on the connection's tags, RMA through the dynamic window,
//! the published window table, close and its grave; [`device`] serves device windows.

mod device;

pub(super) use device::serve;

use super::*;
use crate::recvq::{parts, RecvQueue};
use crate::sendq::isend;
use device::{DeviceServer, DEVICE_FLAG};

// ---- endpoint -------------------------------------------------------------------------

/// The window table an endpoint publishes in attached memory for its peer to read.
pub(super) struct Table {
    view: MemView,
    pub(super) addr: u64,
}

impl Table {
    /// Publishes the host windows and, marked [`DEVICE_FLAG`] and with no address, the
    /// device windows.
    fn publish(
        &self,
        windows: &WindowTable<(Window, u64)>,
        devices: &WindowTable<DeviceWindow>,
    ) -> Result<()> {
        let max = (TABLE_BYTES - TABLE_HEADER) / 32;
        if windows.len() + devices.len() > max {
            return Err(Error::invalid(
                "register",
                format!("more than {max} windows on one mpi endpoint"),
            ));
        }
        let base = self.view.as_ptr().cast::<u64>();
        // SAFETY: `base` points to TABLE_BYTES of mapped, 8-aligned memory; the peer reads it
        // with MPI_Get under the sequence protocol (odd = being written).
        unsafe {
            let seq = ptr::read_volatile(base);
            ptr::write_volatile(base, seq + 1);
            std::sync::atomic::fence(Ordering::SeqCst);
            let mut e = base.add(TABLE_HEADER / 8);
            let host = windows
                .iter()
                .map(|(d, (_, addr))| (d, d.access.bits() as u64, *addr));
            let device = devices
                .iter()
                .map(|(d, _)| (d, d.access.bits() as u64 | DEVICE_FLAG, 0));
            for (d, rights, addr) in host.chain(device) {
                ptr::write_volatile(e, d.offset);
                ptr::write_volatile(e.add(1), d.len);
                ptr::write_volatile(e.add(2), rights);
                ptr::write_volatile(e.add(3), addr);
                e = e.add(4);
            }
            ptr::write_volatile(base.add(1), (windows.len() + devices.len()) as u64);
            std::sync::atomic::fence(Ordering::SeqCst);
            ptr::write_volatile(base, seq + 2);
        }
        Ok(())
    }
}

/// Where a window of the peer is: at an MPI address (host memory, reached with one-sided
/// RMA), or in device memory its owner serves (see [`device`]).
#[derive(Clone, Copy, Debug)]
enum Target {
    Host(u64),
    Device,
}

/// A local signal word of `fence_signal`: in a host window, or at a byte of a device
/// window's memory.
enum Word {
    Host(*mut u8),
    Device(Arc<dyn DeviceMemory>, usize),
}

/// An endpoint's own host windows (with each one's MPI address), its offset allocator
/// (device windows take their offsets from it too), and the memory it attached.
type Own = (
    WindowTable<(Window, u64)>,
    OffsetAllocator,
    Vec<Arc<Region>>,
);

pub(super) struct MpiEndpoint {
    m: &'static Mpi,
    peer: c_int,
    local: Addr,
    peer_addr: Addr,
    tx: c_int,
    rx: c_int,
    pub(super) table: Table,
    pub(super) peer_table: u64,
    pub(super) refused: bool,
    windows: Mutex<Own>,
    peer_windows: Mutex<WindowTable<Target>>,
    send_lock: Mutex<SendQueue>,
    /// The receive lock, holding the posted receive and the messages a waiting `send`
    /// received (see `drain`).
    rxq: Mutex<RecvQueue>,
    /// Whether MPI puts the peer on this node (see `direct`).
    near: bool,
    peer_closed: AtomicBool,
    /// When the hot paths probe for the peer's close next (see [`CLOSE_PROBE_EVERY`]).
    /// In [`coarse_us`] microseconds.
    close_probe_at: AtomicU64,
    issued: AtomicU64,
    /// This endpoint's device windows, the service of the peer's requests for them, and
    /// this side's requests for the peer's: one pointer here, off the hot paths' fields.
    server: Arc<DeviceServer>,
}

// SAFETY: MPI request handles are opaque and used under `send_lock`; MPI allows any thread
// (MPI_THREAD_MULTIPLE).
unsafe impl Send for MpiEndpoint {}
// SAFETY: as for Send; shared state is behind mutexes and atomics.
unsafe impl Sync for MpiEndpoint {}

impl std::fmt::Debug for MpiEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiEndpoint")
            .field("local", &self.local.to_string())
            .field("peer", &self.peer_addr.to_string())
            .finish_non_exhaustive()
    }
}

impl MpiEndpoint {
    pub(super) fn new(
        m: &'static Mpi,
        peer: c_int,
        local: Addr,
        peer_addr: Addr,
        tx: c_int,
        rx: c_int,
        peer_table: u64,
    ) -> Result<MpiEndpoint> {
        let (view, _) = m.carve(TABLE_BYTES)?;
        let region = Arc::clone(&m.arena);
        let mut a: ffi::MPI_Aint = 0;
        check(
            // SAFETY: the view is mapped; MPI_Get_address only computes the address.
            unsafe { ffi::MPI_Get_address(view.as_ptr().cast(), &mut a) },
            "MPI_Get_address",
        )?;
        let server = Arc::new(DeviceServer::new(peer, tx, rx, local.clone()));
        Ok(MpiEndpoint {
            m,
            peer,
            local,
            peer_addr,
            tx,
            rx,
            table: Table {
                view,
                addr: a as u64,
            },
            peer_table,
            refused: false,
            windows: Mutex::new((
                WindowTable::default(),
                OffsetAllocator::default(),
                vec![region],
            )),
            peer_windows: Mutex::new(WindowTable::default()),
            send_lock: Mutex::new(SendQueue::default()),
            rxq: Mutex::new(RecvQueue::new(peer, rx + KIND_MSG, rx + KIND_TAIL)),
            near: m.near.get(peer as usize).copied().unwrap_or(false),
            peer_closed: AtomicBool::new(false),
            close_probe_at: AtomicU64::new(0),
            issued: AtomicU64::new(0),
            server,
        })
    }

    fn gone(&self) -> Error {
        Error::PeerGone {
            peer: self.peer_addr.to_string(),
            cause: "the peer closed the connection".into(),
        }
    }

    /// Fails with PeerGone once the peer's close arrived (checking for it without waiting).
    fn check_open(&self) -> Result<()> {
        if self.peer_closed.load(Ordering::Acquire) {
            return Err(self.gone());
        }
        let mut buf = Vec::new();
        if try_take(self.peer, self.rx + KIND_CLOSE, &mut buf)?.is_some() {
            self.peer_closed.store(true, Ordering::Release);
            return Err(self.gone());
        }
        Ok(())
    }

    /// As [`check_open`](Self::check_open), but probes MPI at most every
    /// [`CLOSE_PROBE_EVERY`]: for the paths a message takes, where a probe per call would
    /// double the MPI calls of a small message.
    fn check_open_soon(&self) -> Result<()> {
        if self.peer_closed.load(Ordering::Acquire) {
            return Err(self.gone());
        }
        // Two threads may both probe at the turn of an interval; that costs one more probe.
        let now = coarse_us();
        if now < self.close_probe_at.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.close_probe_at.store(
            now + CLOSE_PROBE_EVERY.as_micros() as u64,
            Ordering::Relaxed,
        );
        self.check_open()
    }

    /// Whether `send` posts the caller's buffer and waits for it (no copy) rather than a
    /// copy it keeps in flight: large messages to a peer on this node, where the copy into a
    /// send buffer cost as much as the transfer (2 MiB streaming, `scripts/compare-mpi.sh`:
    /// 4.2 GB/s buffered against Open MPI's 8.8), and messages too large to buffer.
    /// Off the node a large message is buffered: several in flight keep the network busy
    /// while each one's rendezvous handshake crosses it. Small messages are buffered too:
    /// even a few KiB may wait for the receiver to match them (MPI's eager limit is the
    /// library's choice; Open MPI over UCX's self transport held a 3000-byte send), and a
    /// sender must not wait for a receiver that does not call in.
    fn direct(&self, len: usize) -> bool {
        len > MAX_BUFFERED || (self.near && len >= DIRECT_NEAR)
    }

    /// How this endpoint's waits poll: spinning long to a peer on this node, whose
    /// messages need no interrupt to arrive, briefly to one off the node (see [`Backoff`]).
    fn backoff(&self) -> Backoff {
        Backoff::new(if self.near {
            Backoff::SPIN_NEAR
        } else {
            Backoff::SPIN
        })
    }

    /// Sends from the caller's buffer and waits until MPI is done with it. While it waits,
    /// messages that arrive from the peer are received into the queue `recv` takes from
    /// ([`Self::drain`]): a peer blocked in the same kind of send to this rank then
    /// completes, so two ranks that send large messages to each other at once do not wait
    /// for each other forever.
    fn send_direct(&self, msg: &[u8]) -> Result<()> {
        let (head, tail) = parts(msg.len());
        let mut reqs = [isend(&msg[head], self.peer, self.tx + KIND_MSG)?, unsafe {
            // SAFETY: reading an initialized extern static of the MPI shim.
            ffi::RSMPI_REQUEST_NULL
        }];
        if let Some(tail) = tail {
            reqs[1] = isend(&msg[tail], self.peer, self.tx + KIND_TAIL)?;
        }
        let mut b = self.backoff();
        let mut misses = 0u32;
        let mut flag: c_int = 0;
        let test = |reqs: &mut [ffi::MPI_Request; 2], flag: &mut c_int| {
            check(
                // SAFETY: active or null requests (MPI_Testall skips null ones).
                unsafe { ffi::MPI_Testall(2, reqs.as_mut_ptr(), flag, ffi::RSMPI_STATUSES_IGNORE) },
                "MPI_Testall",
            )
        };
        loop {
            count_poll();
            test(&mut reqs, &mut flag)?;
            if flag != 0 {
                return Ok(());
            }
            misses += 1;
            if misses >= DRAIN_AFTER {
                self.drain()?;
            }
            if let Err(e) = self.check_open_soon() {
                // A peer that received this message and then closed: its close may arrive
                // before MPI tells this side that the send completed.
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_secs(1) {
                    test(&mut reqs, &mut flag)?;
                    if flag != 0 {
                        return Ok(());
                    }
                    std::thread::yield_now();
                }
                for r in reqs.iter_mut() {
                    // SAFETY: an active or null request; cancel then wait frees it, so `msg`
                    // is no longer referenced by MPI when we return.
                    unsafe {
                        if *r != ffi::RSMPI_REQUEST_NULL {
                            ffi::MPI_Cancel(r);
                            ffi::MPI_Wait(r, ffi::RSMPI_STATUS_IGNORE);
                        }
                    }
                }
                return Err(e);
            }
            b.wait();
        }
    }

    /// Receives every message the peer has sent so far into the queue `recv` takes from
    /// first (see [`Self::send_direct`]). A thread inside `recv` holds the lock and takes
    /// them itself, so then this does nothing.
    fn drain(&self) -> Result<()> {
        match self.rxq.try_lock() {
            Ok(mut q) => q.drain(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().drain(),
            Err(std::sync::TryLockError::WouldBlock) => Ok(()),
        }
    }

    fn flush(&self) -> Result<()> {
        // SAFETY: valid window and rank.
        check(
            unsafe { ffi::MPI_Win_flush(self.peer, self.m.win) },
            "MPI_Win_flush",
        )
    }

    /// Re-reads the peer's published window table.
    fn refresh_peer(&self) -> Result<()> {
        let mut head = [0u64; 2];
        for _ in 0..1000 {
            self.get_raw(head.as_mut_ptr().cast(), 16, self.peer_table)?;
            if head[0] % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let n = head[1] as usize;
            let mut entries = vec![0u64; n * 4];
            if n > 0 {
                self.get_raw(
                    entries.as_mut_ptr().cast(),
                    n * 32,
                    self.peer_table + TABLE_HEADER as u64,
                )?;
            }
            let mut again = [0u64; 1];
            self.get_raw(again.as_mut_ptr().cast(), 8, self.peer_table)?;
            if again[0] != head[0] {
                continue;
            }
            let mut t = WindowTable::default();
            for e in entries.chunks(4) {
                let desc = WindowDesc {
                    offset: e[0],
                    len: e[1],
                    access: Access::from_bits(e[2] as u8).unwrap_or(Access::NONE),
                };
                let target = if e[2] & DEVICE_FLAG != 0 {
                    Target::Device
                } else {
                    Target::Host(e[3])
                };
                t.insert(desc, target)?;
            }
            *lock(&self.peer_windows) = t;
            return Ok(());
        }
        Err(Error::Protocol {
            peer: self.peer_addr.to_string(),
            reason: "its window table kept changing while being read".into(),
        })
    }

    fn get_raw(&self, dst: *mut u8, len: usize, disp: u64) -> Result<()> {
        check(
            // SAFETY: `dst` has `len` writable bytes; the flush completes the get before return.
            unsafe {
                ffi::MPI_Get(
                    dst.cast(),
                    len as c_int,
                    byte(),
                    self.peer,
                    disp as ffi::MPI_Aint,
                    len as c_int,
                    byte(),
                    self.m.win,
                )
            },
            "MPI_Get",
        )?;
        self.flush()
    }

    /// Where the peer's `[off, off+len)` with rights `need` is: its MPI address
    /// (displacement), or in a device window.
    fn remote(&self, off: u64, len: usize, need: Access) -> Result<Target> {
        // The peer sets our stale word (before its unregister returns) when it withdrew a
        // window: re-read its table before trusting the copy.
        // SAFETY: the stale word lies in this endpoint's table view, 8-aligned.
        let stale = unsafe { &*self.table.view.as_ptr().add(STALE_AT).cast::<AtomicU64>() };
        if stale.load(Ordering::Acquire) != 0 {
            stale.store(0, Ordering::Release);
            self.refresh_peer()?;
        }
        let find = |t: &WindowTable<Target>| {
            t.find(off, len as u64, need, Side::Remote, &self.peer_addr)
                .map(|(d, t)| match *t {
                    Target::Host(a) => Target::Host(a + (off - d.offset)),
                    Target::Device => Target::Device,
                })
        };
        if let Ok(a) = find(&lock(&self.peer_windows)) {
            return Ok(a);
        }
        self.refresh_peer()?;
        find(&lock(&self.peer_windows))
    }

    /// The local address of `[off, off+len)` in this endpoint's windows.
    fn local_ptr(&self, off: u64, len: usize) -> Result<*mut u8> {
        let w = lock(&self.windows);
        let (d, (win, _)) =
            w.0.find(off, len as u64, Access::NONE, Side::Local, &self.local)?;
        // SAFETY: the range lies inside the window's view.
        Ok(unsafe { win.view().as_ptr().add((off - d.offset) as usize) })
    }

    fn put(&self, src: *const u8, len: usize, disp: u64) -> Result<()> {
        in_chunks(len, |done, n| {
            check(
                // SAFETY: `src` has `len` readable bytes until local completion (flushed by the
                // caller before it returns); `disp` lies in a window of the peer.
                unsafe {
                    ffi::MPI_Put(
                        src.add(done).cast(),
                        n as c_int,
                        byte(),
                        self.peer,
                        (disp + done as u64) as ffi::MPI_Aint,
                        n as c_int,
                        byte(),
                        self.m.win,
                    )
                },
                "MPI_Put",
            )
        })?;
        self.issued.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    fn get(&self, dst: *mut u8, len: usize, disp: u64) -> Result<()> {
        in_chunks(len, |done, n| {
            check(
                // SAFETY: `dst` has `len` writable bytes; flushed below before return.
                unsafe {
                    ffi::MPI_Get(
                        dst.add(done).cast(),
                        n as c_int,
                        byte(),
                        self.peer,
                        (disp + done as u64) as ffi::MPI_Aint,
                        n as c_int,
                        byte(),
                        self.m.win,
                    )
                },
                "MPI_Get",
            )
        })?;
        self.flush()
    }

    fn complete_write(&self, flags: RmaFlags) -> Result<()> {
        if flags == RmaFlags::SYNC {
            self.flush()
        } else {
            // SAFETY: valid window and rank.
            check(
                unsafe { ffi::MPI_Win_flush_local(self.peer, self.m.win) },
                "MPI_Win_flush_local",
            )
        }
    }

    fn register_region(
        &self,
        region: Arc<Region>,
        view: MemView,
        access: Access,
    ) -> Result<Window> {
        let mut a: ffi::MPI_Aint = 0;
        check(
            // SAFETY: the view is mapped.
            unsafe { ffi::MPI_Get_address(view.as_ptr().cast(), &mut a) },
            "MPI_Get_address",
        )?;
        self.m.attach(&region)?;
        let mut w = lock(&self.windows);
        let off = w.1.allocate(view.len());
        let win = Window::new(view, off, access);
        w.0.insert(win.desc(), (win.clone(), a as u64))?;
        w.2.push(region);
        self.table.publish(&w.0, &lock(&self.server.windows))?;
        Ok(win)
    }
}

impl Endpoint for MpiEndpoint {
    fn backend(&self) -> &'static str {
        "mpi"
    }

    fn local_addr(&self) -> &Addr {
        &self.local
    }

    fn peer_addr(&self) -> &Addr {
        &self.peer_addr
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            map_remote: false,
            cpu_free_rma: false,
            max_try_send: MAX_TRY_SEND,
        }
    }

    fn send(&self, msg: &[u8]) -> Result<()> {
        if msg.len() > i32::MAX as usize {
            return Err(Error::MessageTooLarge {
                op: "send",
                endpoint: self.peer_addr.to_string(),
                len: msg.len(),
                limit: i32::MAX as usize,
            });
        }
        let mut q = lock(&self.send_lock);
        self.check_open_soon()?;
        if !self.direct(msg.len()) {
            // Buffered (a copy travels with the request): a sender never waits for a receiver
            // that is busy elsewhere, and several messages stay in flight (see `sendq`).
            let mut b = self.backoff();
            loop {
                q.reap()?;
                if q.has_room(msg.len()) {
                    break;
                }
                self.check_open_soon()?;
                b.wait();
            }
            return q.post_copy(msg, self.peer, self.tx + KIND_MSG, self.tx + KIND_TAIL);
        }
        // Earlier buffered sends are posted already, and the lock keeps later ones behind
        // this one (MPI matches in posting order).
        if !q.is_empty() {
            q.reap()?;
        }
        self.send_direct(msg)
    }

    fn try_send(&self, msg: &[u8]) -> Result<Progress<()>> {
        if msg.len() > MAX_TRY_SEND {
            return Err(Error::MessageTooLarge {
                op: "try_send",
                endpoint: self.peer_addr.to_string(),
                len: msg.len(),
                limit: MAX_TRY_SEND,
            });
        }
        let mut q = match self.send_lock.try_lock() {
            Ok(p) => p,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(Progress::WouldBlock),
        };
        self.check_open_soon()?;
        q.reap()?;
        if !q.has_room(msg.len()) {
            return Ok(Progress::WouldBlock);
        }
        q.post_copy(msg, self.peer, self.tx + KIND_MSG, self.tx + KIND_TAIL)?;
        Ok(Progress::Ready(()))
    }

    fn recv_timeout(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<usize> {
        let mut q = lock(&self.rxq);
        // The clock is read at the first probe for the peer's close, not on every call: a
        // message that is there already costs no clock read, and the timeout, counted from
        // a little later, still never fires early.
        let mut t0: Option<Instant> = None;
        let mut b = self.backoff();
        let mut misses = 0u32;
        loop {
            if let Some(n) = q.take(buf)? {
                return Ok(n);
            }
            misses += 1;
            if !misses.is_multiple_of(CLOSE_PROBE_MISSES) {
                b.wait();
                continue;
            }
            if self.check_open().is_err() {
                // Messages sent before the close still arrive.
                if let Some(n) = q.take_closed(buf)? {
                    return Ok(n);
                }
                return Err(self.gone());
            }
            if let Some(t) = timeout {
                if t0.get_or_insert_with(Instant::now).elapsed() >= t {
                    return Err(Error::Timeout {
                        op: "recv",
                        resource: self.peer_addr.to_string(),
                        after: t,
                    });
                }
            }
            b.wait();
        }
    }

    fn try_recv(&self, buf: &mut Vec<u8>) -> Result<Progress<usize>> {
        let mut q = match self.rxq.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(Progress::WouldBlock),
        };
        if let Some(n) = q.take(buf)? {
            return Ok(Progress::Ready(n));
        }
        if self.check_open().is_err() {
            if let Some(n) = q.take_closed(buf)? {
                return Ok(Progress::Ready(n));
            }
            return Err(self.gone());
        }
        Ok(Progress::WouldBlock)
    }

    fn register(&self, len: usize, access: Access) -> Result<Window> {
        if len == 0 {
            return Err(Error::invalid(
                "register",
                "a window needs at least one byte",
            ));
        }
        let (view, _) = self.m.carve(len)?;
        self.register_region(Arc::clone(&self.m.arena), view, access)
    }

    fn register_view(&self, view: &MemView, access: Access) -> Result<Window> {
        if view.is_empty() {
            return Err(Error::invalid("register_view", "the view is empty"));
        }
        if !(view.as_ptr() as usize).is_multiple_of(PAGE) {
            return Err(Error::invalid(
                "register_view",
                "the view does not start on a page boundary",
            ));
        }
        self.register_region(Arc::clone(view.region()), view.clone(), access)
    }

    fn register_device(
        &self,
        memory: Arc<dyn DeviceMemory>,
        access: Access,
    ) -> Result<DeviceWindow> {
        if memory.is_empty() {
            return Err(Error::invalid(
                "register_device",
                "a window needs at least one byte",
            ));
        }
        let mut w = lock(&self.windows);
        let mut d = lock(&self.server.windows);
        let offset = w.1.allocate(memory.len());
        let win = DeviceWindow::new(memory, offset, access);
        d.insert(win.desc(), win.clone())?;
        if let Err(e) = self.table.publish(&w.0, &d) {
            d.remove(win.offset());
            return Err(e);
        }
        drop((w, d));
        self.server.enroll();
        Ok(win)
    }

    fn unregister(&self, offset: u64) -> Result<()> {
        let mut w = lock(&self.windows);
        let mut d = lock(&self.server.windows);
        // The memory stays attached (the peer may have RMA in flight) until the endpoint
        // closes; only the published table forgets it, so later peer RMA is refused.
        // A device window is gone for the peer's requests at once (its owner serves them).
        if w.0.remove(offset).is_none() && d.remove(offset).is_none() {
            return Err(Error::invalid(
                "unregister",
                format!("no window starts at offset {offset:#x} of {}", self.local),
            ));
        }
        self.table.publish(&w.0, &d)?;
        drop((w, d));
        if self.peer_table != 0 && !self.peer_closed.load(Ordering::Acquire) {
            // Tell the peer its copy of our table is stale, before any later message.
            let one = 1u64.to_ne_bytes();
            self.put(one.as_ptr(), 8, self.peer_table + STALE_AT as u64)?;
            self.flush()?;
        }
        Ok(())
    }

    fn write_to(&self, local_off: u64, len: usize, remote_off: u64, flags: RmaFlags) -> Result<()> {
        let src = match self.local_ptr(local_off, len) {
            Ok(p) => p,
            Err(e) => return self.write_from_device(e, local_off, len, remote_off, flags),
        };
        let disp = match self.remote(remote_off, len, Access::WRITE)? {
            Target::Host(d) => d,
            // SAFETY: the range lies inside a local window, mapped for the call.
            Target::Device => return unsafe { self.device_write(src, len, remote_off) },
        };
        self.check_open()?;
        self.put(src, len, disp)?;
        self.complete_write(flags)
    }

    fn read_from(
        &self,
        local_off: u64,
        len: usize,
        remote_off: u64,
        _flags: RmaFlags,
    ) -> Result<()> {
        let dst = match self.local_ptr(local_off, len) {
            Ok(p) => p,
            Err(e) => return self.read_into_device(e, local_off, len, remote_off),
        };
        let disp = match self.remote(remote_off, len, Access::READ)? {
            Target::Host(d) => d,
            // SAFETY: the range lies inside a local window, mapped for the call.
            Target::Device => return unsafe { self.device_read(dst, len, remote_off) },
        };
        self.check_open()?;
        self.get(dst, len, disp)
    }

    fn vwrite_to(&self, src: &[u8], remote_off: u64, flags: RmaFlags) -> Result<()> {
        let disp = match self.remote(remote_off, src.len(), Access::WRITE)? {
            Target::Host(d) => d,
            Target::Device => {
                // SAFETY: `src` is a live slice for the call.
                return unsafe { self.device_write(src.as_ptr(), src.len(), remote_off) };
            }
        };
        self.check_open()?;
        self.put(src.as_ptr(), src.len(), disp)?;
        // `src` is borrowed only for this call: at least local completion before returning.
        self.complete_write(flags)
    }

    fn vread_from(&self, dst: &mut [u8], remote_off: u64, _flags: RmaFlags) -> Result<()> {
        let disp = match self.remote(remote_off, dst.len(), Access::READ)? {
            Target::Host(d) => d,
            Target::Device => {
                // SAFETY: `dst` is borrowed exclusively for the call.
                return unsafe { self.device_read(dst.as_mut_ptr(), dst.len(), remote_off) };
            }
        };
        self.check_open()?;
        self.get(dst.as_mut_ptr(), dst.len(), disp)
    }

    fn check_remote(&self, remote_off: u64, len: usize, need: Access) -> Result<()> {
        self.remote(remote_off, len, need).map(|_| ())
    }

    fn fence_mark(&self) -> Result<Mark> {
        Ok(Mark(self.issued.load(Ordering::Acquire)))
    }

    fn fence_wait(&self, mark: Mark) -> Result<()> {
        mark.check_issued(self.issued.load(Ordering::Acquire))?;
        // One flush completes every RMA issued to the peer, the marked ones included.
        self.flush()
    }

    fn fence_signal(&self, local: Option<(u64, u64)>, remote: Option<(u64, u64)>) -> Result<()> {
        for (off, _) in local.iter().chain(remote.iter()) {
            if off % 8 != 0 {
                return Err(Error::invalid(
                    "fence_signal",
                    format!("offset {off:#x} is not 8-byte aligned"),
                ));
            }
        }
        let lp = local
            .map(|(off, v)| match self.local_ptr(off, 8) {
                Ok(p) => Ok((Word::Host(p), v)),
                Err(e) => self
                    .local_device(e, off, 8)
                    .map(|(m, at)| (Word::Device(m, at), v)),
            })
            .transpose()?;
        let rp = remote
            .map(|(off, v)| self.remote(off, 8, Access::WRITE).map(|t| (t, off, v)))
            .transpose()?;
        self.check_open()?;
        // Every earlier RMA completes at the peer before either value is stored (writes
        // into the peer's device windows complete before they return).
        self.flush()?;
        match lp {
            // SAFETY: `p` is 8-aligned (window bases are page aligned, the offset is
            // 8-aligned) and inside a local window.
            Some((Word::Host(p), v)) => unsafe {
                (*p.cast::<std::sync::atomic::AtomicU64>()).store(v, Ordering::Release)
            },
            Some((Word::Device(m, at), v)) => m.write(at, &v.to_le_bytes())?,
            None => {}
        }
        match rp {
            Some((Target::Host(d), _, v)) => {
                let val = v.to_ne_bytes();
                self.put(val.as_ptr(), 8, d)?;
                // Completed at the peer, not only locally: an MPI library may hold a put in
                // its queue until the next MPI call, and the caller's next step may be a
                // wait on plain memory (`wait_u64`) that makes none; `val` also lives on
                // this frame.
                self.flush()?;
            }
            Some((Target::Device, off, v)) => {
                let val = v.to_le_bytes();
                // SAFETY: `val` lives on this frame for the call.
                unsafe { self.device_write(val.as_ptr(), 8, off) }?;
            }
            None => {}
        }
        Ok(())
    }

    fn map_remote(&self, _remote_off: u64, _len: usize) -> Result<RemoteMap> {
        Err(Error::Unsupported {
            op: "map_remote",
            backend: "mpi",
        })
    }
}

impl Drop for MpiEndpoint {
    fn drop(&mut self) {
        lock(&self.rxq).cancel();
        {
            let mut q = lock(&self.send_lock);
            let t0 = Instant::now();
            while !q.is_empty() && t0.elapsed() < Duration::from_secs(1) {
                let _ = q.reap();
                std::thread::yield_now();
            }
            // Requests never completed keep their buffers: leak them rather than free memory
            // MPI may still read.
            q.abandon();
        }
        lock(&self.server.initiator).abandon();
        if !self.refused {
            let _ = send_blocking(&[], self.peer, self.tx + KIND_CLOSE);
        }
        let mut buf = Vec::new();
        let peer_closed = self.refused
            || self.peer_closed.load(Ordering::Acquire)
            || matches!(
                try_take(self.peer, self.rx + KIND_CLOSE, &mut buf),
                Ok(Some(_))
            );
        let regions: Vec<Arc<Region>> = lock(&self.windows).2.drain(..).collect();
        if peer_closed {
            for r in &regions {
                self.m.detach(r);
            }
        } else {
            lock(&self.m.graves).push(Grave {
                peer: self.peer,
                close_tag: self.rx + KIND_CLOSE,
                peer_closed: false,
                regions,
            });
        }
    }
}
