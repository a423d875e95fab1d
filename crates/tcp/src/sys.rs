//! The socket system calls the backend needs beyond `std::net`, in one place: gathered
//! sends with `MSG_NOSIGNAL`, scatter reads, the send-buffer room check of `try_send`,
//! `shutdown` and `poll`.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::frame::{RawBuf, Source, HEADER_LEN};

/// `SO_MEMINFO` (asm-generic/socket.h; the same on every Linux architecture accio runs on).
const SO_MEMINFO: libc::c_int = 55;

/// The socket as the frame parser reads it, by whoever owns the read half at the moment
/// (the reader thread, or a caller waiting for a frame).
///
/// With `blocking` off a read that finds nothing returns `WouldBlock` (`MSG_DONTWAIT`),
/// so an owner can look for a frame and leave between frames; with it on (inside a
/// frame, whose rest must be read by the same owner) it waits for bytes.
pub(crate) struct FdSource {
    pub fd: RawFd,
    pub blocking: bool,
    /// How long a waiting read spins (on [`readable_now`]) before it sleeps in the kernel:
    /// the rest of a frame is usually microseconds behind its start.
    pub spin: Duration,
}

impl FdSource {
    /// One `recvmsg`; `wait` false adds `MSG_DONTWAIT`.
    ///
    /// # Safety
    /// As [`Source::read_raw`].
    unsafe fn recv(&self, bufs: &[RawBuf], wait: bool) -> io::Result<usize> {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 2];
        let n = bufs.len().min(iov.len());
        for (v, b) in iov.iter_mut().zip(bufs) {
            v.iov_base = b.ptr.cast();
            v.iov_len = b.len;
        }
        // SAFETY: an all-zero msghdr is valid (no address, no control data).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = n as _;
        let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
        // SAFETY: `msg` points at `n` <= 2 initialized iovecs, each describing a buffer
        // the caller guarantees writable.
        let r = unsafe { libc::recvmsg(self.fd, &mut msg, flags) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }
}

impl Source for FdSource {
    unsafe fn read_raw(&mut self, bufs: &[RawBuf]) -> io::Result<usize> {
        // SAFETY: forwarded caller contract.
        let first = unsafe { self.recv(bufs, false) };
        match first {
            Err(e) if self.blocking && e.kind() == io::ErrorKind::WouldBlock => {}
            r => return r,
        }
        let mut spin = accio_core::Spin::new(self.spin);
        while !readable_now(self.fd) && spin.go_on() {
            std::hint::spin_loop();
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.recv(bufs, true) }
    }
}

