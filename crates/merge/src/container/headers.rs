//! How the merger writes into a file that producers write in place: room claimed ahead
//! (`fallocate`, or on tmpfs `ftruncate` and the header pages only; to measure,
//! `ftruncate` and faults), headers stored through a shared mapping.
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
//! kept until the writer is dropped.
//!
//! # Why `fallocate`, not faults, allocates the room
//!
//! `fallocate` holds the inode lock while it allocates (about 4 ms per 16 MiB claim on
//! tmpfs here), and producers' payload `pwrite`s wait for it: allocation and copies
//! serialize on one lock. [`ClaimMode::Populate`] takes allocation off the lock: the file
//! is extended with `ftruncate` (a short hold) and the claimed rooms are faulted in with
//! `MADV_POPULATE_WRITE` through the merger's mapping (page faults take no inode lock).
//! Measured, it loses everywhere we tried, because a fault allocates one 4 KiB page at a
//! time: on this machine (`MACHINE_NOTES.md`, 2 vCPUs) a C test writing 1 GiB into
//! /dev/shm in 16 MiB claims spent 0.24 s in `fallocate` and 0.63 s in `ftruncate` +
//! `MADV_POPULATE_WRITE`, more than `fallocate` and every `pwrite` together (0.40 s), so
//! moving it to the other CPU cannot pay. `accio bench merge --write-mode direct`, old
//! binary (fallocate) and this one with each mode interleaved, 3 runs, median (min–max)
//! GB/s, load average about 4: /dev/shm 1 producer, populate 1.23 (1.18–1.26), fallocate
//! 2.34 (2.33–2.45); 16 producers 1.19 (1.17–1.21) and 2.23 (1.88–2.24); ext4 synced at
//! close, 1 producer 0.96 (0.92–1.28) and 2.02 (1.30–2.13), 16 producers 1.23
//! (1.01–1.25) and 1.75 (0.75–1.91) (on ext4 `fallocate` only marks extents and the
//! `pwrite`s allocate the page cache: the C test moved 0.33 s of 0.44–0.61 s out of
//! them, but the merger pipeline lost all of it and more); a tmpfs mounted `huge=always`
//! (2 runs), 1 producer 5.86 and 8.06, 16 producers 6.79 and 6.01. So `fallocate` is the
//! default on ext4 (and, unmeasured, xfs and btrfs), and `ACCIO_MERGE_CLAIM=populate`
//! selects the other way for measurements (a kernel without `MADV_POPULATE_WRITE`,
//! before 5.14, falls back to `fallocate` by itself).
//!
//! On tmpfs a third way wins a little: [`ClaimMode::HeaderPages`], where the merger
//! allocates only each room's header page and producers' `pwrite`s allocate their own
//! payload pages (the sum of the two is what the lock serializes, and allocating inside
//! the `pwrite` costs less than `fallocate` and then `pwrite`). Two interleaved runs of
//! 3, old binary (fallocate) against it, /dev/shm, median (min–max) GB/s, load average
//! 5–11: 1 producer 2.34 (2.31–2.41) and 2.43 (2.30–2.49), then 2.35 (2.08–2.39) and
//! 2.26 (1.37–2.51); 16 producers 2.15 (1.79–2.17) and 2.28 (2.28–2.45), then 2.18
//! (1.95–2.25) and 2.30 (2.28–2.33); 60 producers 2.02 (1.82–2.10) and 2.11
//! (1.26–2.18), then 2.07 (2.05–2.08) and 2.19 (2.13–2.21). On ext4 synced at close
//! it loses (1 producer 1.64 against 2.08, 16: 1.49 against 1.94, 60: 1.33 against
//! 1.61): there `fallocate` is cheap and the many 4 KiB ones cost. So tmpfs claims
//! header pages, everything else `fallocate`. A header page is allocated by a write fault
//! through the mapping (`MADV_POPULATE_WRITE` of its 4 KiB), not by `fallocate`: a fault
//! takes no inode lock, so the merger thread no longer waits up to a whole payload copy
//! for each reservation (at 1 producer it had spent 11% of a CPU spinning on the lock in
//! `fallocate`); a fault that fails asks `fallocate` for the real error.
//!
//! Populating keeps a full disk honest: a fault that finds no space fails the
//! `madvise` (`EFAULT` for its `SIGBUS`, or `ENOMEM`) without a signal, the file's size
//! goes back, and `fallocate` over the same room reports the real error (`ENOSPC`). When
//! `fallocate` then succeeds, populating is what fails here, and the writer claims with
//! `fallocate` from then on. The populated pages are unmapped again at once (they stay in
//! the file), so they do not count in the merger's resident memory.

