//! Ctrl-C without leaving test files behind.
//!
//! A bench that writes gigabytes of test files must remove them when the user interrupts
//! it. The SIGINT handler only sets a flag (the one thing an async-signal handler may do
//! safely); the I/O loops check the flag between records, return
//! [`FsError::Interrupted`](super::FsError::Interrupted), and the guards that own the test
//! files remove them while the error unwinds to the caller. The handler is installed with
//! `SA_RESETHAND`, so a second Ctrl-C kills the process at once (leaving the files) for the
//! case where one record takes very long (a slow `fsync` on a network file system).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the SIGINT handler; the default cancellation flag of [`super::FsBench`].
pub static SIGINT: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_sig: libc::c_int) {
    SIGINT.store(true, Ordering::SeqCst);
    let msg = b"\ninterrupted: finishing the current record and removing test files (Ctrl-C again to abort at once)\n";
    // SAFETY: write(2) is async-signal-safe; the buffer is a static byte string. The result
    // is ignored on purpose: nothing useful can be done about a failed diagnostic here.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
    }
}

/// Installs the SIGINT handler that sets [`SIGINT`]. Safe to call more than once.
pub fn install_sigint_handler() -> io::Result<()> {
    // SAFETY: `sigaction` is a plain C struct for which all-zero is a valid value; every
    // field we rely on is set below before it is passed to the kernel.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
    sa.sa_flags = libc::SA_RESETHAND;
    // SAFETY: `sa.sa_mask` is a valid sigset_t owned by this frame; the handler only touches
    // an atomic and calls write(2), both async-signal-safe; no old action is requested.
    let rc = unsafe {
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut())
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether SIGINT arrived since the handler was installed.
pub fn sigint_received() -> bool {
    SIGINT.load(Ordering::SeqCst)
}
