//! The state one connection shares between the caller's threads and its two progress
//! threads, and those threads:
//!
//! - the **reader** blocks in `readv` on the socket and applies every frame in stream
//!   order: messages go to the receive queue, writes and signals into local windows, read
//!   data into the buffer of the waiting `read_from`, acks and faults to the waiters;
//! - the **responder** sends what the reader owes the peer (acks, read data, fault
//!   reports). The reader never writes to the socket itself: if it could block on a full
//!   send buffer while the peer's reader did the same, both sides would stop reading and
//!   the connection would deadlock. With the responder, a reader only ever waits for
//!   bytes, so each side always drains the other.
//!
//! **Flow control.** Messages are flow-controlled by credit, RMA is not. Each side grants
//! the other a window of message bytes ([`TcpOptions::recv_queue_bytes`], each message
//! counting [`MSG_OVERHEAD`] more); a sender spends credit per message and waits (or
//! `try_send` returns `WouldBlock`) when it lacks credit; `recv` returns credit with a
//! [`Kind::Credit`] frame once a quarter of the window was consumed. So the reader never
//! has to stop reading the socket to bound memory: RMA, signals and fences behind unread
//! messages are always applied, as one-sided operations must be, whether or not the
//! peer's application calls `recv`. The receiver enforces the same rule before it
//! allocates a message, so a peer that ignores its credit is a protocol error, not a
//! memory leak. A message larger than the window is allowed when at most a quarter of the
//! window is in flight.
//!
//! Lock order: `writer` before `state`; `inbox`, `replies`, `windows` and `peer_windows`
//! are taken alone.
//!
//! [`Kind::Credit`]: crate::frame::Kind::Credit

