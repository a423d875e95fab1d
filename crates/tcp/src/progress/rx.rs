//! Who reads the socket, and when.
//!
//! A frame is read by whoever holds `Shared::rx`, from its header to its last payload
//! byte: frames are never split between two readers. Between frames the holder may let
//! go. Two kinds of holders take turns:
//!
//! - a **caller that waits** (`recv`, a fence, `read_from`, `send` short of credit) reads
//!   the socket itself: it spins for [`TcpOptions::spin`] on non-blocking reads (handing
//!   its core over now and then, [`accio_core::Spin`]), then sleeps in `poll` on the
//!   socket, and applies every frame it reads, its own or not.
//!   The answer it waits for thus costs no thread hand-off: on a virtual machine one
//!   blocking wake-up costs about as much as the whole loopback round trip.
//! - the **reader thread** holds the socket only while no caller has waited for a
//!   [`PARK_TICK`]: it then sleeps in `poll` on the socket and a wake-up `eventfd`, so
//!   that RMA, signals and fences are applied while the application is busy elsewhere.
//!   A caller that starts waiting kicks the eventfd; the reader thread lets go between
//!   frames. While callers come and go, it stays off the socket's wait queue: a sleeper
//!   there would be woken (on the other core) by every arriving segment, for nothing.
//!
//! Callers that wait while another thread holds the socket sleep on an epoch counter that
//! every applied frame and every release bumps.
//!
//! [`TcpOptions::spin`]: crate::TcpOptions::spin

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use accio_core::Spin;

use super::{lock, Gone, Shared};
use crate::frame::{FrameReader, ReadError};
use crate::sys::{self, FdSource};

/// How long the reader thread stays off the socket after a caller last waited on it; also
/// the longest a frame can wait unread when the application stops calling in. Short
/// enough for RMA to be applied promptly, long enough that the thread's periodic
/// look costs well under 1% of a core.
pub(crate) const PARK_TICK: Duration = Duration::from_millis(1);

type Rx<'a> = MutexGuard<'a, FrameReader<FdSource>>;

/// A caller inside a waiting call, counted for the reader thread.
struct Attend<'a>(&'a Shared);

impl<'a> Attend<'a> {
    fn enter(s: &'a Shared) -> Attend<'a> {
        // SeqCst pairs with the reader thread's store of `polling` and load of
        // `attending`: either it sees this caller and lets go, or this caller sees it
        // polling and kicks it.
        s.attending.fetch_add(1, SeqCst);
        s.visits.fetch_add(1, SeqCst);
        if s.polling.load(SeqCst) {
            sys::kick(s.wake.as_raw_fd());
        }
        Attend(s)
    }
}

impl Drop for Attend<'_> {
    fn drop(&mut self) {
        self.0.attending.fetch_sub(1, SeqCst);
    }
}

impl Shared {
    fn try_rx(&self) -> Option<Rx<'_>> {
        match self.rx.try_lock() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Tells callers waiting on the epoch that frames were applied or `rx` is free.
    pub(crate) fn bump(&self) {
        self.epoch.fetch_add(1, SeqCst);
        if self.epoch_waiters.load(SeqCst) > 0 {
            let _g = lock(&self.epoch_lock);
            self.epoch_cv.notify_all();
        }
    }

