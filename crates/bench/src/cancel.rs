//! Ctrl-C for every bench: one flag, one handler.
//!
//! The SIGINT handler only sets [`INTERRUPTED`] and says so on stderr (the two things an
//! async-signal handler may do safely). Benches check the flag between steps (fs between
//! records, transport between figures, merge and coalesce between runs) and end with their
//! `Interrupted` error; the guards that own test files and peer processes clean up while the
//! error unwinds (the terminal also delivers the signal to a bench's peer process, which
//! dies, so a driver blocked on it wakes with `PeerGone` within a second). The handler is
//! installed with `SA_RESETHAND`, so a second Ctrl-C kills the process at once, for a step
//! that takes very long (a slow `fsync` on a network file system).
//!
//! A library does not take signals on its own: the `accio` binary holds a [`SigintGuard`]
//! while a bench runs; a program embedding the benches does the same or sets the flag.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the SIGINT handler (or by a caller that wants the running bench to stop).
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether Ctrl-C arrived (or [`INTERRUPTED`] was set) since the last [`SigintGuard`] was
/// installed.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

extern "C" fn on_sigint(_sig: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    let msg = b"\ninterrupted: finishing the current step and removing test files (Ctrl-C again to abort at once)\n";
    // SAFETY: write(2) is async-signal-safe; the buffer is a static byte string. The result
    // is ignored on purpose: nothing useful can be done about a failed diagnostic here.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
    }
}

/// Turns the first SIGINT into [`INTERRUPTED`] while it lives (clearing the flag when
/// installed); restores the previous handler when dropped.
pub struct SigintGuard {
    old: libc::sigaction,
}

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
        new.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
        new.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
        // SAFETY: as above.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: `new.sa_mask` is a valid sigset_t owned by this frame; both pointers are
        // valid sigaction structs; the handler only touches an atomic and calls write(2),
        // both async-signal-safe.
        let rc = unsafe {
            libc::sigemptyset(&mut new.sa_mask);
            libc::sigaction(libc::SIGINT, &new, &mut old)
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SigintGuard { old })
    }
}

impl Drop for SigintGuard {
    fn drop(&mut self) {
        // SAFETY: restores the action read at install time.
        unsafe { libc::sigaction(libc::SIGINT, &self.old, std::ptr::null_mut()) };
    }
}
