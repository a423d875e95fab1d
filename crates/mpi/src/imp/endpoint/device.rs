//! Device windows over `mpi` ([`accio_core::Endpoint::register_device`]).
//!
//! MPI's one-sided calls move host memory, and an MPI library built without CUDA support
//! (Debian's Open MPI: `ompi_info` says `opal_built_with_cuda_support: false`) cannot put
//! into GPU memory. So a device window is served by its owner's CPU, as the tcp backend
//! serves every window: the initiator of a write sends its bytes in messages of at most
//! [`DEVICE_CHUNK`] on the connection's request tag, with at most [`WRITES_IN_FLIGHT`]
//! posted ahead; the owner copies each to the device as it arrives and answers the last. A
//! read is one request per chunk, [`READS_IN_FLIGHT`] outstanding, each answered with the
//! bytes, so the owner copies one chunk off the device while the last one travels. Every
//! call returns once the owner answered: a write into a device window is complete at the
//! peer when it returns, `ASYNC` or not, and fences have nothing more to wait for.
//!
//! The owner checks every request against its own table (bounds, rights, a withdrawn
//! window), so unlike host windows' one-sided RMA a stale or lying initiator is refused
//! where the memory is; the initiator turns a refusal into the precise error by re-reading
//! the owner's published table, which marks device windows ([`DEVICE_FLAG`]) so that the
//! initiator knows which path a range takes before any byte moves.
//!
//! The messages, and what the owner does with each, are [`crate::device_wire`]'s (apart
//! from MPI, so that they are unit-tested and fuzzed); this file moves them.
//!
//! Who serves: any thread of the owner's process that polls MPI (every message poll, see
//! `count_poll`), the progress thread while none does, and an initiator waiting for its
//! answer (so that two endpoints of one process serve each other). Serving never waits
//! for a peer: it takes only messages that have arrived, and it sends its answers from
//! buffers kept until MPI is done with them. A rank that makes no MPI call while the
//! progress thread is off (`ACCIO_MPI_PROGRESS_US=0`) serves nothing.

use std::sync::atomic::AtomicUsize;
use std::sync::Weak;

use accio_core::DEVICE_CHUNK;

use super::*;
use crate::device_wire::{
    oversized, parse_answer, Head, Owner, DEVICE_FAILED, DONE, HEADER, LAST, MAX_MESSAGE, OP_READ,
    OP_WRITE, REFUSED,
};
use crate::imp::{probe, receive};

/// Marks a device window in the rights word of the published table.
pub(super) const DEVICE_FLAG: u64 = 1 << 8;

/// Chunks of one write posted before the first is received.
const WRITES_IN_FLIGHT: usize = 2;
/// Read requests outstanding: the owner copies one chunk off the device while the other
/// travels.
const READS_IN_FLIGHT: usize = 2;
/// Requests one call of [`serve`] takes from one peer before it lets others have a turn.
const SERVE_BATCH: usize = 8;

/// Takes a matched message longer than the protocol allows without storing it (a receive
/// into a shorter buffer consumes it with a truncation error, which is expected).
fn discard(msg: &mut ffi::MPI_Message) {
    let mut scrap = [0u8; 1];
    // SAFETY: the buffer holds the one byte the receive is given; MPI reports the rest
    // truncated and frees the message.
    unsafe {
        ffi::MPI_Mrecv(
            scrap.as_mut_ptr().cast(),
            1,
            byte(),
            msg,
            ffi::RSMPI_STATUS_IGNORE,
        )
    };
}

// ---- the owner's side -----------------------------------------------------------------

/// An endpoint's device windows and the service of its peer's requests for them; and the
/// endpoint's requests for the peer's ([`Initiator`]).
pub(in crate::imp) struct DeviceServer {
    peer: c_int,
    /// The tag the peer's requests come on, and the one answers go on.
    requests: c_int,
    answers: c_int,
    local: Addr,
    pub(super) windows: Mutex<WindowTable<DeviceWindow>>,
    enrolled: AtomicBool,
    state: Mutex<Serving>,
    /// The endpoint's own requests for the peer's device windows.
    pub(super) initiator: Mutex<Initiator>,
}

/// What serving keeps between requests.
#[derive(Default)]
struct Serving {
    /// Answers in flight.
    sends: SendQueue,
    owner: Owner,
    buf: Vec<u8>,
}