/// Makes an `eventfd` (non-blocking, close-on-exec): how a caller asks the reader thread,
/// asleep in `poll`, to let go of the socket.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked before use.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd's counter (wakes its poller); errors (the counter is full)
/// leave it readable, which is all a kick needs.
pub(crate) fn kick(fd: RawFd) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from a live u64.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Empties an eventfd's counter (non-blocking).
pub(crate) fn drain(fd: RawFd) {
    let mut v = 0u64;
    // SAFETY: reads at most 8 bytes into a live u64.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// True if `fd` has bytes to read (or hung up or failed), without waiting. Unlike a
/// non-blocking read, `poll` does not take the socket's lock: a reader spinning on reads
/// would keep making the kernel queue the peer's arriving segments on the socket's backlog
/// instead of delivering them.
pub(crate) fn readable_now(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r != 0
}

/// Waits until `fd` is readable (or hung up), or until `wake` (if any) is, at most
/// `timeout` (`None`: no limit). Returns true if `wake` became readable. Interruptions
/// and errors return early: callers look again at what they wait for.
pub(crate) fn poll_readable(fd: RawFd, wake: Option<RawFd>, timeout: Option<Duration>) -> bool {
    let mut ps = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    let ms = match timeout {
        // Round up, so that a sub-millisecond rest does not turn into a busy loop.
        Some(t) => t.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int,
        None => -1,
    };
    let n = if wake.is_some() { 2 } else { 1 };
    // SAFETY: `ps` holds at least `n` valid pollfds.
    let r = unsafe { libc::poll(ps.as_mut_ptr(), n as libc::nfds_t, ms) };
    r > 0 && ps[1].revents != 0
}

/// Drops the first `n` sent bytes from `iov`, returning the index of the first iovec
/// with bytes left.
fn advance(iov: &mut [libc::iovec], mut n: usize, mut first: usize) -> usize {
    while first < iov.len() && n > 0 {
        let v = &mut iov[first];
        if n >= v.iov_len {
            n -= v.iov_len;
            v.iov_len = 0;
            first += 1;
        } else {
            // SAFETY: n < iov_len, so the pointer stays inside the buffer.
            v.iov_base = unsafe { v.iov_base.cast::<u8>().add(n) }.cast();
            v.iov_len -= n;
            n = 0;
        }
    }
    while first < iov.len() && iov[first].iov_len == 0 {
        first += 1;
    }
    first
}

fn sendmsg(fd: RawFd, iov: &mut [libc::iovec], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is valid (no address, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len() as _;
    loop {
        // SAFETY: `msg` points at `iov`, whose entries describe readable buffers (the
        // callers' contract), for the duration of the call.
        let r = unsafe { libc::sendmsg(fd, &msg, flags | libc::MSG_NOSIGNAL) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn frame_iov(header: &[u8; HEADER_LEN], payload: *const u8, len: usize) -> [libc::iovec; 2] {
    [
        libc::iovec {
            iov_base: header.as_ptr() as *mut libc::c_void,
            iov_len: HEADER_LEN,
        },
        libc::iovec {
            iov_base: payload as *mut libc::c_void,
            iov_len: len,
        },
    ]
}

fn send_rest(fd: RawFd, iov: &mut [libc::iovec], mut first: usize) -> io::Result<()> {
    while first < iov.len() {
        let n = sendmsg(fd, &mut iov[first..], 0)?;
        first = advance(iov, n, first);
    }
    Ok(())
}

/// Sends a header and its payload as one gathered write, blocking until all is sent.
///
/// # Safety
/// `payload` must be readable for `len` bytes until the call returns.
pub(crate) unsafe fn send_frame(
    fd: RawFd,
    header: &[u8; HEADER_LEN],
    payload: *const u8,
    len: usize,
) -> io::Result<()> {
    let mut iov = frame_iov(header, payload, len);
    let used = if len == 0 { 1 } else { 2 };
    send_rest(fd, &mut iov[..used], 0)
}

/// Sends all of `bytes` at once without waiting (`MSG_DONTWAIT | MSG_NOSIGNAL`); false if
/// the socket would not take them whole or failed.
pub(crate) fn send_now(fd: RawFd, bytes: &[u8]) -> bool {
    // SAFETY: `bytes` is valid for reads of its length for the duration of the call.
    let n = unsafe {
        libc::send(
            fd,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    n == bytes.len() as isize
}

/// Sends all of `bytes` (blocking, subject to `SO_SNDTIMEO`), with `MSG_NOSIGNAL`.
pub(crate) fn send_all(fd: RawFd, bytes: &[u8]) -> io::Result<()> {
    let mut iov = [libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    }];
    send_rest(fd, &mut iov, 0)
}

/// Bytes the kernel holds for the send side of `fd` (`sk_wmem_queued`, overhead
/// included) and its limit (`sk_sndbuf`), from `SO_MEMINFO`.
fn send_room(fd: RawFd) -> Option<(usize, usize)> {
    let mut mem = [0u32; 16];
    let mut len = std::mem::size_of_val(&mem) as libc::socklen_t;
    // SAFETY: `mem` is writable for `len` bytes and `len` is passed by pointer.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_MEMINFO,
            mem.as_mut_ptr().cast(),
            &mut len,
        )
    };
    let need = (libc::SK_MEMINFO_WMEM_QUEUED as usize + 1) * 4;
    if r != 0 || (len as usize) < need {
        return None;
    }
    Some((
        mem[libc::SK_MEMINFO_WMEM_QUEUED as usize] as usize,
        mem[libc::SK_MEMINFO_SNDBUF as usize] as usize,
    ))
}

/// Outcome of [`try_send_frame`].
pub(crate) enum TrySend {
    /// The whole frame was handed to the kernel.
    Sent,
    /// Nothing was sent.
    WouldBlock,
}

/// Sends a frame only if the socket's send buffer has room for all of it.
///
/// Linux accepts data for a TCP socket while `sk_wmem_queued < sk_sndbuf`, checked each
/// time it starts a new buffer of at most 64 KiB, and charges per-buffer overhead on top
/// of the data. So if the queue plus the frame plus a generous overhead allowance fits
/// under `sk_sndbuf`, a non-blocking send takes the frame whole. Otherwise nothing is
/// sent. Should the kernel still take only part of it (global TCP memory pressure), the
/// rest is sent blocking, since half a frame cannot be taken back.
///
/// # Safety
/// `payload` must be readable for `len` bytes until the call returns.
pub(crate) unsafe fn try_send_frame(
    fd: RawFd,
    header: &[u8; HEADER_LEN],
    payload: *const u8,
    len: usize,
) -> io::Result<TrySend> {
    let total = HEADER_LEN + len;
    if let Some((queued, limit)) = send_room(fd) {
        // Overhead: one skb head (~1 KiB) per 64 KiB buffer started, at least two.
        let slack = 4096 + total / 16;
        if queued + total + slack > limit {
            return Ok(TrySend::WouldBlock);
        }
    }
    let mut iov = frame_iov(header, payload, len);
    let used = if len == 0 { 1 } else { 2 };
    let iov = &mut iov[..used];
    match sendmsg(fd, iov, libc::MSG_DONTWAIT) {
        Ok(n) if n == total => Ok(TrySend::Sent),
        Ok(n) => {
            let first = advance(iov, n, 0);
            send_rest(fd, iov, first)?;
            Ok(TrySend::Sent)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(TrySend::WouldBlock),
        Err(e) => Err(e),
    }
}

/// `shutdown(2)`; errors (the socket is already disconnected) are of no interest.
pub(crate) fn shutdown(fd: RawFd, how: libc::c_int) {
    // SAFETY: plain system call on a descriptor the caller owns.
    unsafe { libc::shutdown(fd, how) };
}

/// Waits until one of `fds` is readable (or has hung up), at most `timeout`; `Ok(false)`
/// if none became so.
pub(crate) fn poll_any_readable(fds: &[RawFd], timeout: Duration) -> io::Result<bool> {
    let mut ps: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // Round up, so that a sub-millisecond rest does not turn into a busy loop.
    let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `ps` holds `ps.len()` valid pollfds.
    let r = unsafe { libc::poll(ps.as_mut_ptr(), ps.len() as libc::nfds_t, ms) };
    match r {
        r if r > 0 => Ok(true),
        0 => Ok(false),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(true)
            } else {
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_skips_whole_and_partial_buffers() {
        let a = [1u8; 10];
        let b = [2u8; 5];
        let mut iov = [
            libc::iovec {
                iov_base: a.as_ptr() as *mut _,
                iov_len: 10,
            },
            libc::iovec {
                iov_base: b.as_ptr() as *mut _,
                iov_len: 5,
            },
        ];
        assert_eq!(advance(&mut iov, 3, 0), 0);
        assert_eq!(iov[0].iov_len, 7);
        assert_eq!(advance(&mut iov, 8, 0), 1);
        assert_eq!(iov[1].iov_len, 4);
        assert_eq!(advance(&mut iov, 4, 1), 2);
    }
}