use std::fs::File;
use std::os::fd::AsRawFd;

/// Bytes of address space per mapping window (1 GiB: a 100 GiB file needs 100 mappings).
const WINDOW: u64 = 1 << 30;
/// Rooms claimed at a time (so one inode lock per this many reservations).
const AHEAD_ROOMS: u64 = 8;
/// Rooms the file's size runs ahead of the reservations when only header pages are
/// allocated (`HeaderPages`): a larger size costs nothing there (the room stays a hole
/// until written), and each extension is an inode lock that waits behind a payload copy.
const AHEAD_SPARSE_ROOMS: u64 = 64;

/// How the merger claims room ahead of its reservations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimMode {
    /// `ftruncate` past the room (a short inode-lock hold), then `MADV_POPULATE_WRITE`
    /// through the merger's mapping: the pages are allocated and zeroed by the merger's
    /// page faults, which take no inode lock, so producers' payload writes (which hold
    /// it for a whole 2 MiB copy) go on meanwhile and copy into pages that exist.
    Populate,
    /// One `fallocate` per claim: allocates under the inode lock, so the producers'
    /// writes wait while it runs.
    Fallocate,
    /// `ftruncate` past the room, and only the room's header page allocated, by one
    /// write fault (no inode lock; `fallocate` where faults fail): producers' `pwrite`s
    /// allocate their payload pages themselves, as one stream writing a fresh file does,
    /// instead of
    /// `fallocate` allocating them first and the `pwrite`s copying after (on tmpfs here:
    /// 0.24 + 0.16 s per GiB, both on the inode lock, against 0.33 for `pwrite`s
    /// allocating). A full disk fails the header page's claim (the merger's error)
    /// or a producer's `pwrite` (that producer's error); a header store never faults for
    /// want of space: a header written elsewhere than a room's start (the hole after a
    /// short block) gets its page allocated first.
    HeaderPages,
}

impl ClaimMode {
    /// The mode a new writer of `file` starts with: `ACCIO_MERGE_CLAIM=populate`,
    /// `fallocate` or `header-pages` when set (measurements); else `HeaderPages` on tmpfs
    /// and `Fallocate` elsewhere (the module docs have the measurements behind the
    /// choice: tmpfs and ext4; xfs and btrfs keep `fallocate`, unmeasured).
    pub fn for_file(file: &File) -> ClaimMode {
        match std::env::var("ACCIO_MERGE_CLAIM").as_deref() {
            Ok("populate") => return ClaimMode::Populate,
            Ok("header-pages") => return ClaimMode::HeaderPages,
            Ok("fallocate") => return ClaimMode::Fallocate,
            _ => {}
        }
        if crate::fs_type::is_tmpfs(file.as_raw_fd()) {
            ClaimMode::HeaderPages
        } else {
            ClaimMode::Fallocate
        }
    }

    /// The name used in `ACCIO_MERGE_CLAIM` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ClaimMode::Populate => "populate",
            ClaimMode::Fallocate => "fallocate",
            ClaimMode::HeaderPages => "header-pages",
        }
    }
}

