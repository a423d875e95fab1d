//! One writer per container file: the lock a writer holds for the file's whole life.
//!
//! A [`super::ContainerWriter`] (and [`super::recover`]) takes an exclusive `flock` on its
//! open file description before it truncates or writes a byte, and keeps it until the file
//! is closed (the descriptor dropped, or the process gone: the kernel releases it then, so
//! a crashed merger leaves no stale lock). A second writer or a `recover` of a file being
//! written is refused with the holder's pid instead of destroying the first writer's
//! blocks (two mergers on one path used to both report success while the file held only
//! the second's blocks; on ext4 the second's truncation killed the first with `SIGBUS`).
//!
//! `flock` rather than an OFD (`F_OFD_SETLK`) lock: both belong to the open file
//! description, so producers that open the same file to write payloads in place, and
//! readers following the file, are not locked out (they take no lock); but only `flock`
//! names its holder's pid in `/proc/locks` (an OFD lock shows -1 there).
//!
//! Readers ([`super::ContainerReader`]) ask whether a writer holds the lock with a
//! shared `flock` tried and dropped at once; a writer that meets such a momentary shared
//! lock while it starts tries again for a short while ([`RETRY`]) before it gives up.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{MergeError, Result};

/// How long a writer keeps trying a lock held by someone else: a reader's probe holds it
/// for microseconds, a writer for the file's whole life.
pub(crate) const RETRY: Duration = Duration::from_millis(200);

/// The process that holds a container file's write lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockHolder {
    /// Its process id, as `/proc/locks` shows it to this process; `None` when it could not
    /// be found there (no `/proc`, another pid namespace, a file system whose locks are
    /// listed under another device).
    pub pid: Option<u32>,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pid {
            Some(pid) => write!(f, "pid {pid}"),
            None => f.write_str("another process"),
        }
    }
}

fn flock(file: &File, op: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: a plain system call on a descriptor this process owns; it touches no
        // memory.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn would_block(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EWOULDBLOCK)
}

/// Takes the exclusive lock of `file` (opened from `path`) for as long as `file`'s open
/// file description lives, or fails naming the process that holds it. `action` says what
/// was refused ("overwrite", "recover").
pub(crate) fn lock_exclusive(file: &File, path: &Path, action: &'static str) -> Result<()> {
    let deadline = Instant::now() + RETRY;
    loop {
        match flock(file, libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => return Ok(()),
            Err(e) if would_block(&e) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) if would_block(&e) => {
                return Err(MergeError::Locked {
                    path: path.to_path_buf(),
                    holder: holder(file),
                    action,
                });
            }
            Err(e) => return Err(MergeError::file("locking", path, e)),
        }
    }
}

/// The writer holding `file`'s lock, if one does: tries a shared lock and drops it at
/// once. `None` also when the file system refuses locks (nothing can hold one there).
pub(crate) fn writer_of(file: &File) -> Option<LockHolder> {
    match flock(file, libc::LOCK_SH | libc::LOCK_NB) {
        Ok(()) => {
            let _ = flock(file, libc::LOCK_UN);
            None
        }
        Err(e) if would_block(&e) => Some(holder(file)),
        Err(_) => None,
    }
}

/// The holder of the exclusive `flock` on `file`'s inode, from `/proc/locks`.
fn holder(file: &File) -> LockHolder {
    let pid = file.metadata().ok().and_then(|m| {
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        flock_writer(&locks, libc::major(m.dev()), libc::minor(m.dev()), m.ino())
    });
    LockHolder { pid }
}

/// The pid of the exclusive `FLOCK` on inode `ino` of device `major:minor` in the text
/// of `/proc/locks`, whose lines read `1: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF`
/// (device numbers in hex; waiters' lines carry a `->` after the number).
fn flock_writer(locks: &str, major: u32, minor: u32, ino: u64) -> Option<u32> {
    locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().filter(|w| *w != "->").collect();
        if f.len() < 6 || f[1] != "FLOCK" || f[3] != "WRITE" || line.contains("->") {
            return None;
        }
        let mut id = f[5].split(':');
        let (maj, min, i) = (id.next()?, id.next()?, id.next()?);
        let same = u32::from_str_radix(maj, 16).ok()? == major
            && u32::from_str_radix(min, 16).ok()? == minor
            && i.parse::<u64>().ok()? == ino;
        let pid: i64 = f[4].parse().ok()?;
        (same && pid > 0).then_some(pid as u32)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_lines_name_the_exclusive_flock_holder() {
        let text = "1: POSIX  ADVISORY  WRITE 111 00:2d:77 0 EOF\n\
                    2: FLOCK  ADVISORY  READ 222 00:2d:77 0 EOF\n\
                    3: -> FLOCK  ADVISORY  WRITE 333 00:2d:77 0 EOF\n\
                    4: FLOCK  ADVISORY  WRITE 444 fd:01:77 0 EOF\n\
                    5: FLOCK  ADVISORY  WRITE 555 00:2d:77 0 EOF\n";
        assert_eq!(flock_writer(text, 0, 0x2d, 77), Some(555));
        assert_eq!(flock_writer(text, 0xfd, 1, 77), Some(444));
        assert_eq!(flock_writer(text, 0, 0x2d, 78), None);
        assert_eq!(flock_writer("garbage\n1: FLOCK\n", 0, 0x2d, 77), None);
    }
}
