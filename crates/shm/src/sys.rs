//! The few Linux calls the shm backend needs that std does not wrap: memfd seals,
//! futex wait/wake on shared memory, file descriptors over a Unix socket (`SCM_RIGHTS`),
//! the peer's credentials and a hang-up probe. All raw FFI of the crate lives here.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// True if the memfd carries the shrink seal (so mapping `len` bytes of it is safe forever).
pub fn is_size_sealed(file: &File) -> bool {
    // SAFETY: fcntl(F_GET_SEALS) on a valid fd has no memory effects.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & libc::F_SEAL_SHRINK != 0
}

/// Sleeps while `*word == expected`, at most `timeout`. Spurious returns are allowed.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; the shared (not
    // PRIVATE) futex op is required because the word lives in memory shared between
    // processes. Errors (EAGAIN, ETIMEDOUT, EINTR) all mean "re-check the condition".
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes every thread (of any process) sleeping on `word`.
pub fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid aligned u32; FUTEX_WAKE only reads its address.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// `membarrier(2)` commands (linux/membarrier.h).
const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;

/// Where this process's registration for `MEMBARRIER_CMD_GLOBAL_EXPEDITED` stands.
const NOT_ASKED: u8 = 0;
const UNDER_WAY: u8 = 1;
const REGISTERED: u8 = 2;
const REFUSED: u8 = 3;
static MEMBARRIER: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(NOT_ASKED);
static MEMBARRIER_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
static MEMBARRIER_DONE: std::sync::Condvar = std::sync::Condvar::new();

/// Whether this process is registered for `MEMBARRIER_CMD_GLOBAL_EXPEDITED`: then
/// [`membarrier_global`] runs a full barrier on every running thread of this and every
/// other registered process (Linux 4.16 and later; refused where the kernel or a seccomp
/// filter says no). The first call starts the registration in a thread of its own: in a
/// process that already runs several threads the kernel waits out an RCU grace period
/// before it answers (a world's barrier test, its ranks threads of one process, saw its
/// first connection take more than its 20 ms slice), which no connect should wait for.
/// Waits up to `wait` for the answer; false while the registration is under way, and
/// true for good once it succeeded.
pub fn membarrier_registered(wait: Duration) -> bool {
    use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
    if MEMBARRIER
        .compare_exchange(NOT_ASKED, UNDER_WAY, AcqRel, Acquire)
        .is_ok()
    {
        // The registration's outcome, noted for every later call.
        let register = || {
            let done = if register_membarrier() {
                REGISTERED
            } else {
                REFUSED
            };
            MEMBARRIER.store(done, Release);
            done == REGISTERED
        };
        if threads_here() == Some(1) {
            // Alone in its process, the kernel answers at once: no thread needed (one
            // would itself make the process one of several threads).
            return register();
        }
        let started = std::thread::Builder::new()
            .name("accio-membarrier".into())
            .stack_size(64 << 10)
            .spawn(move || {
                register();
                // Under the lock, so that a waiter that saw UNDER_WAY is waiting by now.
                let _held = MEMBARRIER_LOCK.lock();
                MEMBARRIER_DONE.notify_all();
            });
        if started.is_err() {
            MEMBARRIER.store(REFUSED, Release);
        }
    }
    if MEMBARRIER.load(Acquire) == UNDER_WAY && !wait.is_zero() {
        let held = MEMBARRIER_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let _ = MEMBARRIER_DONE
            .wait_timeout_while(held, wait, |_| MEMBARRIER.load(Acquire) == UNDER_WAY);
    }
    MEMBARRIER.load(Acquire) == REGISTERED
}

/// How many threads this process runs (`/proc/self/task`), if that can be read.
fn threads_here() -> Option<usize> {
    std::fs::read_dir("/proc/self/task").ok().map(|d| d.count())
}

/// Asks the kernel whether it offers `MEMBARRIER_CMD_GLOBAL_EXPEDITED` and registers this
/// process for it.
fn register_membarrier() -> bool {
    // SAFETY: membarrier takes plain integers and touches no memory of ours.
    let cmds = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) };
    cmds >= 0
        && cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED != 0
        // SAFETY: as above.
        && unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
                0,
                0,
            )
        } == 0
}

