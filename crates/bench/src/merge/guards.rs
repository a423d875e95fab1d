//! Guards that clean up when the bench stops early: producer processes and output files;
//! and the wait for a producer process that Ctrl-C can end.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A producer process, killed if the bench stops early.
pub(super) struct Kid(pub(super) Child);

impl Drop for Kid {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

pub(super) struct RemoveOnDrop(pub(super) PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// How often a wait looks at the cancellation flag.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// Waits for `child` to exit; `None` once `cancel` is set first (checked every 50 ms; the
/// child is left running for its [`Kid`] guard to kill). The exit itself is seen at once:
/// the wait sleeps in `poll` on a pidfd of the child (Linux 5.3), and where there is none,
/// in 1 ms steps (`producer_exit_s` times the exits after the merge figure's clock).
pub(super) fn wait_child(child: &mut Child, cancel: &AtomicBool) -> io::Result<Option<ExitStatus>> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1. The
    // child is ours and not yet reaped (only this function and the guard wait for it), so
    // its pid cannot name another process.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    let pidfd = if fd >= 0 {
        // SAFETY: a fresh descriptor that nothing else owns.
        Some(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
    } else {
        None
    };
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(Some(st));
        }
        if cancel.load(Ordering::SeqCst) {
            return Ok(None);
        }
        match &pidfd {
            Some(fd) => {
                use std::os::fd::AsRawFd;
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd for the duration of the call. Its result is
                // re-read through try_wait above (EINTR from Ctrl-C included).
                unsafe { libc::poll(&mut p, 1, CANCEL_POLL.as_millis() as libc::c_int) };
            }
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Instant;

    static NEVER: AtomicBool = AtomicBool::new(false);
    static SET: AtomicBool = AtomicBool::new(true);

    #[test]
    fn wait_child_sees_the_exit_at_once_and_stops_on_cancel() {
        let mut c = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let t = Instant::now();
        let st = wait_child(&mut c, &NEVER).unwrap().unwrap();
        assert_eq!(st.code(), Some(3));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

        let mut kid = Kid(Command::new("sleep").arg("30").spawn().unwrap());
        let t = Instant::now();
        assert!(wait_child(&mut kid.0, &SET).unwrap().is_none());
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
        let pid = kid.0.id() as libc::pid_t;
        drop(kid);
        // The guard killed and reaped it: the pid no longer names our child.
        // SAFETY: kill with signal 0 only checks for existence.
        assert_eq!(unsafe { libc::kill(pid, 0) }, -1);
    }
}
