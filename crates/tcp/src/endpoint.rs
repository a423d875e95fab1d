//! [`TcpEndpoint`]: the endpoint contract on the caller's side of one connection.

use std::fmt;
use std::mem;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use accio_core::{
    find_either, Access, Addr, Capabilities, DeviceMemory, DeviceWindow, EitherWindow, Endpoint,
    Error, Mark, MemView, Progress, Region, RemoteMap, Result, RmaFlags, Side, Window, PAGE,
};

use crate::frame::{Header, Hello, MAX_RMA};
use crate::options::TcpOptions;
use crate::progress::{
    credit_cost, lock, read, reader_main, responder_main, sub_view, write, Gone, LocalSignal,
    PendingRead, ReadState, SendPtr, Shared, SPARE_BUFFERS,
};
use crate::sys::{self, TrySend};

/// One end of an accio connection over TCP. Create it with [`TcpEndpoint::connect`] or
/// [`crate::TcpListener::accept_tcp`]; use it through [`Endpoint`].
///
/// Dropping it closes the connection: it sends what is queued, tells the peer, waits up
/// to [`TcpOptions::close_linger`] for the peer's side of the close, and joins its threads.
pub struct TcpEndpoint {
    shared: Arc<Shared>,
    reader: Option<JoinHandle<()>>,
    responder: Option<JoinHandle<()>>,
}

impl fmt::Debug for TcpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpEndpoint")
            .field("local", &self.shared.local)
            .field("peer", &self.shared.peer)
            .finish_non_exhaustive()
    }
}

pub(crate) fn tcp_addr(sa: std::net::SocketAddr) -> Addr {
    Addr::Tcp {
        host: sa.ip().to_string(),
        port: sa.port(),
    }
}

impl TcpEndpoint {
    /// Connects to the listener at `addr` (`tcp://HOST:PORT`) with default options.
    /// `timeout` covers the TCP connection and the accio greeting both ways.
    ///
    /// A listener not there yet (connection refused) is waited for, up to `timeout`: a
    /// connect may start before its listener.
    ///
    /// Errors: [`Error::BadAddress`] if the address cannot be resolved or is unreachable,
    /// [`Error::Timeout`] if nothing listened there within `timeout` (it says so), or the
    /// connection or the greeting does not complete in time, [`Error::Protocol`] if the peer is not an
    /// accio tcp endpoint or speaks another protocol version, [`Error::Untrusted`] if the
    /// listener does not prove it holds this side's secret or refuses this side's proof
    /// (see [`crate::auth`]; nothing is sent to such a listener), or an error naming the
    /// key file if this side's secret cannot be read.
    pub fn connect(addr: &Addr, timeout: Duration) -> Result<TcpEndpoint> {
        Self::connect_with(addr, timeout, TcpOptions::default())
    }

    /// [`TcpEndpoint::connect`] with options.
    pub fn connect_with(addr: &Addr, timeout: Duration, opts: TcpOptions) -> Result<TcpEndpoint> {
        crate::conn::connect(addr, timeout, opts)
    }