// SAFETY: MPI request handles are opaque and used under `state`'s lock; MPI allows any
// thread (MPI_THREAD_MULTIPLE).
unsafe impl Send for DeviceServer {}
// SAFETY: as for Send; shared state is behind mutexes and atomics.
unsafe impl Sync for DeviceServer {}

impl DeviceServer {
    pub(super) fn new(peer: c_int, tx: c_int, rx: c_int, local: Addr) -> DeviceServer {
        DeviceServer {
            peer,
            requests: rx + KIND_DEV,
            answers: tx + KIND_DEV_REPLY,
            local,
            windows: Mutex::new(WindowTable::default()),
            enrolled: AtomicBool::new(false),
            state: Mutex::new(Serving::default()),
            initiator: Mutex::new(Initiator::default()),
        }
    }

    /// Puts the server on the process's list of those [`serve`] serves (once).
    pub(super) fn enroll(self: &Arc<Self>) {
        if !self.enrolled.swap(true, Ordering::AcqRel) {
            lock(&SERVERS).push(Arc::downgrade(self));
            ENROLLED.fetch_add(1, Ordering::Release);
        }
    }

    /// Serves the requests that have arrived, up to [`SERVE_BATCH`]; another thread
    /// serving this peer already makes this a no-op.
    fn serve(&self) -> Result<()> {
        let mut st = match self.state.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(()),
        };
        st.sends.reap_quiet()?;
        for _ in 0..SERVE_BATCH {
            let Some((mut msg, n)) = probe(self.peer, self.requests)? else {
                break;
            };
            let reply = if n > MAX_MESSAGE {
                discard(&mut msg);
                Some(oversized(n))
            } else {
                let Serving { sends, owner, buf } = &mut *st;
                receive(&mut msg, n, buf, 0)?;
                let find = |off, len, need| self.find(off, len, need);
                owner.handle(buf, &find, &mut |n| sends.buffer(n))
            };
            if let Some(r) = reply {
                st.sends.post_owned(r, self.peer, self.answers)?;
            }
        }
        Ok(())
    }

    /// The memory under `[offset, offset + len)` with rights `need`, and where the range
    /// starts in it.
    fn find(&self, offset: u64, len: u64, need: Access) -> Result<(Arc<dyn DeviceMemory>, usize)> {
        let t = lock(&self.windows);
        let (d, w) = t.find(offset, len, need, Side::Local, &self.local)?;
        Ok((Arc::clone(w.memory()), (offset - d.offset) as usize))
    }
}

impl Drop for DeviceServer {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let _ = st.sends.reap_quiet();
        // Answers the peer never received keep their buffers: MPI may still read them.
        st.sends.abandon();
    }
}

/// The servers of this process's endpoints that have device windows.
static SERVERS: Mutex<Vec<Weak<DeviceServer>>> = Mutex::new(Vec::new());
/// How many there are: one load tells a process without device windows to skip [`serve`].
static ENROLLED: AtomicUsize = AtomicUsize::new(0);

/// Serves the requests that have arrived for this process's device windows (see the
/// [module docs](self)); does nothing while another thread serves. Every message poll
/// calls it: without device windows it is one load.
#[inline]
pub(in crate::imp) fn serve() {
    if ENROLLED.load(Ordering::Relaxed) != 0 {
        serve_enrolled();
    }
}

#[cold]
#[inline(never)]
fn serve_enrolled() {
    let mut list = match SERVERS.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    list.retain(|w| match w.upgrade() {
        Some(s) => {
            // An MPI error here is the library's; the waiting initiator meets it too.
            let _ = s.serve();
            true
        }
        None => false,
    });
    ENROLLED.store(list.len(), Ordering::Release);
}

// ---- the initiator's side -------------------------------------------------------------

/// An endpoint's requests for the peer's device windows: one call at a time.
#[derive(Default)]
pub(super) struct Initiator {
    seq: u64,
    sends: SendQueue,
    answer: Vec<u8>,
}

impl Initiator {
    /// Forgets requests still in flight (see `SendQueue::abandon`).
    pub(super) fn abandon(&mut self) {
        let _ = self.sends.reap_quiet();
        self.sends.abandon();
    }
}

