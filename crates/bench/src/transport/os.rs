//! The operating-system side of a two-process bench: core pinning, the peer process's
//! lifetime.
//!
//! Why pin: on a 2-core VM two busy processes own both cores, and letting the scheduler
//! move them adds migrations to every figure (`MACHINE_NOTES.md`, trait 3). Why the
//! care with the child: a peer left running after the driver fails would keep a core
//! busy and, for `shm`, a name bound; so the child dies with its parent (`PR_SET_PDEATHSIG`),
//! is killed and reaped when the driver drops it, and Ctrl-C (which the terminal delivers to
//! both; see [`crate::cancel`]) ends the run with what it measured so far.

use std::ffi::OsString;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How to start the peer process: a program and its leading arguments. The bench appends
/// the peer's own arguments ([`super::PeerConfig::to_args`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerCommand {
    /// The executable, normally the running one (`std::env::current_exe()`).
    pub program: PathBuf,
    /// Arguments before the peer's own, e.g. the hidden subcommand `__transport-peer`.
    pub args: Vec<OsString>,
}

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the host, so a time
/// taken by the peer can be compared with one taken by the driver.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to fill; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPUs this thread may run on, in increasing order (empty if the kernel will not say).
pub(crate) fn allowed_cpus() -> Vec<usize> {
    let mut set = MaybeUninit::<libc::cpu_set_t>::zeroed();
    // SAFETY: `set` is a properly sized, zero-initialized cpu_set_t the kernel fills in.
    let rc = unsafe {
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set.as_mut_ptr())
    };
    if rc != 0 {
        return Vec::new();
    }
    // SAFETY: zero-initialized above and filled by a successful sched_getaffinity.
    let set = unsafe { set.assume_init() };
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, the size of the set.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Two different CPUs, for the driver and the peer, when this thread may use two or more.
pub fn pick_cpus() -> Option<(usize, usize)> {
    match allowed_cpus()[..] {
        [a, b, ..] => Some((a, b)),
        _ => None,
    }
}

fn set_affinity(set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: `set` is a valid cpu_set_t; pid 0 means the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Pins the calling thread (and threads it starts later) to `cpu`.
pub(crate) fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "cpu {cpu} is beyond the {} CPUs a cpu_set_t holds",
                libc::CPU_SETSIZE
            ),
        ));
    }
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    set_affinity(&set)
}

/// Pins the calling thread to one CPU and restores its previous CPU set when dropped, so the
/// benches that `accio bench` runs afterwards are not left on one core.
pub struct AffinityGuard {
    saved: libc::cpu_set_t,
}

impl AffinityGuard {
    /// Pins the calling thread to `cpu`.
    pub fn pin(cpu: usize) -> io::Result<AffinityGuard> {
        let mut saved = MaybeUninit::<libc::cpu_set_t>::zeroed();
        // SAFETY: `saved` is a zeroed cpu_set_t of the size passed.
        let rc = unsafe {
            libc::sched_getaffinity(
                0,
                std::mem::size_of::<libc::cpu_set_t>(),
                saved.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        pin_current_thread(cpu)?;
        Ok(AffinityGuard {
            // SAFETY: filled by the successful sched_getaffinity above.
            saved: unsafe { saved.assume_init() },
        })
    }
}

impl Drop for AffinityGuard {
    fn drop(&mut self) {
        // Best effort: the set was valid when read; there is nothing to do if it fails now.
        let _ = set_affinity(&self.saved);
    }
}

/// In the peer: asks the kernel to kill this process when the thread that started it exits,
/// and fails if that parent is already gone (it may have died before the request).
pub(crate) fn die_with_parent(parent: Option<u32>) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number; no pointers involved.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if let Some(p) = parent {
        // SAFETY: getppid has no preconditions.
        let now = unsafe { libc::getppid() };
        if u32::try_from(now).ok() != Some(p) {
            return Err(io::Error::other(format!(
                "the driver process {p} is gone (parent is now {now})"
            )));
        }
    }
    Ok(())
}

/// Describes how a process ended: "exited with status 1", "was killed by signal 9 (SIGKILL)".
pub(crate) fn describe_exit(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with status {code}");
    }
    match status.signal() {
        Some(sig) => {
            let name = match sig {
                libc::SIGINT => " (SIGINT)",
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGBUS => " (SIGBUS)",
                _ => "",
            };
            format!("was killed by signal {sig}{name}")
        }
        None => format!("ended ({status})"),
    }
}

/// The peer process. Dropping it kills and reaps the child if it is still running.
#[derive(Debug)]
pub(crate) struct PeerProcess {
    child: Child,
    exit: Option<ExitStatus>,
}

impl PeerProcess {
    /// Starts `cmd` with `args` appended. stdout is discarded; stderr is inherited so the
    /// peer's own error message reaches the user.
    pub(crate) fn spawn(cmd: &PeerCommand, args: &[String]) -> io::Result<PeerProcess> {
        let child = Command::new(&cmd.program)
            .args(&cmd.args)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        Ok(PeerProcess { child, exit: None })
    }

    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the child ended, if it has; waits up to `grace` for it to end (a peer that died
    /// is usually noticed by the driver a moment before its exit is reapable).
    pub(crate) fn exit_status(&mut self, grace: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + grace;
        loop {
            if self.exit.is_none() {
                self.exit = self.child.try_wait().ok().flatten();
            }
            if self.exit.is_some() || Instant::now() >= deadline {
                return self.exit;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits up to `grace` for a clean exit, then kills. Returns the exit status.
    pub(crate) fn finish(mut self, grace: Duration) -> Option<ExitStatus> {
        if let Some(s) = self.exit_status(grace) {
            return Some(s);
        }
        let _ = self.child.kill();
        self.exit = self.child.wait().ok();
        self.exit
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        if self.exit.is_none() && matches!(self.child.try_wait(), Ok(None)) {
            // Killing an already-exited child only fails with ESRCH-like errors; reaping
            // afterwards is what matters (no zombie).
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_descriptions_name_the_cause() {
        assert_eq!(
            describe_exit(ExitStatus::from_raw(1 << 8)),
            "exited with status 1"
        );
        assert_eq!(
            describe_exit(ExitStatus::from_raw(9)),
            "was killed by signal 9 (SIGKILL)"
        );
    }

    #[test]
    fn affinity_guard_restores_the_cpu_set() {
        let before = allowed_cpus();
        assert!(!before.is_empty());
        {
            let _g = AffinityGuard::pin(before[0]).unwrap();
            assert_eq!(allowed_cpus(), vec![before[0]]);
        }
        assert_eq!(allowed_cpus(), before);
    }

    #[test]
    fn dropping_a_peer_kills_and_reaps_it() {
        let cmd = PeerCommand {
            program: "sleep".into(),
            args: vec![],
        };
        let mut p = PeerProcess::spawn(&cmd, &["30".into()]).unwrap();
        let pid = p.pid();
        assert!(p.exit_status(Duration::ZERO).is_none());
        drop(p);
        // Reaped: the pid no longer names a child of ours.
        // SAFETY: waitpid on a pid with WNOHANG; no pointers besides a null status.
        let rc = unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
        assert_eq!(rc, -1);
    }
}