    /// Starts the progress threads on a connected, greeted socket.
    pub(crate) fn start(stream: TcpStream, opts: TcpOptions, hello: Hello) -> Result<TcpEndpoint> {
        let io = |op, e| Error::io(op, "tcp socket", e);
        let local = tcp_addr(stream.local_addr().map_err(|e| io("getsockname", e))?);
        let peer = tcp_addr(stream.peer_addr().map_err(|e| io("getpeername", e))?);
        let fd = stream.as_raw_fd();
        let peer_max = usize::try_from(hello.max_message).unwrap_or(usize::MAX);
        let shared = Arc::new(
            Shared::new(stream, fd, (local, peer), opts, peer_max, hello.recv_window)
                .map_err(|e| io("eventfd", e))?,
        );
        let mut ep = TcpEndpoint {
            shared: shared.clone(),
            reader: None,
            responder: None,
        };
        let spawn = |name: &str, f: fn(Arc<Shared>)| {
            let s = shared.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || f(s))
                .map_err(|e| Error::io("spawn", format!("thread {name}"), e))
        };
        // On failure `ep` drops, which stops whatever was started.
        ep.reader = Some(spawn("accio-tcp-rx", reader_main)?);
        ep.responder = Some(spawn("accio-tcp-tx", responder_main)?);
        Ok(ep)
    }

    fn s(&self) -> &Shared {
        &self.shared
    }

    /// The local window range `offset + len` (any rights: they concern the peer).
    fn local_range(&self, offset: u64, len: usize) -> Result<MemView> {
        let s = self.s();
        let space = read(&s.windows);
        let (d, w) = space
            .table
            .find(offset, len as u64, Access::NONE, Side::Local, &s.local)?;
        sub_view(w, offset - d.offset, len).ok_or_else(|| Error::OutOfWindow {
            side: Side::Local,
            endpoint: s.local.to_string(),
            offset,
            len: len as u64,
            nearest: Some(*d),
        })
    }

    /// Local bytes `offset + len` of a window of either kind.
    fn local_any(&self, offset: u64, len: usize) -> Result<Local> {
        let err = match self.local_range(offset, len) {
            Ok(v) => return Ok(Local::Host(v)),
            Err(e) => e,
        };
        let s = self.s();
        let space = read(&s.windows);
        let need = Access::NONE;
        match find_either(
            &space.table,
            &space.devices,
            offset,
            len as u64,
            need,
            Side::Local,
            &s.local,
        )? {
            EitherWindow::Second(d, w) => Ok(Local::Device(
                w.memory().clone(),
                (offset - d.offset) as usize,
            )),
            // A host window that `local_range` refused.
            EitherWindow::First(..) => Err(err),
        }
    }

    /// `write_to` from a local device window: its bytes go out chunk by chunk as the
    /// driver copies them off the device (each a write frame), the next chunk's copy
    /// running while this one is sent.
    fn write_from_device(
        &self,
        m: &dyn DeviceMemory,
        at: usize,
        len: usize,
        remote_off: u64,
        flags: RmaFlags,
    ) -> Result<()> {
        let mut done = 0u64;
        m.drain(at, len, &mut |chunk| {
            // SAFETY: `chunk` is live for the call; an asynchronous write has been sent
            // (its bytes consumed) when `rma_write` returns.
            unsafe { self.rma_write(remote_off + done, chunk.as_ptr(), chunk.len(), false) }?;
            done += chunk.len() as u64;
            Ok(())
        })?;
        if flags.sync {
            let mark = self.fence_mark()?;
            self.fence_wait(mark)?;
        }
        Ok(())
    }

    /// `read_from` into a local device window: the peer's bytes are read chunk by chunk
    /// into pinned memory, each copied to the device while the next is read.
    fn read_into_device(
        &self,
        m: &dyn DeviceMemory,
        at: usize,
        len: usize,
        remote_off: u64,
    ) -> Result<()> {
        let mut done = 0u64;
        m.fill(at, len, &mut |chunk| {
            // SAFETY: `chunk` is exclusively ours for the call, and `read_into` returns
            // only once the reader thread is done writing it.
            unsafe { self.read_into(remote_off + done, chunk.as_mut_ptr(), chunk.len()) }?;
            done += chunk.len() as u64;
            Ok(())
        })
    }

    /// `fence_signal` whose local word is in a device window: every earlier RMA is
    /// waited for, the remote signal (if any) sent, and the local word stored.
    fn signal_device(
        &self,
        m: &dyn DeviceMemory,
        at: usize,
        value: u64,
        remote: Option<(u64, u64)>,
    ) -> Result<()> {
        let mark = self.fence_mark()?;
        self.fence_wait(mark)?;
        if let Some(r) = remote {
            self.fence_signal(None, Some(r))?;
        }
        m.write(at, &value.to_le_bytes())
    }

    /// Tells the peer of a new window. The notice goes out before `register` returns, so
    /// anything the caller sends about the window afterwards reaches the peer after it.
    fn announce(&self, offset: u64, len: usize, access: Access) -> Result<()> {
        let s = self.s();
        let w = lock(&s.writer);
        s.check_open()?;
        s.send_header(
            &w,
            &Header::register(offset, len, access),
            "announcing a window",
        )
    }

    /// Windows hold 1 byte up to the largest RMA a frame can carry.
    fn window_len(op: &'static str, len: usize) -> Result<()> {
        if len == 0 {
            return Err(Error::invalid(op, "a window needs at least 1 byte"));
        }
        if len as u64 > MAX_RMA {
            return Err(Error::invalid(
                op,
                format!("a window of {len} bytes exceeds the tcp backend's {MAX_RMA}-byte limit"),
            ));
        }
        Ok(())
    }

    fn nonzero(op: &'static str, len: usize) -> Result<()> {
        if len == 0 {
            return Err(Error::invalid(op, "length is 0"));
        }
        Ok(())
    }

    /// Sends a write frame with `len` bytes at `src`; waits for the ack if `sync`.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes until the call returns.
    unsafe fn rma_write(
        &self,
        remote_off: u64,
        src: *const u8,
        len: usize,
        sync: bool,
    ) -> Result<()> {
        let s = self.s();
        let seq = {
            let mut w = lock(&s.writer);
            s.check_open()?;
            let seq = s.next_seq(&mut w);
            let h = Header::write(seq, remote_off, len, sync);
            // SAFETY: forwarded caller contract.
            unsafe { s.send_locked(&w, &h, src, len, "sending a write") }?;
            seq
        };
        if sync {
            self.wait_acked(seq, false)
        } else {
            Ok(())
        }
    }

    /// Sends a read request and waits until the reader thread has put the answer at
    /// `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes until the call returns.
    ///
    /// Soundness rests on this function not returning while the reader thread may write
    /// to `dst`: the reader writes only while the pending entry is `Filling`; this
    /// function returns only after the reader set `Done`/`Failed` (after its last write,
    /// under the state lock) or after removing a still-`Waiting` entry itself (under the
    /// same lock, after which the reader cannot find it). Nothing in the wait loop can
    /// panic, so no unwinding leaves early either.
    unsafe fn read_into(&self, remote_off: u64, dst: *mut u8, len: usize) -> Result<()> {
        let s = self.s();
        let id = {
            let mut w = lock(&s.writer);
            s.check_open()?;
            let id = s.next_seq(&mut w);
            lock(&s.state).reads.insert(
                id,
                PendingRead {
                    dst: SendPtr(dst),
                    len,
                    state: ReadState::Waiting,
                },
            );
            // A failed send ends the connection; the wait below reports it.
            let _ = s.send_header(
                &w,
                &Header::read_request(id, remote_off, len),
                "sending a read request",
            );
            id
        };
        let done = s.wait_for(None, || {
            let mut st = lock(&s.state);
            // Only this function removes the entry, so it is there.
            let state = st.reads.get(&id).map(|p| &p.state);
            match state {
                Some(ReadState::Done) => {
                    st.reads.remove(&id);
                    Some(Ok(()))
                }
                Some(ReadState::Failed(fault)) => {
                    let fault = *fault;
                    st.reads.remove(&id);
                    drop(st);
                    Some(Err(match fault {
                        Some(f) => s.fault_error(f),
                        None => self.gone(),
                    }))
                }
                // Not started: safe to withdraw, the reader will not find it any more.
                Some(ReadState::Waiting) | None if s.is_gone() => {
                    st.reads.remove(&id);
                    drop(st);
                    Some(Err(self.gone()))
                }
                // Filling: the reader finishes or fails it, whatever else happens.
                _ => None,
            }
        });
        // Without a deadline the wait ends only with an answer.
        done.unwrap_or_else(|| Err(self.gone()))
    }

    fn gone(&self) -> Error {
        let s = self.s();
        s.gone_error()
            .unwrap_or_else(|| Error::peer_gone(&s.peer, "the connection failed"))
    }

    /// Waits until the peer acknowledged `target`, reporting refused RMAs up to it first.
    /// With `request`, sends a fence request if none covering `target` was sent yet.
    fn wait_acked(&self, target: u64, request: bool) -> Result<()> {
        let s = self.s();
        let check = || {
            let mut st = lock(&s.state);
            if st.faults.front().is_some_and(|f| f.seq <= target) {
                if let Some(f) = st.faults.pop_front() {
                    drop(st);
                    return Some(Err(s.fault_error(f)));
                }
            }
            if st.acked >= target {
                return Some(Ok(()));
            }
            s.gone_error().map(Err)
        };
        if let Some(r) = check() {
            return r;
        }
        if request {
            let ask = {
                let mut st = lock(&s.state);
                let ask = st.fence_requested < target;
                st.fence_requested = st.fence_requested.max(target);
                ask
            };
            if ask {
                // Sent before waiting, never while reading the socket: a reader must not
                // block writing (see `progress`).
                let w = lock(&s.writer);
                s.check_open()?;
                s.send_header(
                    &w,
                    &Header::fence_request(target),
                    "sending a fence request",
                )?;
            }
        }
        s.wait_for(None, check).unwrap_or_else(|| Err(self.gone()))
    }

    fn deliver(&self, buf: &mut Vec<u8>) -> Option<Result<usize>> {
        let s = self.s();
        let mut ib = lock(&s.inbox);
        let Some(msg) = ib.queue.pop_front() else {
            return s.gone_error().map(Err);
        };
        // Credit goes back in batches of a quarter window (see `progress`).
        ib.unreturned += credit_cost(msg.len());
        let give = if ib.unreturned >= (s.window / 4).max(1) {
            let n = mem::take(&mut ib.unreturned);
            ib.in_flight -= n;
            n
        } else {
            0
        };
        let mut old = mem::replace(buf, msg);
        let n = buf.len();
        if old.capacity() > 0 && ib.spare.len() < SPARE_BUFFERS {
            old.clear();
            ib.spare.push(mem::take(&mut old));
        }
        drop(ib);
        drop(old);
        if give > 0 {
            s.return_credit(give);
        }
        Some(Ok(n))
    }
}