impl MpiEndpoint {
    /// Writes `len` bytes from `src` at `remote_off` of the peer's device window and waits
    /// for the peer's answer.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes during the call.
    pub(super) unsafe fn device_write(
        &self,
        src: *const u8,
        len: usize,
        remote_off: u64,
    ) -> Result<()> {
        let mut g = lock(&self.server.initiator);
        g.seq += 1;
        let seq = g.seq;
        let mut done = 0;
        loop {
            let mut b = self.backoff();
            loop {
                g.sends.reap()?;
                if g.sends.in_flight() < WRITES_IN_FLIGHT {
                    break;
                }
                self.check_open_soon()?;
                b.wait();
            }
            let n = (len - done).min(DEVICE_CHUNK);
            let last = done + n == len;
            let head = Head {
                op: OP_WRITE,
                flag: if last { LAST } else { 0 },
                seq,
                offset: remote_off + done as u64,
                len: n as u64,
            };
            // SAFETY: `done + n <= len`, readable by the caller's promise.
            unsafe {
                g.sends.post_joined(
                    &head.encode(),
                    src.add(done),
                    n,
                    self.peer,
                    self.tx + KIND_DEV,
                )
            }?;
            done += n;
            if last {
                break;
            }
        }
        let h = self.await_answer(&mut g, seq)?;
        self.ended(&h, &g.answer, remote_off, len, Access::WRITE)
    }

    /// Reads `len` bytes at `remote_off` of the peer's device window into `dst`.
    ///
    /// # Safety
    /// `dst` must be writable for `len` bytes during the call.
    pub(super) unsafe fn device_read(
        &self,
        dst: *mut u8,
        len: usize,
        remote_off: u64,
    ) -> Result<()> {
        let mut g = lock(&self.server.initiator);
        let chunks = len.div_ceil(DEVICE_CHUNK).max(1);
        let first = g.seq + 1;
        g.seq += chunks as u64;
        let span = |i: usize| {
            let at = i * DEVICE_CHUNK;
            (at, (len - at).min(DEVICE_CHUNK))
        };
        let (mut asked, mut got) = (0, 0);
        let mut failed: Option<Error> = None;
        while got < asked || (failed.is_none() && got < chunks) {
            while failed.is_none() && asked < chunks && asked < got + READS_IN_FLIGHT {
                let (at, n) = span(asked);
                let head = Head {
                    op: OP_READ,
                    flag: 0,
                    seq: first + asked as u64,
                    offset: remote_off + at as u64,
                    len: n as u64,
                };
                g.sends
                    .post_owned(head.encode().to_vec(), self.peer, self.tx + KIND_DEV)?;
                asked += 1;
            }
            let h = self.await_answer(&mut g, first + got as u64)?;
            let (at, n) = span(got);
            got += 1;
            if failed.is_some() {
                continue;
            }
            if h.op != DONE {
                failed = Some(
                    self.ended(&h, &g.answer, remote_off, len, Access::READ)
                        .unwrap_err(),
                );
                continue;
            }
            if h.len != n as u64 {
                return Err(self.broken(format!(
                    "it answered a read of {n} bytes with {} bytes",
                    h.len
                )));
            }
            // SAFETY: `at + n <= len`, writable by the caller's promise; the answer holds
            // `n` bytes after its header.
            unsafe { ptr::copy_nonoverlapping(g.answer[HEADER..].as_ptr(), dst.add(at), n) };
        }
        failed.map_or(Ok(()), Err)
    }

    /// Waits for the answer to request `seq` (serving this process's device windows
    /// meanwhile: the owner may be an endpoint of this process); leaves it in `g.answer`.
    fn await_answer(&self, g: &mut Initiator, seq: u64) -> Result<Head> {
        let mut b = self.backoff();
        loop {
            // Drives MPI, this process's device windows and connection requests.
            g.sends.reap()?;
            if let Some((mut msg, n)) = probe(self.peer, self.rx + KIND_DEV_REPLY)? {
                if n > MAX_MESSAGE {
                    discard(&mut msg);
                    return Err(self.broken(format!("an answer of {n} bytes")));
                }
                receive(&mut msg, n, &mut g.answer, 0)?;
                return parse_answer(&g.answer, seq).map_err(|why| self.broken(why));
            }
            self.check_open_soon()?;
            b.wait();
        }
    }

