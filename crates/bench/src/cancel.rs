//! Ctrl-C for every bench: one flag, one handler.
//!
//! The handler (of SIGINT, and of SIGTERM alike) only sets [`INTERRUPTED`] and says so on
//! stderr (the things an async-signal handler may do safely). Benches check the flag between
//! steps (fs between records, transport between figures, merge and coalesce between runs
//! and blocks) and end with their `Interrupted` error; the guards that own test files and
//! peer processes clean up while the error unwinds (the terminal also delivers the signal to
//! a bench's peer process, which dies, so a driver blocked on it wakes with `PeerGone`
//! within a second). A second signal at least 200 ms after the first kills the process at
//! once, for a step that takes very long (a slow `fsync` on a network file system); one
//! sooner is the same interruption delivered twice (`timeout` signals the process and then
//! its process group) and is ignored.
//!
//! A library does not take signals on its own: the `accio` binary holds a [`SigintGuard`]
//! while a bench runs; a program embedding the benches does the same or sets the flag.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Set by the SIGINT handler (or by a caller that wants the running bench to stop).
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether Ctrl-C arrived (or [`INTERRUPTED`] was set) since the last [`SigintGuard`] was
/// installed.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// When the first signal arrived, in ns of `CLOCK_MONOTONIC`.
static FIRST_NS: AtomicU64 = AtomicU64::new(0);

/// A second signal sooner than this after the first is the same one delivered twice.
const REPEAT_NS: u64 = 200_000_000;

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime is async-signal-safe and writes only `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

extern "C" fn on_signal(sig: libc::c_int) {
    let now = monotonic_ns();
    if !INTERRUPTED.swap(true, Ordering::SeqCst) {
        FIRST_NS.store(now, Ordering::SeqCst);
        let msg = b"\ninterrupted: finishing the current step and removing test files (Ctrl-C again to abort at once)\n";
        // SAFETY: write(2) is async-signal-safe; the buffer is a static byte string. The
        // result is ignored on purpose: nothing useful can be done about a failed
        // diagnostic here.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
        }
        return;
    }
    if now.saturating_sub(FIRST_NS.load(Ordering::SeqCst)) < REPEAT_NS {
        return;
    }
    // SAFETY: signal(2) and raise(3) are async-signal-safe: the default action ends the
    // process as the signal asks.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Turns the first SIGINT or SIGTERM into [`INTERRUPTED`] while it lives (clearing the
/// flag when installed); restores the previous handlers when dropped.
pub struct SigintGuard {
    old: [libc::sigaction; 2],
}

/// The signals a bench turns into [`INTERRUPTED`].
const SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGTERM];

impl std::fmt::Debug for SigintGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigintGuard").finish_non_exhaustive()
    }
}

impl SigintGuard {
    /// Installs the handler and clears the flag.
    pub fn install() -> io::Result<SigintGuard> {
        INTERRUPTED.store(false, Ordering::SeqCst);
        // SAFETY: `sigaction` is a plain C struct for which all-zero is a valid value
        // (empty mask, no flags); the fields we rely on are set below.
        let mut new: libc::sigaction = unsafe { std::mem::zeroed() };
        new.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        new.sa_flags = libc::SA_RESTART;
        // SAFETY: as above.
        let mut old: [libc::sigaction; 2] = unsafe { std::mem::zeroed() };
        for (sig, old) in SIGNALS.iter().zip(old.iter_mut()) {
            // SAFETY: `new.sa_mask` is a valid sigset_t owned by this frame; both pointers
            // are valid sigaction structs; the handler only touches atomics and calls
            // async-signal-safe functions.
            let rc = unsafe {
                libc::sigemptyset(&mut new.sa_mask);
                libc::sigaction(*sig, &new, old)
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(SigintGuard { old })
    }
}

impl Drop for SigintGuard {
    fn drop(&mut self) {
        for (sig, old) in SIGNALS.iter().zip(&self.old) {
            // SAFETY: restores the action read at install time.
            unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
        }
    }
}
