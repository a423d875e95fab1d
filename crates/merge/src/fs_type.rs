//! The type of file system a file lives on (`fstatfs`), which decides how the merger and
//! its producers write it in place.

use std::os::fd::RawFd;

/// `statfs` magic of tmpfs.
pub(crate) const TMPFS: u64 = 0x0102_1994;

/// The `statfs` magic of the file system holding the open file `fd`.
pub(crate) fn magic(fd: RawFd) -> std::io::Result<u64> {
    // SAFETY: statfs writes into the zeroed struct we pass.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer; a bad `fd` is an error, not undefined behaviour.
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // the field's type differs between targets
    Ok(st.f_type as u64)
}

/// Whether the open file `fd` lives on tmpfs (`false` where that cannot be told).
pub(crate) fn is_tmpfs(fd: RawFd) -> bool {
    magic(fd).is_ok_and(|m| m == TMPFS)
}