/// A full memory barrier on every running thread of every process registered for it
/// ([`membarrier_registered`]), this one's included. False if the call failed.
pub fn membarrier_global() -> bool {
    // SAFETY: membarrier takes plain integers and touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0 }
}

/// Sends `data` and, if given, one file descriptor over a Unix stream socket.
pub fn send_with_fd(sock: RawFd, data: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    let mut sent = 0usize;
    while sent < data.len() {
        let rest = &data[sent..];
        let mut iov = libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // u64 storage keeps the control buffer aligned for cmsghdr.
        let mut cbuf = [0u64; 8];
        // SAFETY: an all-zero msghdr is a valid "no name, no control" header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        // The descriptor goes with the first byte only.
        if let (Some(fd), 0) = (fd, sent) {
            // SAFETY: CMSG_SPACE is a pure size computation.
            let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
            assert!(space <= std::mem::size_of_val(&cbuf));
            msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = space;
            // SAFETY: msg_control points at `space` writable, aligned bytes, so
            // CMSG_FIRSTHDR is non-null and the header and its data fit inside `cbuf`.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&msg);
                (*c).cmsg_level = libc::SOL_SOCKET;
                (*c).cmsg_type = libc::SCM_RIGHTS;
                (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
                std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, fd);
            }
        }
        // SAFETY: `msg` points at live buffers set up above; MSG_NOSIGNAL avoids SIGPIPE.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        sent += n as usize;
    }
    Ok(())
}

/// Receives exactly `buf.len()` bytes and the descriptors that came with them.
/// `nonblocking`: return `Ok(false)` if no byte is available right now.
pub fn recv_with_fds(
    sock: RawFd,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
    nonblocking: bool,
) -> io::Result<bool> {
    let mut got = 0usize;
    while got < buf.len() {
        let mut iov = libc::iovec {
            iov_base: buf[got..].as_mut_ptr() as *mut libc::c_void,
            iov_len: buf.len() - got,
        };
        let mut cbuf = [0u64; 32];
        // SAFETY: an all-zero msghdr is valid; we fill iov and control below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&cbuf);
        let flags = libc::MSG_CMSG_CLOEXEC
            | if nonblocking && got == 0 {
                libc::MSG_DONTWAIT
            } else {
                0
            };
        // SAFETY: `msg` describes live, writable buffers.
        let n = unsafe { libc::recvmsg(sock, &mut msg, flags) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock if got == 0 && nonblocking => return Ok(false),
                _ => return Err(e),
            }
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed the control socket",
            ));
        }
        got += n as usize;
        // SAFETY: the kernel filled `msg_controllen` bytes of `cbuf` with cmsg records;
        // the CMSG_* macros walk them within that length.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c);
                    let count =
                        ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                    for i in 0..count {
                        let fd = std::ptr::read_unaligned((data as *const RawFd).add(i));
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
    }
    Ok(true)
}