mod reader;
mod responder;
mod rx;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::TcpStream;
use std::os::fd::{OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{
    Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use std::time::Instant;

use accio_core::{
    Access, Addr, DeviceMemory, DeviceWindow, Error, MemView, OffsetAllocator, Side, Window,
    WindowTable,
};

use crate::frame::{FaultCode, FrameReader, Header, Limits, ReadError, MAX_RMA};
use crate::options::TcpOptions;
use crate::sys::{self, FdSource};

pub(crate) use responder::responder_main;
pub(crate) use rx::reader_main;

/// What each message counts towards the credit window besides its bytes.
pub(crate) const MSG_OVERHEAD: usize = 64;

/// Credit a message of `len` bytes costs.
pub(crate) fn credit_cost(len: usize) -> u64 {
    len as u64 + MSG_OVERHEAD as u64
}

/// The flow-control rule, the same on both sides: a message costing `cost` may go when
/// `in_flight` (bytes sent and not yet returned) leaves room for it in `window`, or when
/// at most a quarter of the window is in flight (so a message larger than the window
/// still goes once the receiver has drained nearly everything; the receiver returns
/// credit whenever a quarter of the window was consumed).
pub(crate) fn may_send(in_flight: u64, cost: u64, window: u64) -> bool {
    in_flight <= window / 4 || cost <= window.saturating_sub(in_flight)
}

/// Replies the reader may queue for the responder before it waits for room.
const MAX_REPLIES: usize = 64 * 1024;
/// Buffers returned by `recv` kept for the reader to fill again.
pub(crate) const SPARE_BUFFERS: usize = 8;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn wait<'a, T>(cv: &Condvar, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(g).unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

/// Why the connection ended; the first cause found is kept.
#[derive(Clone, Debug)]
pub(crate) struct Gone {
    protocol: bool,
    cause: String,
}

impl Gone {
    pub(crate) fn peer(cause: impl Into<String>) -> Gone {
        Gone {
            protocol: false,
            cause: cause.into(),
        }
    }

    pub(crate) fn protocol(cause: impl Into<String>) -> Gone {
        Gone {
            protocol: true,
            cause: cause.into(),
        }
    }

    pub(super) fn from_read(e: ReadError) -> Gone {
        match e {
            ReadError::Frame(f) => Gone::protocol(f.to_string()),
            ReadError::Io(e) if e.raw_os_error() == Some(libc::ECONNRESET) => {
                Gone::peer("the connection was reset (the peer process died or aborted)")
            }
            e => Gone::peer(e.to_string()),
        }
    }

    fn error(&self, peer: &Addr) -> Error {
        if self.protocol {
            Error::protocol(peer, self.cause.clone())
        } else {
            Error::peer_gone(peer, self.cause.clone())
        }
    }
}

/// A raw destination pointer handed from a `read_from` caller to the reader thread.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub *mut u8);

// SAFETY: the pointer is only dereferenced by the reader thread while the owning caller
// waits for it (see `ReadState`), which is what makes sending it across threads sound.
unsafe impl Send for SendPtr {}

/// Progress of one pending read. The caller that owns the destination returns only when
/// the state is `Done` or `Failed`, or after removing a `Waiting` entry itself; the reader
/// writes into the destination only while the state is `Filling`, which it sets and
/// clears under the state lock.
pub(crate) enum ReadState {
    Waiting,
    Filling,
    Done,
    /// The peer refused the read (`Some`) or the connection failed (`None`).
    Failed(Option<Fault>),
}

pub(crate) struct PendingRead {
    pub dst: SendPtr,
    pub len: usize,
    pub state: ReadState,
}

/// A local `fence_signal` store, done by the reader once the peer acknowledged `seq`.
pub(crate) struct LocalSignal {
    pub seq: u64,
    pub word: MemView,
    pub value: u64,
}

/// An RMA the peer refused.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fault {
    pub seq: u64,
    pub code: FaultCode,
    pub offset: u64,
    pub len: u64,
    pub need: Access,
}

/// Completion state, under `Shared::state`.
#[derive(Default)]
pub(crate) struct State {
    /// Every RMA up to this sequence number completed at the peer.
    pub acked: u64,
    /// Highest sequence number a fence request was sent for.
    pub fence_requested: u64,
    pub reads: HashMap<u64, PendingRead>,
    /// Local signal stores waiting for their ack, in sequence order.
    pub signals: VecDeque<LocalSignal>,
    /// Refused RMAs not reported yet, in sequence order.
    pub faults: VecDeque<Fault>,
    /// Threads waiting on `state_cv`.
    pub waiters: usize,
    pub reader_done: bool,
    pub responder_done: bool,
}

/// Received messages, under `Shared::inbox`.
#[derive(Default)]
pub(crate) struct Inbox {
    pub queue: VecDeque<Vec<u8>>,
    /// Credit the peer has spent and this side has not returned yet (queued messages
    /// and `unreturned`).
    pub in_flight: u64,
    /// Credit of messages `recv` consumed, not yet returned to the peer.
    pub unreturned: u64,
    /// Buffers `recv` gave back, for the reader to fill again.
    pub spare: Vec<Vec<u8>>,
    /// Threads waiting in `recv`.
    pub receivers: usize,
}

/// What the reader owes the peer.
enum Reply {
    Ack(u64),
    /// Read data, sent straight from the window (the view keeps it mapped).
    Data {
        id: u64,
        view: MemView,
    },
    /// Read data from a device window: `len` bytes at `at`, sent chunk by chunk as its
    /// driver copies them off the device.
    DeviceData {
        id: u64,
        memory: Arc<dyn DeviceMemory>,
        at: usize,
        len: usize,
    },
    Fault(Header),
    Credit(u64),
}

#[derive(Default)]
struct Replies {
    queue: VecDeque<Reply>,
    /// Message credit to return to the peer.
    credit: u64,
    /// Finish the queue and exit (the endpoint is closing).
    stop: bool,
    responder_idle: bool,
    reader_blocked: bool,
}

/// The local registered address space.
#[derive(Default)]
pub(crate) struct LocalSpace {
    pub table: WindowTable<Window>,
    /// Device windows, apart from host ones (whose memory the threads address directly).
    pub devices: WindowTable<DeviceWindow>,
    pub alloc: OffsetAllocator,
}

/// Everything one connection's threads share.
pub(crate) struct Shared {
    /// Owns the socket; `fd` stays valid as long as `Shared` lives, which outlives both
    /// progress threads.
    _stream: TcpStream,
    pub fd: RawFd,
    pub local: Addr,
    pub peer: Addr,
    pub opts: TcpOptions,
    /// The largest message the peer accepts (from its greeting).
    pub peer_max_message: usize,
    /// The message credit window this side granted the peer.
    pub window: u64,
    /// The message credit window the peer granted this side (from its greeting).
    pub peer_window: u64,
    /// Message credit left to this side: `peer_window` minus what is in flight. Only
    /// holders of the writer lock spend it; the reader adds what the peer returns.
    pub credit: AtomicI64,
    /// Held while a frame is written, so frames never interleave; holds the last
    /// sequence number assigned, so that sequence order is stream order.
    pub writer: Mutex<u64>,
    /// Copy of the last sequence number assigned (stored before its frame is sent).
    pub last_seq: AtomicU64,
    pub state: Mutex<State>,
    pub state_cv: Condvar,
    pub inbox: Mutex<Inbox>,
    /// Wakes `recv` callers.
    pub inbox_cv: Condvar,
    replies: Mutex<Replies>,
    replies_cv: Condvar,
    pub windows: RwLock<LocalSpace>,
    /// Mirror of the peer's windows, kept from its register/unregister notices.
    pub peer_windows: RwLock<WindowTable<()>>,
    gone: OnceLock<Gone>,
    /// The read half of the socket: whoever holds it reads and applies frames, one
    /// whole frame at a time (see [`rx`]).
    rx: Mutex<FrameReader<FdSource>>,
    /// Callers inside a waiting call (they read the socket themselves).
    attending: AtomicUsize,
    /// Counts entries into waiting calls, so that the reader thread sees callers that came
    /// and went since it last looked.
    visits: AtomicU64,
    /// The reader thread holds `rx` and may sleep in `poll`: a caller kicks `wake`.
    polling: AtomicBool,
    wake: OwnedFd,
    /// Bumped whenever frames were applied or `rx` was let go, for callers that wait while
    /// another thread reads.
    epoch: AtomicU64,
    epoch_waiters: AtomicUsize,
    epoch_lock: Mutex<()>,
    epoch_cv: Condvar,
    /// Where the reader thread waits while callers read the socket.
    park_lock: Mutex<()>,
    park_cv: Condvar,
}

impl Shared {
    pub(crate) fn new(
        stream: TcpStream,
        fd: RawFd,
        (local, peer): (Addr, Addr),
        opts: TcpOptions,
        peer_max_message: usize,
        peer_window: u64,
    ) -> io::Result<Shared> {
        let limits = Limits {
            max_message: opts.max_message as u64,
            max_rma: MAX_RMA,
        };
        let source = FdSource {
            fd,
            blocking: false,
            spin: opts.spin,
        };
        Ok(Shared {
            _stream: stream,
            fd,
            local,
            peer,
            window: opts.window(),
            opts,
            peer_max_message,
            peer_window,
            credit: AtomicI64::new(peer_window as i64),
            writer: Mutex::new(0),
            last_seq: AtomicU64::new(0),
            state: Mutex::default(),
            state_cv: Condvar::new(),
            inbox: Mutex::default(),
            inbox_cv: Condvar::new(),
            replies: Mutex::default(),
            replies_cv: Condvar::new(),
            windows: RwLock::default(),
            peer_windows: RwLock::default(),
            gone: OnceLock::new(),
            rx: Mutex::new(FrameReader::new(source, limits)),
            attending: AtomicUsize::new(0),
            visits: AtomicU64::new(0),
            polling: AtomicBool::new(false),
            wake: sys::eventfd()?,
            epoch: AtomicU64::new(0),
            epoch_waiters: AtomicUsize::new(0),
            epoch_lock: Mutex::new(()),
            epoch_cv: Condvar::new(),
            park_lock: Mutex::new(()),
            park_cv: Condvar::new(),
        })
    }

    /// The error every call reports once the connection is over.
    pub(crate) fn gone_error(&self) -> Option<Error> {
        self.gone.get().map(|g| g.error(&self.peer))
    }

    pub(crate) fn is_gone(&self) -> bool {
        self.gone.get().is_some()
    }

    pub(crate) fn check_open(&self) -> Result<(), Error> {
        match self.gone_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Ends the connection (first cause wins): shuts the socket down, which wakes a
    /// blocked reader and blocked senders, and wakes every waiter.
    pub(crate) fn set_gone(&self, g: Gone) {
        if self.gone.set(g).is_err() {
            return;
        }
        sys::shutdown(self.fd, libc::SHUT_RDWR);
        {
            let _g = lock(&self.inbox);
            self.inbox_cv.notify_all();
        }
        {
            let _g = lock(&self.state);
            self.state_cv.notify_all();
        }
        {
            let mut r = lock(&self.replies);
            r.stop = true;
            self.replies_cv.notify_all();
        }
        {
            let _g = lock(&self.park_lock);
            self.park_cv.notify_all();
        }
        self.bump();
    }

    /// Turns a failed send into the connection's end, and returns the error to report.
    pub(crate) fn fail_send(&self, e: io::Error, during: &str) -> Error {
        let cause = match e.raw_os_error() {
            Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ESHUTDOWN) => {
                format!("the connection was closed while {during}")
            }
            _ => format!("{during} failed: {e}"),
        };
        self.set_gone(Gone::peer(cause));
        self.gone_error()
            .unwrap_or_else(|| Error::peer_gone(&self.peer, "the connection failed"))
    }

    /// Writes one frame; the caller holds the writer lock (`_w` is the proof).
    ///
    /// # Safety
    /// `payload` must be readable for `len` bytes until the call returns.
    pub(crate) unsafe fn send_locked(
        &self,
        _w: &MutexGuard<'_, u64>,
        h: &Header,
        payload: *const u8,
        len: usize,
        during: &str,
    ) -> Result<(), Error> {
        // SAFETY: forwarded caller contract.
        unsafe { sys::send_frame(self.fd, &h.encode(), payload, len) }
            .map_err(|e| self.fail_send(e, during))
    }

    /// Sends a read's data from device memory: the frame's header, then `len` bytes at
    /// `at` of `m` as its driver copies them off the device, chunk by chunk. The header
    /// has promised them all: a device copy that fails part-way ends the connection.
    pub(crate) fn send_device_data(
        &self,
        w: &MutexGuard<'_, u64>,
        id: u64,
        m: &dyn DeviceMemory,
        at: usize,
        len: usize,
    ) -> Result<(), Error> {
        let during = "sending read data from device memory";
        self.send_header(w, &Header::read_data(id, len), during)?;
        let mut sent = None;
        let r = m.drain(at, len, &mut |chunk| {
            sys::send_all(self.fd, chunk).map_err(|e| {
                let err = self.fail_send(e, during);
                sent = Some(err);
                Error::invalid("rma", "the connection failed")
            })
        });
        match (sent, r) {
            (Some(e), _) => Err(e),
            (None, Ok(())) => Ok(()),
            (None, Err(e)) => {
                let cause = format!("a device copy for the peer's read failed: {e}");
                self.set_gone(Gone::protocol(cause.clone()));
                sys::shutdown(self.fd, libc::SHUT_RDWR);
                Err(Error::protocol(&self.peer, cause))
            }
        }
    }

    /// Sends a frame without payload.
    pub(crate) fn send_header(
        &self,
        w: &MutexGuard<'_, u64>,
        h: &Header,
        during: &str,
    ) -> Result<(), Error> {
        // SAFETY: no payload.
        unsafe { self.send_locked(w, h, std::ptr::null(), 0, during) }
    }

    /// Assigns the next sequence number (under the writer lock).
    pub(crate) fn next_seq(&self, w: &mut MutexGuard<'_, u64>) -> u64 {
        **w += 1;
        self.last_seq.store(**w, Ordering::Release);
        **w
    }

    fn notify_state(&self, st: &State) {
        if st.waiters > 0 {
            self.state_cv.notify_all();
        }
    }

    /// Tells the responder to send what is queued and exit.
    pub(crate) fn stop_responder(&self) {
        let mut q = lock(&self.replies);
        q.stop = true;
        self.replies_cv.notify_all();
    }

    /// Waits until `done` holds for the state, or until `deadline`.
    pub(crate) fn wait_done(&self, done: impl Fn(&State) -> bool, deadline: Instant) {
        let mut st = lock(&self.state);
        while !done(&st) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            st.waiters += 1;
            st = self
                .state_cv
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            st.waiters -= 1;
        }
    }

    /// True if this side may send a message costing `cost` now (see [`may_send`]).
    pub(crate) fn has_credit(&self, cost: u64) -> bool {
        let credit = self.credit.load(Ordering::Acquire);
        let in_flight = (self.peer_window as i64).saturating_sub(credit).max(0) as u64;
        may_send(in_flight, cost, self.peer_window)
    }

    /// Waits until a message costing `cost` may be sent, or the connection is over.
    pub(crate) fn wait_credit(&self, cost: u64) {
        self.wait_for(None, || {
            (self.has_credit(cost) || self.is_gone()).then_some(())
        });
    }

    /// Returns credit `recv` freed to the peer: straight onto the socket when no one else
    /// is writing and its send buffer has room (no wake-up of another thread, which on a
    /// machine with few cores takes the core the receiving caller runs on), else through
    /// the responder. Credit frames add up, so their order does not matter.
    pub(crate) fn return_credit(&self, n: u64) {
        if let Ok(_w) = self.writer.try_lock() {
            if self.gone.get().is_some() {
                return;
            }
            // SAFETY: no payload.
            match unsafe {
                sys::try_send_frame(self.fd, &Header::credit(n).encode(), std::ptr::null(), 0)
            } {
                Ok(sys::TrySend::Sent) => return,
                Ok(sys::TrySend::WouldBlock) => {}
                Err(e) => {
                    self.fail_send(e, "returning message credit");
                    return;
                }
            }
        }
        let mut q = lock(&self.replies);
        if q.stop {
            return;
        }
        q.credit += n;
        if q.responder_idle {
            self.replies_cv.notify_all();
        }
    }

    /// The error for a fault the peer reported, phrased from this side (via the mirror
    /// of the peer's windows, which names the window).
    pub(crate) fn fault_error(&self, f: Fault) -> Error {
        let table = read(&self.peer_windows);
        match table.find(f.offset, f.len, f.need, Side::Remote, &self.peer) {
            Err(e) => e,
            Ok((w, _)) => match f.code {
                FaultCode::AccessDenied => Error::AccessDenied {
                    side: Side::Remote,
                    endpoint: self.peer.to_string(),
                    window: *w,
                    need: f.need,
                    offset: f.offset,
                    len: f.len,
                },
                FaultCode::OutOfWindow => Error::OutOfWindow {
                    side: Side::Remote,
                    endpoint: self.peer.to_string(),
                    offset: f.offset,
                    len: f.len,
                    nearest: Some(*w),
                },
                FaultCode::Device => Error::io(
                    "rma",
                    format!(
                        "{} bytes at {:#x} of {}'s window {w}",
                        f.len, f.offset, self.peer
                    ),
                    io::Error::other(
                        "the peer's device copy failed (its driver's error is on its side)",
                    ),
                ),
            },
        }
    }
}

/// A view of `len` bytes at `rel` within window `w`.
pub(crate) fn sub_view(w: &Window, rel: u64, len: usize) -> Option<MemView> {
    let base = w.as_ptr() as usize - w.region().as_ptr() as usize;
    let start = base.checked_add(usize::try_from(rel).ok()?)?;
    if rel.checked_add(len as u64)? > w.len() as u64 {
        return None;
    }
    MemView::sub(w.region().clone(), start, len)
}