/// The merger's mapping of the header pages and how far the file is claimed.
#[derive(Debug)]
pub(super) struct HeaderMap {
    /// Bytes of the file claimed (allocated, inside `i_size`).
    claimed: u64,
    /// How room is claimed; turned to `Fallocate` for good when populating fails where
    /// `fallocate` then succeeds (an old kernel, or a file system whose faults fail for
    /// other reasons than space).
    mode: ClaimMode,
    /// Mapped windows: index `i` maps `i * WINDOW ..`.
    windows: Vec<Option<Window>>,
    /// `HeaderPages`: room starts whose header page is allocated and not yet written.
    header_pages: std::collections::HashSet<u64>,
    /// `HeaderPages`: header pages are allocated by a fault, not by `fallocate`, until a
    /// fault fails where `fallocate` then succeeds.
    fault_pages: bool,
    /// Tests: `MADV_POPULATE_WRITE` answers `EINVAL`, as before Linux 5.14.
    #[cfg(test)]
    pub(super) no_populate: bool,
}

#[derive(Debug)]
struct Window {
    ptr: *mut u8,
}

// SAFETY: a window is plain memory owned by the `HeaderMap` that holds it; the writer
// touches it only under its lock.
unsafe impl Send for HeaderMap {}

impl HeaderMap {
    /// A map of nothing yet, claiming room with `mode`.
    pub(super) fn new(mode: ClaimMode) -> HeaderMap {
        HeaderMap {
            claimed: 0,
            mode,
            windows: Vec::new(),
            header_pages: Default::default(),
            fault_pages: true,
            #[cfg(test)]
            no_populate: false,
        }
    }

    /// How this map claims room now.
    pub(super) fn mode(&self) -> ClaimMode {
        self.mode
    }

    /// Claims room with `mode` from now on.
    pub(super) fn set_mode(&mut self, mode: ClaimMode) {
        self.mode = mode;
    }

    /// Makes sure the file is claimed (allocated, inside its size) up to `end`, the end of
    /// a room of `room` bytes; when it is not, claims `AHEAD_ROOMS` rooms past `end` with
    /// it, or, if the file system has no room for that, exactly up to `end`.
    pub(super) fn claim(&mut self, file: &File, end: u64, room: u64) -> std::io::Result<()> {
        if self.mode == ClaimMode::HeaderPages {
            let ahead = end.saturating_add(room.saturating_mul(AHEAD_SPARSE_ROOMS));
            if end > self.claimed {
                if file.metadata()?.len() < ahead {
                    file.set_len(ahead)?;
                }
                self.claimed = ahead;
            }
            let page = (end - room) & !4095;
            self.claim_page(file, page)?;
            self.header_pages.insert(page);
            return Ok(());
        }
        if end <= self.claimed {
            return Ok(());
        }
        let ahead = end.saturating_add(room.saturating_mul(AHEAD_ROOMS));
        if self.mode == ClaimMode::Populate {
            if self.populate(file, end - room, ahead).is_ok() {
                self.claimed = ahead;
                return Ok(());
            }
            // A full file system fails the faults (`EFAULT` for their `SIGBUS`, or
            // `ENOMEM`), which say nothing of why: `fallocate` gets the real error. If it
            // succeeds, populating is what fails here (`EINVAL` before Linux 5.14): stop
            // using it.
            if self.claim_fallocate(file, end, ahead)? {
                self.mode = ClaimMode::Fallocate;
            }
            return Ok(());
        }
        self.claim_fallocate(file, end, ahead).map(|_| ())
    }