/// The user id of the process at the other end of a Unix socket.
pub fn peer_uid(sock: RawFd) -> io::Result<u32> {
    // SAFETY: an all-zero ucred is valid; getsockopt writes at most `len` bytes into it.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: valid fd, option and out-pointers of the right size.
    let r = unsafe {
        libc::getsockopt(
            sock,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// This process's effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Moves the calling thread off CPU `cpu` onto another CPU its affinity allows, then
/// gives it its own affinity back (the scheduler may move it again later, as it would
/// have). False, and nothing changed, where `cpu` is the only CPU it may use.
pub fn move_off_cpu(cpu: usize) -> bool {
    // SAFETY: cpu_set_t is a plain bit set; all-zero is the empty set.
    let mut mine: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `mine` is a cpu_set_t of `size` bytes; 0 is the calling thread.
    if unsafe { libc::sched_getaffinity(0, size, &mut mine) } != 0
        || cpu >= libc::CPU_SETSIZE as usize
        // SAFETY: `mine` is initialized; `cpu` is below CPU_SETSIZE.
        || !unsafe { libc::CPU_ISSET(cpu, &mine) }
        // SAFETY: `mine` is initialized.
        || unsafe { libc::CPU_COUNT(&mine) } < 2
    {
        return false;
    }
    let mut elsewhere = mine;
    // SAFETY: as above.
    unsafe { libc::CPU_CLR(cpu, &mut elsewhere) };
    // SAFETY: both sets are initialized cpu_set_t of `size` bytes.
    unsafe {
        if libc::sched_setaffinity(0, size, &elsewhere) != 0 {
            return false;
        }
        // The thread runs on another CPU now; its own set again lets the scheduler place
        // it as before. Should this fail, the thread keeps every CPU but one.
        libc::sched_setaffinity(0, size, &mine);
    }
    true
}

/// Whether the calling thread may run on one CPU only (pinned to it, `taskset -c N`).
pub fn pinned_to_one_cpu() -> bool {
    // SAFETY: cpu_set_t is a plain bit set; all-zero is the empty set.
    let mut mine: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `mine` is a cpu_set_t of `size` bytes; 0 is the calling thread; CPU_COUNT
    // reads the set sched_getaffinity filled.
    unsafe { libc::sched_getaffinity(0, size, &mut mine) == 0 && libc::CPU_COUNT(&mine) == 1 }
}

/// Nanoseconds of `CLOCK_MONOTONIC_COARSE`: a few ns to read (vDSO, no system call), and
/// exact to a scheduler tick (1-4 ms), plenty for rate-limiting a probe.
pub fn coarse_clock_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is supported since Linux 2.6.32.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// True if the peer of socket `sock` has closed it or died (hang-up pending).
pub fn hung_up(sock: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd: sock,
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// Blocks until the peer of socket `sock` hangs up (or this side shuts it down). Data
/// arriving on the socket does not wake it: only hang-up events are asked for. A failing
/// `poll` (out of memory) is retried after a pause rather than given up: the caller's
/// liveness rests on this returning once the peer is gone.
pub fn wait_hung_up(sock: RawFd) {
    loop {
        let mut p = libc::pollfd {
            fd: sock,
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no timeout.
        let n = unsafe { libc::poll(&mut p, 1, -1) };
        if n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
            return;
        }
        if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Waits until `sock` is readable (or hung up), at most `timeout`. Returns false on timeout.
pub fn wait_readable(sock: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    // Round up: poll counts whole milliseconds and must not return before the deadline.
    let ms = timeout.map_or(-1, |t| {
        t.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
    });
    let mut p = libc::pollfd {
        fd: sock,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(n > 0);
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn mem_total_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_field(&text, "MemTotal:")
}

/// `MemAvailable` of `/proc/meminfo`, in bytes: what can still be allocated without
/// swapping.
pub fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_field(&text, "MemAvailable:")
}

fn meminfo_field(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn affinity() -> libc::cpu_set_t {
        // SAFETY: as in move_off_cpu.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a cpu_set_t of the size given.
        let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
        assert_eq!(rc, 0);
        set
    }

    fn cpus(set: &libc::cpu_set_t) -> Vec<usize> {
        // SAFETY: `set` is initialized and every index is below CPU_SETSIZE.
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, set) })
            .collect()
    }

    #[test]
    fn a_thread_moved_off_its_cpu_runs_elsewhere_and_keeps_its_affinity() {
        // On a thread of its own: the test changes the calling thread's affinity.
        std::thread::spawn(|| {
            let before = affinity();
            // SAFETY: no arguments.
            let here = unsafe { libc::sched_getcpu() } as usize;
            if cpus(&before).len() < 2 {
                assert!(!move_off_cpu(here), "one CPU allowed: nowhere to go");
                eprintln!("skipped the move: this thread may use one CPU only");
                return;
            }
            assert!(move_off_cpu(here));
            // SAFETY: no arguments.
            let now = unsafe { libc::sched_getcpu() } as usize;
            assert_ne!(now, here, "still on CPU {here}");
            assert_eq!(
                cpus(&affinity()),
                cpus(&before),
                "the affinity is given back"
            );
            let absent = libc::CPU_SETSIZE as usize;
            assert!(!move_off_cpu(absent), "a CPU beyond the set is refused");
        })
        .join()
        .unwrap();
    }
}
