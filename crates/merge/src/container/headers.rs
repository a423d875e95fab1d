//! How the merger writes into a file that producers write in place: room claimed ahead
//! with `fallocate`, headers stored through a shared mapping.
//!
//! Writes into one file serialize on its inode lock (`i_rwsem`, taken by `pwrite` on tmpfs
//! and ext4 for the whole write). With producers writing 2 MiB payloads in place, each of
//! the merger's 64-byte header `pwrite`s (a reservation, a commit record) queued behind
//! whatever payload writes were in progress, and the merger thread, which grants room and
//! acknowledges commits, sat blocked in it: `perf trace` of 16 producer processes showed
//! their `pwrite`s averaging 8 ms for 2 MiB (queued) and their waits for grants 20 ms. A
//! store into a shared mapping of a page the file already has takes no inode lock (a page
//! fault takes the mapping's invalidate lock shared, and only the first time).
//!
//! So the merger claims the file ahead of its reservations, `AHEAD_ROOMS` rooms at a time
//! (one `fallocate`, one inode lock per that many blocks): every header page lies inside
//! the file and has its page or block when the merger stores into it, so a store never
//! faults for want of space (a full disk shows as `fallocate`'s `ENOSPC`, an error, not a
//! `SIGBUS`), and producers never extend the file. Claimed room past the last block is
//! cut off at close ([`super::ContainerWriter::finish`] ends the file with its trailer);
//! after a crash it reads as zeros past the last header, which a scan reports as damage at
//! the end and `recover` cuts off.
//!
//! The mapping is made in windows of `WINDOW` bytes of address space, each on first use and
//! kept until the writer is dropped; only the header pages are ever touched.

use std::fs::File;
use std::os::fd::AsRawFd;

/// Bytes of address space per mapping window (1 GiB: a 100 GiB file needs 100 mappings).
const WINDOW: u64 = 1 << 30;
/// Rooms claimed per `fallocate` (so one inode lock per this many reservations).
const AHEAD_ROOMS: u64 = 8;

/// The merger's mapping of the header pages and how far the file is claimed.
#[derive(Debug, Default)]
pub(super) struct HeaderMap {
    /// Bytes of the file claimed with `fallocate` (and so inside `i_size`).
    claimed: u64,
    /// Mapped windows: index `i` maps `i * WINDOW ..`.
    windows: Vec<Option<Window>>,
}

#[derive(Debug)]
struct Window {
    ptr: *mut u8,
}

// SAFETY: a window is plain memory owned by the `HeaderMap` that holds it; the writer
// touches it only under its lock.
unsafe impl Send for HeaderMap {}

impl HeaderMap {
    /// Makes sure the file is claimed (allocated, inside its size) up to `end`; when it
    /// is not, claims `AHEAD_ROOMS` rooms of `room` bytes past `end` with it, or, if the
    /// file system has no room for that, exactly up to `end`.
    pub(super) fn claim(&mut self, file: &File, end: u64, room: u64) -> std::io::Result<()> {
        if end <= self.claimed {
            return Ok(());
        }
        let ahead = end.saturating_add(room.saturating_mul(AHEAD_ROOMS));
        match fallocate(file, self.claimed, ahead - self.claimed) {
            Ok(()) => self.claimed = ahead,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                fallocate(file, self.claimed, end - self.claimed)?;
                self.claimed = end;
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Stores `bytes` at `offset` of `file` through the mapping. The range must lie in one
    /// page, inside what [`HeaderMap::claim`] claimed.
    pub(super) fn store(&mut self, file: &File, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
        let end = offset + bytes.len() as u64;
        assert!(
            end <= self.claimed && offset / 4096 == (end - 1) / 4096,
            "header store at {offset:#x}+{} outside the claimed file ({:#x}) or across pages",
            bytes.len(),
            self.claimed
        );
        let w = (offset / WINDOW) as usize;
        if self.windows.len() <= w {
            self.windows.resize_with(w + 1, || None);
        }
        if self.windows[w].is_none() {
            // SAFETY: maps WINDOW bytes of our own file at a WINDOW-aligned offset (a
            // multiple of the page size), shared and writable; the kernel picks the
            // address. Pages past the end of the file are never touched (see `store`).
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    WINDOW as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    file.as_raw_fd(),
                    (w as u64 * WINDOW) as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            self.windows[w] = Some(Window { ptr: p.cast() });
        }
        let win = self.windows[w].as_ref().expect("mapped above");
        // SAFETY: `offset..end` lies inside this window and inside the claimed part of the
        // file (asserted above): its page exists and has its space, so the store cannot
        // fault for lack of either. Nothing else in this process maps or holds a
        // reference into these bytes; producers write only payload pages, never a header
        // page, and readers of the file see the bytes as a concurrent `pwrite` would
        // leave them (checked by the header's own checksum).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                win.ptr.add((offset % WINDOW) as usize),
                bytes.len(),
            );
        }
        Ok(())
    }
}

impl Drop for HeaderMap {
    fn drop(&mut self) {
        for w in self.windows.iter().flatten() {
            // SAFETY: unmaps exactly a window `store` mapped; no pointer into it outlives
            // this value.
            unsafe { libc::munmap(w.ptr.cast(), WINDOW as usize) };
        }
    }
}

/// `fallocate(fd, 0, offset, len)`: allocates and extends the file's size.
fn fallocate(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let (off, len) = match (libc::off_t::try_from(offset), libc::off_t::try_from(len)) {
        (Ok(o), Ok(l)) => (o, l),
        _ => return Err(std::io::Error::other("file range beyond off_t")),
    };
    loop {
        // SAFETY: a plain system call on our own descriptor; it only allocates.
        let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, off, len) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