    /// Sleeps until the epoch moves past `seen`, at most `timeout`.
    fn wait_epoch(&self, seen: u64, timeout: Option<Duration>) {
        self.epoch_waiters.fetch_add(1, SeqCst);
        let g = lock(&self.epoch_lock);
        if self.epoch.load(SeqCst) == seen {
            let _g = match timeout {
                None => self.epoch_cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                Some(t) => {
                    self.epoch_cv
                        .wait_timeout(g, t)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        self.epoch_waiters.fetch_sub(1, SeqCst);
    }

    /// Reads and applies one frame if its header (or the rest of it) is there; reads the
    /// payload to its end, waiting if need be. True if a frame was applied or the
    /// connection ended (either is news for waiters), false if nothing was there.
    fn pump_once(&self, rx: &mut FrameReader<FdSource>) -> bool {
        if self.is_gone() {
            return false;
        }
        rx.source_mut().blocking = false;
        let h = match rx.next_header() {
            Ok(Some(h)) => h,
            Ok(None) => {
                self.set_gone(Gone::peer("the peer closed the connection"));
                return true;
            }
            Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::Interrupted => return false,
            Err(e) => {
                self.set_gone(Gone::from_read(e));
                return true;
            }
        };
        rx.source_mut().blocking = true;
        let r = self.apply(rx, h);
        rx.source_mut().blocking = false;
        if let Err(g) = r {
            self.set_gone(g);
        }
        self.bump();
        true
    }

    /// Waits until `check` gives an answer, reading the socket itself while it waits (see
    /// the module docs); `None` if `deadline` passed first. `check` must answer once the
    /// connection is gone (nothing else would end the wait), except while a frame meant
    /// for it is still being read by another thread.
    ///
    /// A deadline is checked between frames: a frame whose header was read is read to
    /// its end first.
    pub(crate) fn wait_for<T>(
        &self,
        deadline: Option<Instant>,
        mut check: impl FnMut() -> Option<T>,
    ) -> Option<T> {
        if let Some(r) = check() {
            return Some(r);
        }
        let _attend = Attend::enter(self);
        let mut spin = Spin::new(self.opts.spin);
        let mut rx: Option<Rx<'_>> = None;
        let out = loop {
            let seen = self.epoch.load(SeqCst);
            if let Some(r) = check() {
                break Some(r);
            }
            let now = Instant::now();
            let left = match deadline {
                Some(d) => match d.checked_duration_since(now) {
                    Some(l) if !l.is_zero() => Some(l),
                    _ => break None,
                },
                None => None,
            };
            if rx.is_none() {
                rx = self.try_rx();
            }
            match rx.as_mut() {
                Some(g) => {
                    if self.pump_once(g) {
                        continue;
                    }
                    if self.is_gone() {
                        // `check` has not answered yet: a reader elsewhere is finishing a
                        // frame; it bumps the epoch when done.
                        drop(rx.take());
                        self.bump();
                        self.wait_epoch(seen, Some(PARK_TICK));
                    } else if spin.go_on() {
                        // Only this thread reads the socket now, so nothing but its
                        // bytes can answer `check`: wait for them (see `readable_now`).
                        while !sys::readable_now(self.fd) && spin.go_on() {
                            std::hint::spin_loop();
                        }
                    } else {
                        sys::poll_readable(self.fd, None, left);
                    }
                }
                None => {
                    if self.polling.load(SeqCst) {
                        sys::kick(self.wake.as_raw_fd());
                    }
                    let cap = if self.is_gone() {
                        Some(PARK_TICK)
                    } else {
                        left
                    };
                    self.wait_epoch(seen, cap);
                }
            }
        };
        if rx.take().is_some() {
            self.bump();
        }
        out
    }

    /// The reader thread's sleep while callers read the socket.
    fn park(&self, t: Duration) {
        let g = lock(&self.park_lock);
        if !self.is_gone() {
            let _g = self.park_cv.wait_timeout(g, t);
        }
    }
}

/// Ends the connection and flags the reader as done when the reader thread exits, also
/// by a panic, so no waiter is left hanging.
struct ReaderExit<'a> {
    shared: &'a Shared,
}

impl Drop for ReaderExit<'_> {
    fn drop(&mut self) {
        // A no-op unless the thread panicked: it leaves only once the connection is gone.
        self.shared
            .set_gone(Gone::peer("the endpoint's reader thread failed"));
        let mut st = lock(&self.shared.state);
        st.reader_done = true;
        self.shared.state_cv.notify_all();
    }
}

/// The reader thread: applies frames while no caller does, until the connection ends.
pub(crate) fn reader_main(shared: Arc<Shared>) {
    let s = &*shared;
    let _exit = ReaderExit { shared: s };
    let wake = s.wake.as_raw_fd();
    let mut seen = s.visits.load(SeqCst);
    while !s.is_gone() {
        let v = s.visits.load(SeqCst);
        if s.attending.load(SeqCst) > 0 || v != seen {
            seen = v;
            s.park(PARK_TICK);
            continue;
        }
        let Some(mut rx) = s.try_rx() else {
            s.park(PARK_TICK);
            continue;
        };
        s.polling.store(true, SeqCst);
        while !s.is_gone() && s.attending.load(SeqCst) == 0 {
            if s.pump_once(&mut rx) {
                continue;
            }
            if sys::poll_readable(s.fd, Some(wake), None) {
                sys::drain(wake);
            }
        }
        s.polling.store(false, SeqCst);
        drop(rx);
        s.bump();
        seen = s.visits.load(SeqCst);
    }
}