    /// [`HeaderMap::claim`] with `fallocate`; true when it claimed up to `ahead`, false
    /// when only up to `end` (no space for more).
    fn claim_fallocate(&mut self, file: &File, end: u64, ahead: u64) -> std::io::Result<bool> {
        match fallocate(file, self.claimed, ahead - self.claimed) {
            Ok(()) => {
                self.claimed = ahead;
                Ok(true)
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                fallocate(file, self.claimed, end - self.claimed)?;
                self.claimed = end;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Allocates the page at `page` (inside the file's size) for a header: one write fault
    /// through the mapping, which takes no inode lock, so the merger does not wait behind
    /// the producers' payload `pwrite`s, which hold it for a whole copy (a `fallocate`
    /// waited up to one 2 MiB copy per reservation, and every grant and acknowledgement
    /// with it). A fault that fails (no space, or no `MADV_POPULATE_WRITE` before Linux
    /// 5.14) is asked again of `fallocate`, which gives the real error or, succeeding,
    /// allocates every header page from then on.
    fn claim_page(&mut self, file: &File, page: u64) -> std::io::Result<()> {
        if self.fault_pages && self.populate_range(file, page, page + 4096).is_ok() {
            return Ok(());
        }
        // `fallocate` allocates whole pages, of whatever size, around this range.
        fallocate(file, page, 4096)?;
        self.fault_pages = false;
        Ok(())
    }

    /// Extends the file to `ahead` (never shrinks it) and faults its pages from the claimed
    /// end to `ahead` in through the mapping. On failure the file's size goes back to
    /// what it was, but not below `start` (the room being claimed): every byte below
    /// `start` may hold data (an `append` of another thread in flight ends there at
    /// most), nothing between `start` and `ahead` does.
    fn populate(&mut self, file: &File, start: u64, ahead: u64) -> std::io::Result<()> {
        let before = file.metadata()?.len();
        if before < ahead {
            file.set_len(ahead)?;
        }
        let r = self.populate_range(file, self.claimed, ahead);
        if r.is_err() && before < ahead {
            let _ = file.set_len(before.max(start));
        }
        r
    }

    /// `MADV_POPULATE_WRITE` over `from..to` of the file (inside its size), window by
    /// window.
    fn populate_range(&mut self, file: &File, from: u64, to: u64) -> std::io::Result<()> {
        // SAFETY: sysconf only reads a constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
        #[cfg(test)]
        if self.no_populate {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        self.each_window(file, from - from % page, to, |p, len| loop {
            // MADV_POPULATE_WRITE: Linux 5.14; older kernels answer `EINVAL`.
            // SAFETY: `p..p + len` lies inside one window (mapped shared and writable) and
            // inside the file's size: populating only faults its pages in for writing, as
            // stores would, and changes no byte.
            if unsafe { libc::madvise(p.cast(), len, libc::MADV_POPULATE_WRITE) } == 0 {
                // The pages stay in the file; unmapping them here keeps them out of the
                // merger's resident set (1 GiB of a 1 GiB run otherwise, over its budget)
                // and costs little beside the faults (a C test: 0.66 s with it for 1 GiB
                // on tmpfs, 0.63 s without).
                // SAFETY: as above.
                unsafe { drop_pages(p, len) };
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        })
    }

    /// Calls `f(address, len)` for the part of `from..to` of the file (`from` on a page
    /// boundary) in each mapping window, mapping the windows on first use.
    fn each_window(
        &mut self,
        file: &File,
        from: u64,
        to: u64,
        mut f: impl FnMut(*mut u8, usize) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let mut at = from;
        while at < to {
            let w = at / WINDOW;
            let stop = to.min((w + 1) * WINDOW);
            let base = self.window(file, w as usize)?;
            // SAFETY: `at % WINDOW < WINDOW`, inside the window's mapping.
            let p = unsafe { base.add((at % WINDOW) as usize) };
            f(p, (stop - at) as usize)?;
            at = stop;
        }
        Ok(())
    }

    /// The address of window `w`, mapped on first use.
    fn window(&mut self, file: &File, w: usize) -> std::io::Result<*mut u8> {
        if self.windows.len() <= w {
            self.windows.resize_with(w + 1, || None);
        }
        if self.windows[w].is_none() {
            // SAFETY: maps WINDOW bytes of our own file at a WINDOW-aligned offset (a
            // multiple of the page size), shared and writable; the kernel picks the
            // address. Pages past the end of the file are never touched (see `store`
            // and `populate_range`).
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
            // A fault here is for one header page: without this the kernel reads around
            // it, and on ext4 that filled the producers' payload pages of the rooms ahead
            // (unwritten extents) with zeros on the merger's CPU.
            // SAFETY: advice on the mapping just made; failure changes nothing.
            unsafe { libc::madvise(p, WINDOW as usize, libc::MADV_RANDOM) };
            self.windows[w] = Some(Window { ptr: p.cast() });
        }
        Ok(self.windows[w].as_ref().expect("mapped above").ptr)
    }

    /// CRC-32C of `len` bytes of `file` at `offset` (inside its size), read through the
    /// mapping: mapped for reading in one call per window (`MADV_POPULATE_READ`, Linux
    /// 5.14; page by page before), checksummed, and unmapped again (the pages stay in the
    /// file; mapped, they would count in the merger's resident memory).
    pub(super) fn checksum(&mut self, file: &File, offset: u64, len: u64) -> std::io::Result<u32> {
        debug_assert_eq!(
            offset % 4096,
            0,
            "payloads written in place start on a page"
        );
        let mut crc = crate::checksum::Crc32c::new();
        self.each_window(file, offset, offset + len, |p, len| {
            // SAFETY: `p..p + len` lies inside one window and inside the file's size (the
            // room was claimed), from a page boundary; the advice only maps the pages, and
            // failing it only means the reads below fault them in one by one.
            unsafe { libc::madvise(p.cast(), len, libc::MADV_POPULATE_READ) };
            // SAFETY: the bytes are mapped and inside the file, so reading cannot fault
            // for want of a page; the producer that wrote them committed the block and
            // writes there no more (the slice is read once, by the checksum).
            crc.update(unsafe { std::slice::from_raw_parts(p, len) });
            // SAFETY: as above.
            unsafe { drop_pages(p, len) };
            Ok(())
        })?;
        Ok(crc.finish())
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
        if self.mode == ClaimMode::HeaderPages && !self.header_pages.remove(&(offset & !4095)) {
            self.claim_page(file, offset & !4095)?;
        }
        let base = self.window(file, (offset / WINDOW) as usize)?;
        // SAFETY: `offset..end` lies inside this window and inside the claimed part of the
        // file (asserted above): its page exists and has its space, so the store cannot
        // fault for lack of either. Nothing else in this process maps or holds a
        // reference into these bytes; producers write only payload pages, never a header
        // page, and readers of the file see the bytes as a concurrent `pwrite` would
        // leave them (checked by the header's own checksum).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                base.add((offset % WINDOW) as usize),
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

/// Drops this process's page-table entries for `len` bytes at `p` (a page boundary) of a
/// shared file mapping; the file keeps every byte, and the pages leave the resident set.
///
/// # Safety
/// `p..p + len` must lie inside a mapping this process made, with no reference into it
/// alive (the next access faults the page back in).
unsafe fn drop_pages(p: *mut u8, len: usize) {
    // SAFETY: forwarded caller contract; failure leaves the pages mapped, nothing else.
    unsafe { libc::madvise(p.cast(), len, libc::MADV_DONTNEED) };
}

/// `fallocate(fd, 0, offset, len)`: allocates and extends the file's size.
fn fallocate(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    fallocate_mode(file, 0, offset, len)
}

/// `fallocate(fd, mode, offset, len)`, tried again when a signal interrupts it: allocates
/// (mode 0), or with `FALLOC_FL_PUNCH_HOLE` or `FALLOC_FL_COLLAPSE_RANGE` frees or cuts
/// out the range.
pub(super) fn fallocate_mode(file: &File, mode: i32, offset: u64, len: u64) -> std::io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let (off, len) = match (libc::off_t::try_from(offset), libc::off_t::try_from(len)) {
        (Ok(o), Ok(l)) => (o, l),
        _ => return Err(std::io::Error::other("file range beyond off_t")),
    };
    loop {
        // SAFETY: a plain system call on our own descriptor, on a range it names.
        let r = unsafe { libc::fallocate(file.as_raw_fd(), mode, off, len) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
