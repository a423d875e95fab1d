//! Liveness and waiting: noticing a peer that closed, exited or was killed, and waiting
//! for the rings (spin, then sleep on a futex with a liveness tick).
//!
//! A peer that closes says so in shared memory (one load). One that exits or is killed
//! says nothing; its control socket hangs up. Calls that do not wait look for that in one
//! of two ways. Until the endpoint first maps a peer window, now and then: a coarse clock
//! read per call and a `poll` every [`POLL_PROBE_NS`]. From then on (RMA streams are where
//! a call costs tens of nanoseconds, and the clock read was ~28% of a 64 B `write_to`) a
//! watcher thread blocked in `poll` on the socket's hang-up sets `gone`, and a call only
//! loads flags. The thread is not started at connect, where it would add its creation to
//! every connection that never uses RMA.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use accio_core::{Error, Result, Spin};

use super::ShmEndpoint;
use crate::ring::sleep_once;
use crate::sys;

/// How often a sleeping waiter wakes to check whether the peer is still there.
const LIVENESS_TICK: Duration = Duration::from_millis(50);
/// How often a call that does not wait (a non-blocking one that would block, a `send` that
/// finds room, an RMA) probes the control socket for a hang-up (one `poll` system call):
/// often enough that a caller sees a killed or exited peer well within a second, rarely
/// enough that these calls stay free of system calls almost always.
const POLL_PROBE_NS: u64 = 10_000_000;

impl ShmEndpoint {
    pub(super) fn peer_gone_error(&self) -> Error {
        let cause = if self.link.is_closed(1 - self.side) {
            "it closed the endpoint"
        } else {
            "its process exited or was killed (control socket hung up)"
        };
        Error::peer_gone(&self.addr, cause)
    }

    /// Ok if the peer is still there; checks the shared "closed" word and the control
    /// socket's hang-up state (one `poll` system call).
    pub(super) fn check_alive(&self) -> Result<()> {
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
    /// `gone`, another): see [`Link::last_look`](crate::link::Link::last_look).
    pub(super) fn last_look(&self, ready: impl FnOnce() -> bool) -> bool {
        self.link.last_look(1 - self.side, ready)
    }

    /// For calls that do not wait: [`ShmEndpoint::check_alive`], but at most once per
    /// [`POLL_PROBE_NS`], so a `try_recv` loop notices a killed peer (whose ring simply
    /// stays empty), and a `send` one that exited (whose ring still has room), without a
    /// system call on every turn.
    pub(super) fn probe_alive_now_and_then(&self) -> Result<()> {
        // A peer that closed says so in shared memory: that costs one load, check it always.
        if self.link.is_closed(1 - self.side) {
            self.gone.set();
            return Err(self.peer_gone_error());
        }
        if self.watched.load(Ordering::Relaxed) {
            // The watcher sets `gone` when the socket hangs up.
            if self.gone.get() {
                return Err(self.peer_gone_error());
            }
            return Ok(());
        }
        let now = sys::coarse_clock_ns();
        if now.saturating_sub(self.probed.load(Ordering::Relaxed)) < POLL_PROBE_NS {
            return Ok(());
        }
        self.probed.store(now, Ordering::Relaxed);
        self.check_alive()
    }

    /// Starts the hang-up watcher, once (see the module docs). Should the thread not
    /// start, calls keep probing now and then.
    pub(super) fn watch_hang_up(&self) {
        if self.watched.load(Ordering::Relaxed) {
            return;
        }
        let mut slot = self.watcher.lock().expect("watcher lock");
        if slot.is_some() {
            return;
        }
        // A descriptor of its own: the endpoint's is closed when the endpoint drops, while
        // the thread may still be on its way out of `poll`.
        let Ok(sock) = self.sock.try_clone() else {
            return;
        };
        let gone = self.gone.clone();
        let started = std::thread::Builder::new()
            .name("accio-shm-watch".into())
            .stack_size(64 << 10)
            .spawn(move || {
                sys::wait_hung_up(sock.as_raw_fd());
                gone.set();
            });
        if let Ok(handle) = started {
            *slot = Some(handle);
            self.watched.store(true, Ordering::Relaxed);
        }
    }

    /// Waits until `ready()`: spins for `opts.spin` (handing the core over now and then,
    /// [`Spin`]), then sleeps on `word` (a futex the other side wakes), checking the peer's
    /// liveness every [`LIVENESS_TICK`].
    pub(super) fn wait(
        &self,
        word: &AtomicU32,
        mut ready: impl FnMut() -> bool,
        deadline: Option<Instant>,
        op: &'static str,
    ) -> Result<()> {
        let start = Instant::now();
        let mut spin = Spin::new(self.opts.spin);
        while spin.go_on() {
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

    /// Ok unless the peer is gone, for calls that may not wait and so would otherwise never
    /// look: the sticky `gone` flag, the peer's closed word (one load), and now and then the
    /// control socket (a peer that exited or was killed sets no closed word).
    #[inline]
    pub(super) fn check_not_gone(&self) -> Result<()> {
        // The RMA hot path: three loads of lines that do not change while the peer lives.
        if self.watched.load(Ordering::Relaxed)
            && !self.gone.get()
            && !self.link.is_closed(1 - self.side)
        {
            return Ok(());
        }
        self.check_not_gone_slow()
    }

    #[inline(never)]
    fn check_not_gone_slow(&self) -> Result<()> {
        if self.gone.get() {
            return Err(self.peer_gone_error());
        }
        self.probe_alive_now_and_then()
    }
}