impl Endpoint for TcpEndpoint {
    fn backend(&self) -> &'static str {
        "tcp"
    }

    fn local_addr(&self) -> &Addr {
        &self.s().local
    }

    fn peer_addr(&self) -> &Addr {
        &self.s().peer
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            map_remote: false,
            cpu_free_rma: false,
            max_try_send: self.s().opts.max_try_send,
        }
    }

    fn send(&self, msg: &[u8]) -> Result<()> {
        let s = self.s();
        if msg.len() > s.peer_max_message {
            return Err(Error::MessageTooLarge {
                op: "send",
                endpoint: s.peer.to_string(),
                len: msg.len(),
                limit: s.peer_max_message,
            });
        }
        let cost = credit_cost(msg.len());
        loop {
            let w = lock(&s.writer);
            s.check_open()?;
            if s.has_credit(cost) {
                // Only writer-lock holders spend credit, so it is still there.
                s.credit.fetch_sub(cost as i64, Ordering::AcqRel);
                let h = Header::message(msg.len());
                // SAFETY: `msg` is a live slice for the whole call.
                return unsafe {
                    s.send_locked(&w, &h, msg.as_ptr(), msg.len(), "sending a message")
                };
            }
            // Wait for credit without the writer lock: acks and read data the peer may be
            // waiting for must still go out.
            drop(w);
            s.wait_credit(cost);
        }
    }

    /// Does not wait: `WouldBlock` (nothing sent) when another thread is writing to the
    /// socket, the peer's message credit is short, or the socket's send buffer
    /// (`SO_MEMINFO`: queued bytes against `sk_sndbuf`, with an allowance for the
    /// kernel's per-buffer overhead) lacks room for the whole frame; otherwise the frame
    /// is handed to the kernel with one non-blocking `sendmsg`. Should the kernel still
    /// take only part of it (possible only under system-wide TCP memory pressure), the
    /// rest is written blocking, since half a frame cannot be taken back.
    fn try_send(&self, msg: &[u8]) -> Result<Progress<()>> {
        let s = self.s();
        s.check_open()?;
        let limit = s.opts.max_try_send.min(s.peer_max_message);
        if msg.len() > limit {
            return Err(Error::MessageTooLarge {
                op: "try_send",
                endpoint: s.peer.to_string(),
                len: msg.len(),
                limit,
            });
        }
        let _w = match s.writer.try_lock() {
            Ok(w) => w,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(Progress::WouldBlock),
        };
        s.check_open()?;
        let cost = credit_cost(msg.len());
        if !s.has_credit(cost) {
            return Ok(Progress::WouldBlock);
        }
        let h = Header::message(msg.len()).encode();
        // SAFETY: `msg` is a live slice for the whole call.
        match unsafe { sys::try_send_frame(s.fd, &h, msg.as_ptr(), msg.len()) } {
            Ok(TrySend::Sent) => {
                s.credit.fetch_sub(cost as i64, Ordering::AcqRel);
                Ok(Progress::Ready(()))
            }
            Ok(TrySend::WouldBlock) => Ok(Progress::WouldBlock),
            Err(e) => Err(s.fail_send(e, "sending a message")),
        }
    }

    fn recv_timeout(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<usize> {
        let s = self.s();
        let deadline = timeout.map(|t| Instant::now() + t);
        s.wait_for(deadline, || self.deliver(buf))
            .unwrap_or_else(|| {
                Err(Error::Timeout {
                    op: "recv",
                    resource: format!("connection to {}", s.peer),
                    after: timeout.unwrap_or_default(),
                })
            })
    }

    fn try_recv(&self, buf: &mut Vec<u8>) -> Result<Progress<usize>> {
        match self.deliver(buf) {
            Some(r) => r.map(Progress::Ready),
            None => Ok(Progress::WouldBlock),
        }
    }

    fn register(&self, len: usize, access: Access) -> Result<Window> {
        // Both checked before the memory is mapped and faulted in (`register_view` checks
        // them again, for callers that come with their own memory).
        self.s().check_open()?;
        Self::window_len("register", len)?;
        self.register_view(&MemView::whole(Arc::new(Region::anonymous(len)?)), access)
    }

    fn register_view(&self, view: &MemView, access: Access) -> Result<Window> {
        let s = self.s();
        s.check_open()?;
        let len = view.len();
        Self::window_len("register_view", len)?;
        if !view.start().is_multiple_of(PAGE) {
            return Err(Error::invalid(
                "register_view",
                format!(
                    "a window must start on a page boundary (got byte {:#x} of its region)",
                    view.start()
                ),
            ));
        }
        let view = view.clone();
        let window = {
            let mut space = write(&s.windows);
            let offset = space.alloc.allocate(len);
            let w = Window::new(view, offset, access);
            space.table.insert(w.desc(), w.clone())?;
            w
        };
        if let Err(e) = self.announce(window.offset(), len, access) {
            write(&s.windows).table.remove(window.offset());
            return Err(e);
        }
        Ok(window)
    }

    fn register_device(
        &self,
        memory: Arc<dyn DeviceMemory>,
        access: Access,
    ) -> Result<DeviceWindow> {
        let s = self.s();
        s.check_open()?;
        let len = memory.len();
        Self::window_len("register_device", len)?;
        let window = {
            let mut space = write(&s.windows);
            let offset = space.alloc.allocate(len);
            let w = DeviceWindow::new(memory, offset, access);
            space.devices.insert(w.desc(), w.clone())?;
            w
        };
        // The peer mirrors it as any window: what it is made of is this side's business.
        if let Err(e) = self.announce(window.offset(), len, access) {
            write(&s.windows).devices.remove(window.offset());
            return Err(e);
        }
        Ok(window)
    }

    fn unregister(&self, offset: u64) -> Result<()> {
        let s = self.s();
        let removed = {
            let mut space = write(&s.windows);
            space.table.remove(offset).is_some() || space.devices.remove(offset).is_some()
        };
        if !removed {
            return Err(Error::invalid(
                "unregister",
                format!("no window of {} starts at offset {offset:#x}", s.local),
            ));
        }
        let w = lock(&s.writer);
        s.check_open()?;
        s.send_header(&w, &Header::unregister(offset), "withdrawing a window")
    }

    fn write_to(&self, local_off: u64, len: usize, remote_off: u64, flags: RmaFlags) -> Result<()> {
        Self::nonzero("write_to", len)?;
        let src = match self.local_any(local_off, len)? {
            Local::Host(v) => v,
            Local::Device(m, at) => {
                self.check_remote(remote_off, len, Access::WRITE)?;
                return self.write_from_device(&*m, at, len, remote_off, flags);
            }
        };
        self.check_remote(remote_off, len, Access::WRITE)?;
        // SAFETY: `src` keeps the window mapped for `len` bytes during the call.
        unsafe { self.rma_write(remote_off, src.as_ptr(), len, flags.sync) }
    }

    fn read_from(
        &self,
        local_off: u64,
        len: usize,
        remote_off: u64,
        _flags: RmaFlags,
    ) -> Result<()> {
        Self::nonzero("read_from", len)?;
        let dst = match self.local_any(local_off, len)? {
            Local::Host(v) => v,
            Local::Device(m, at) => {
                self.check_remote(remote_off, len, Access::READ)?;
                return self.read_into_device(&*m, at, len, remote_off);
            }
        };
        self.check_remote(remote_off, len, Access::READ)?;
        // SAFETY: `dst` keeps the window mapped for `len` bytes until the call returns;
        // that local code may access window memory meanwhile is the window contract.
        unsafe { self.read_into(remote_off, dst.as_ptr(), len) }
    }

    fn vwrite_to(&self, src: &[u8], remote_off: u64, flags: RmaFlags) -> Result<()> {
        Self::nonzero("vwrite_to", src.len())?;
        self.check_remote(remote_off, src.len(), Access::WRITE)?;
        // SAFETY: `src` is a live slice for the whole call.
        unsafe { self.rma_write(remote_off, src.as_ptr(), src.len(), flags.sync) }
    }

    fn vread_from(&self, dst: &mut [u8], remote_off: u64, _flags: RmaFlags) -> Result<()> {
        Self::nonzero("vread_from", dst.len())?;
        self.check_remote(remote_off, dst.len(), Access::READ)?;
        // SAFETY: `dst` is borrowed exclusively for the whole call, and `read_into` does
        // not return while the reader thread may still write to it.
        unsafe { self.read_into(remote_off, dst.as_mut_ptr(), dst.len()) }
    }

    /// Checks `offset + len` against the mirror of the peer's windows.
    fn check_remote(&self, offset: u64, len: usize, need: Access) -> Result<()> {
        let s = self.s();
        read(&s.peer_windows)
            .find(offset, len as u64, need, Side::Remote, &s.peer)
            .map(|_| ())
    }

    fn fence_mark(&self) -> Result<Mark> {
        let s = self.s();
        s.check_open()?;
        Ok(Mark(s.last_seq.load(Ordering::Acquire)))
    }

    fn fence_wait(&self, mark: Mark) -> Result<()> {
        mark.check_issued(self.s().last_seq.load(Ordering::Acquire))?;
        self.wait_acked(mark.0, true)
    }

    /// The remote store travels as a signal frame behind every earlier frame, so the peer
    /// applies it after them. The local store is made by the reader thread when the peer
    /// acknowledges the signal (or a fence request), i.e. after every earlier RMA
    /// completed; the caller does not wait for it. If nothing is outstanding, a local-only
    /// store is made at once.
    fn fence_signal(&self, local: Option<(u64, u64)>, remote: Option<(u64, u64)>) -> Result<()> {
        let s = self.s();
        s.check_open()?;
        let aligned = |side: &str, off: u64| {
            if !off.is_multiple_of(8) {
                return Err(Error::invalid(
                    "fence_signal",
                    format!("{side} offset {off:#x} is not 8-byte aligned"),
                ));
            }
            Ok(())
        };
        let local = match local {
            Some((off, value)) => {
                aligned("local", off)?;
                match self.local_any(off, 8)? {
                    Local::Host(word) => Some((word, value)),
                    Local::Device(m, at) => {
                        if let Some((off, _)) = remote {
                            aligned("remote", off)?;
                            self.check_remote(off, 8, Access::WRITE)?;
                        }
                        return self.signal_device(&*m, at, value, remote);
                    }
                }
            }
            None => None,
        };
        if let Some((off, _)) = remote {
            aligned("remote", off)?;
            self.check_remote(off, 8, Access::WRITE)?;
        }
        let mut w = lock(&s.writer);
        s.check_open()?;
        let h = match (local, remote) {
            (None, None) => return Ok(()),
            (Some((word, value)), None) => {
                let mut st = lock(&s.state);
                if st.acked >= s.last_seq.load(Ordering::Acquire) && st.signals.is_empty() {
                    return word.store_u64(0, value);
                }
                let seq = s.next_seq(&mut w);
                st.signals.push_back(LocalSignal { seq, word, value });
                Header::fence_request(seq)
            }
            (local, Some((off, value))) => {
                let seq = s.next_seq(&mut w);
                let ack = local.is_some();
                if let Some((word, v)) = local {
                    lock(&s.state).signals.push_back(LocalSignal {
                        seq,
                        word,
                        value: v,
                    });
                }
                Header::signal(seq, off, value, ack)
            }
        };
        s.send_header(&w, &h, "sending a signal")
    }

    fn map_remote(&self, _remote_off: u64, _len: usize) -> Result<RemoteMap> {
        Err(Error::Unsupported {
            op: "map_remote",
            backend: "tcp",
        })
    }
}

/// Local window bytes of either kind.
enum Local {
    Host(MemView),
    Device(Arc<dyn DeviceMemory>, usize),
}

impl Drop for TcpEndpoint {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.stop_responder();
        let deadline = Instant::now() + s.opts.close_linger;
        // Let the responder send what the peer asked for, then send our end of stream
        // after it, and wait for the peer's: closing with unread bytes would make the
        // kernel reset the connection and drop what is still queued for the peer.
        if self.responder.is_some() {
            s.wait_done(|st| st.responder_done, deadline);
        }
        sys::shutdown(s.fd, libc::SHUT_WR);
        if self.reader.is_some() {
            s.wait_done(|st| st.reader_done, deadline);
        }
        s.set_gone(Gone::peer("this endpoint was closed"));
        for t in [self.responder.take(), self.reader.take()]
            .into_iter()
            .flatten()
        {
            let _ = t.join();
        }
    }
}