    /// The result of a request of `len` bytes at `offset` with rights `need`, as the
    /// owner's answer `h` (whose text is `body`) says.
    fn ended(&self, h: &Head, body: &[u8], offset: u64, len: usize, need: Access) -> Result<()> {
        let why = String::from_utf8_lossy(body.get(HEADER..).unwrap_or_default());
        match h.op {
            DONE => Ok(()),
            REFUSED => {
                // The owner withdrew or changed the window after this side's copy of its
                // table was read: the fresh table names the miss as a host window's would.
                self.refresh_peer()?;
                lock(&self.peer_windows).find(
                    offset,
                    len as u64,
                    need,
                    Side::Remote,
                    &self.peer_addr,
                )?;
                Err(self.broken(format!(
                    "it refused {len} bytes at {offset:#x} that its table allows: {why}"
                )))
            }
            DEVICE_FAILED => Err(Error::io(
                "rma",
                format!(
                    "{len} bytes at {offset:#x} of {}'s device window",
                    self.peer_addr
                ),
                std::io::Error::other(format!("the peer's device copy failed: {why}")),
            )),
            _ => Err(self.broken(format!("it could not read a request: {why}"))),
        }
    }

    fn broken(&self, reason: String) -> Error {
        Error::Protocol {
            peer: self.peer_addr.to_string(),
            reason: format!("device window protocol: {reason}"),
        }
    }

    /// The local device window under `[off, off + len)`, and where the range starts in
    /// its memory; `miss` (the host lookup's error) when neither table has it, or the
    /// precise error over both.
    pub(super) fn local_device(
        &self,
        miss: Error,
        off: u64,
        len: usize,
    ) -> Result<(Arc<dyn DeviceMemory>, usize)> {
        let w = lock(&self.windows);
        let d = lock(&self.server.windows);
        match find_either(
            &w.0,
            &d,
            off,
            len as u64,
            Access::NONE,
            Side::Local,
            &self.local,
        )? {
            EitherWindow::Second(desc, dw) => {
                Ok((Arc::clone(dw.memory()), (off - desc.offset) as usize))
            }
            EitherWindow::First(..) => Err(miss),
        }
    }

    /// `write_to` from a local device window: its bytes go out chunk by chunk as the
    /// driver copies them off the device, the next chunk's copy running while this one
    /// is sent.
    #[cold]
    #[inline(never)]
    pub(super) fn write_from_device(
        &self,
        miss: Error,
        local_off: u64,
        len: usize,
        remote_off: u64,
        flags: RmaFlags,
    ) -> Result<()> {
        let (m, at) = self.local_device(miss, local_off, len)?;
        let target = self.remote(remote_off, len, Access::WRITE)?;
        self.check_open()?;
        let mut done = 0u64;
        m.drain(at, len, &mut |chunk| {
            match target {
                Target::Host(disp) => {
                    self.put(chunk.as_ptr(), chunk.len(), disp + done)?;
                    // The chunk is reused once this returns: at least local completion.
                    self.complete_write(RmaFlags::ASYNC)?;
                }
                Target::Device => {
                    // SAFETY: `chunk` is live for the call.
                    unsafe { self.device_write(chunk.as_ptr(), chunk.len(), remote_off + done) }?
                }
            }
            done += chunk.len() as u64;
            Ok(())
        })?;
        match target {
            Target::Host(_) => self.complete_write(flags),
            Target::Device => Ok(()),
        }
    }

    /// `read_from` into a local device window: the peer's bytes arrive chunk by chunk in
    /// pinned memory, each copied to the device while the next arrives.
    #[cold]
    #[inline(never)]
    pub(super) fn read_into_device(
        &self,
        miss: Error,
        local_off: u64,
        len: usize,
        remote_off: u64,
    ) -> Result<()> {
        let (m, at) = self.local_device(miss, local_off, len)?;
        let target = self.remote(remote_off, len, Access::READ)?;
        self.check_open()?;
        let mut done = 0u64;
        m.fill(at, len, &mut |chunk| {
            match target {
                Target::Host(disp) => self.get(chunk.as_mut_ptr(), chunk.len(), disp + done)?,
                Target::Device => {
                    // SAFETY: `chunk` is exclusively ours for the call.
                    unsafe { self.device_read(chunk.as_mut_ptr(), chunk.len(), remote_off + done) }?
                }
            }
            done += chunk.len() as u64;
            Ok(())
        })
    }
}
