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

/// How long a wait polls before it asks whether the peer shares its CPU (see
/// [`ShmEndpoint::peer_on_this_cpu`]): past a round trip between two cores (about 0.5 us
/// here), so that waits that end in time never pay for the question.
const BESIDE_LOOK: Duration = Duration::from_micros(1);

/// How often at most an endpoint moves its waiting thread off the CPU its peer shares
/// (see [`ShmEndpoint::wait`]): where more busy threads than CPUs make sharing
/// unavoidable, a few system calls every 2 ms cost nothing measurable.
const MOVE_OFF_NS: u64 = 2_000_000;

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

    /// Whether the peer last waited on the CPU this thread runs on; notes this thread's
    /// CPU for the peer's own question. Two processes the scheduler put on one CPU (more
    /// busy processes than CPUs, and wake-ups that pull a woken peer beside its waker)
    /// take turns: the peer cannot answer until this waiter yields, so polling first only
    /// adds the wait's whole [`Spin::ALONE`] to every message (one way 11 us instead of
    /// 0.5 from Python, with a busy process beside the ping-pong, in 2 of 5 runs).
    fn peer_on_this_cpu(&self) -> Option<usize> {
        // SAFETY: sched_getcpu takes no arguments (the vDSO's getcpu).
        let cpu = unsafe { libc::sched_getcpu() };
        let me = u32::try_from(cpu + 1).ok().filter(|&m| m != 0)?;
        if self.cpu_noted.load(Ordering::Relaxed) != me {
            self.link.cpu(self.side).store(me, Ordering::Relaxed);
            self.cpu_noted.store(me, Ordering::Relaxed);
        }
        (self.link.cpu(1 - self.side).load(Ordering::Relaxed) == me).then_some(me as usize - 1)
    }

    /// This thread shares `cpu` with its peer: moves itself to another CPU it may use, at
    /// most once per [`MOVE_OFF_NS`] per endpoint. True if it moved.
    fn move_off(&self, cpu: usize) -> bool {
        let now = sys::coarse_clock_ns();
        let last = self.moved_off.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < MOVE_OFF_NS {
            return false;
        }
        self.moved_off.store(now.max(1), Ordering::Relaxed);
        sys::move_off_cpu(cpu)
    }

    /// Waits until `ready()`: spins for `opts.spin` (handing the core over now and then,
    /// [`Spin`], and at every turn once the peer is found to share this CPU), then sleeps
    /// on `word` (a futex the other side wakes), checking the peer's liveness every
    /// [`LIVENESS_TICK`].
    ///
    /// An [`Awaited::Answer`] (a receive after this endpoint sent) is looked for at once, a
    /// burst of polls before the clock is first read: the two clock reads that start the
    /// spin took 10 of the 86 ns of a one-way 8 B message between two pinned processes
    /// (64 B: 0.095 to 0.090 us, 4 KiB 0.24 to 0.23; 1 KiB went from 0.135-0.141 to 0.146,
    /// a look at the record's header line while the producer still copies the payload
    /// taking the line back from it). Other waits read the clock first: a receive that
    /// answers nothing (a sink) polls the very line the producer is about to write, and
    /// looking at once took it back from the producer more often (streams of 8 and 64 B
    /// messages 5-7% slower).
    pub(super) fn wait(
        &self,
        word: &AtomicU32,
        mut ready: impl FnMut() -> bool,
        deadline: Option<Instant>,
        op: &'static str,
        awaited: Awaited,
    ) -> Result<()> {
        // The last wait that looked found the peer on this CPU with both pinned to it:
        // polling first only delays the peer, as long as it is still there.
        let mut beside = self.beside.load(Ordering::Relaxed);
        if beside && self.peer_on_this_cpu().is_none() {
            beside = false;
            self.beside.store(false, Ordering::Relaxed);
        }
        if awaited == Awaited::Answer && !beside && poll_briefly(&mut ready) {
            return Ok(());
        }
        let start = Instant::now();
        let mut spin = Spin::new(self.opts.spin);
        if beside {
            spin.share_core();
        }
        let mut looked = false;
        while spin.go_on() {
            if poll_briefly(&mut ready) {
                return Ok(());
            }
            if !looked && start.elapsed() >= BESIDE_LOOK {
                looked = true;
                // The scheduler put both ends on one CPU (wake-ups pull a woken thread
                // beside its waker) while others are free or shared with strangers: this
                // end moves off, and the two answer each other from cores of their own
                // again. Where it cannot, it hands the core over at every turn; pinned
                // there, the next waits start doing so while the peer is still beside it.
                // (Unpinned, they poll first again: starting shared, they seldom lasted
                // until they would look, and a pair the scheduler had put together next
                // to a busy process stayed together for whole batches at 2 us one way.)
                let shares = self
                    .peer_on_this_cpu()
                    .is_some_and(|cpu| !self.move_off(cpu));
                if shares {
                    spin.share_core();
                }
                let pinned = shares && sys::pinned_to_one_cpu();
                if pinned != beside {
                    self.beside.store(pinned, Ordering::Relaxed);
                }
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
            if sleep_once(word, &mut ready, tick, awaited == Awaited::Room) {
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

/// What a [`ShmEndpoint::wait`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Awaited {
    /// A message that answers one this endpoint sent: looked for at once.
    Answer,
    /// Any other message.
    Message,
    /// Room in the ring to send: the consumer that frees it may wake this side without
    /// a fence of its own (see `ring::wake`).
    Room,
}

/// Polls `ready` [`POLLS`] times, pausing between looks; true as soon as it is. A wait
/// starts with such a burst before it reads any clock.
fn poll_briefly(ready: &mut impl FnMut() -> bool) -> bool {
    for _ in 0..POLLS {
        if ready() {
            return true;
        }
        std::hint::spin_loop();
    }
    false
}

/// Looks at the ring between two reads of the clock.
const POLLS: usize = 64;
