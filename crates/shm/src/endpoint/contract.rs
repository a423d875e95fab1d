//! The [`Endpoint`] contract for [`ShmEndpoint`]: one trait block (messages, windows, RMA,
//! fences) over the parts in the sibling modules.

use std::fs::File;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use accio_core::{
    copy_bytes, Access, Addr, Capabilities, DeviceMemory, DeviceWindow, Endpoint, Error, ErrorKind,
    Mark, MemView, Progress, Region, RemoteMap, Result, RmaFlags, Window, PAGE,
};

use super::device::Rma;
use super::windows::{LocalWin, CTL_FILE, CTL_RECORD, CTL_WINDOW};
use super::ShmEndpoint;
use crate::link::TABLE_SLOTS;
use crate::sys;

impl ShmEndpoint {
    /// Refuses a registration of `len` fresh bytes beyond [`ShmOptions::register_limit`]
    /// or, for large ones, beyond the memory the node has available: registration
    /// pre-faults, and memory the node cannot hold would be taken from other processes by
    /// the OOM killer.
    ///
    /// [`ShmOptions::register_limit`]: super::ShmOptions::register_limit
    fn check_register_limit(&self, len: usize) -> Result<()> {
        let refuse = |limit: u64, why: &'static str| Error::OutOfMemory {
            op: "register",
            resource: self.addr.to_string(),
            len: len as u64,
            limit,
            why,
        };
        let limit = self.opts.register_limit;
        if len as u64 > limit {
            return Err(refuse(
                limit,
                "half the node's memory by default; ACCIO_SHM_REGISTER_LIMIT or \
                 ShmOptions::register_limit sets another",
            ));
        }
        // Reading /proc/meminfo costs tens of microseconds: only for registrations large
        // enough to matter.
        if len >= 64 << 20 {
            if let Some(avail) = sys::mem_available_bytes() {
                if len as u64 > avail {
                    return Err(refuse(
                        avail,
                        "the memory the node has available now (MemAvailable)",
                    ));
                }
            }
        }
        Ok(())
    }

    fn count_rma(&self) {
        // Not a read-modify-write: a mark only names "everything so far" (every RMA is
        // complete when its call returns), so a count lost between racing threads costs
        // nothing, and the locked add would cost as much as the rest of a small RMA.
        let n = self.rma_issued.load(Ordering::Relaxed);
        self.rma_issued.store(n.wrapping_add(1), Ordering::Relaxed);
    }

    /// After the host path of an RMA failed with `e`: a refusal may concern a device
    /// window, which [`ShmEndpoint::device_rma`] reaches (or refuses with the precise
    /// error); other errors stand. Kept out of line: the RMA calls' hot paths stay as
    /// small as they were without device windows.
    #[cold]
    #[inline(never)]
    fn or_device(
        &self,
        e: Error,
        op: Rma<'_>,
        len: usize,
        remote_off: u64,
        flags: RmaFlags,
    ) -> Result<()> {
        match e.kind() {
            ErrorKind::OutOfWindow | ErrorKind::AccessDenied => {
                self.device_rma(op, len, remote_off)?;
                self.finish_rma(flags)
            }
            _ => Err(e),
        }
    }

    /// `fence_signal` with a target its host path did not find: both targets are checked
    /// in windows of either kind before either is stored.
    #[cold]
    #[inline(never)]
    fn device_fence_signal(
        &self,
        local: Option<(u64, u64)>,
        remote: Option<(u64, u64)>,
    ) -> Result<()> {
        self.check_signal_targets(local.map(|l| l.0), remote.map(|r| r.0))?;
        if let Some((off, val)) = remote {
            self.device_signal(true, off, val)?;
        }
        if let Some((off, val)) = local {
            self.device_signal(false, off, val)?;
        }
        self.count_rma();
        Ok(())
    }

    fn finish_rma(&self, flags: RmaFlags) -> Result<()> {
        self.count_rma();
        if flags.sync {
            fence(Ordering::SeqCst);
            self.check_alive()?;
        }
        Ok(())
    }
}

/// The copy of a write into the peer's memory: streaming stores when `flags` ask for them.
///
/// # Safety
/// As [`copy_bytes`].
unsafe fn copy_into_peer(dst: *mut u8, src: *const u8, len: usize, flags: RmaFlags) {
    // SAFETY: forwarded caller contract.
    unsafe {
        if flags.streaming {
            accio_core::copy_streaming(dst, src, len)
        } else {
            copy_bytes(dst, src, len)
        }
    }
}

impl Endpoint for ShmEndpoint {
    fn backend(&self) -> &'static str {
        "shm"
    }

    fn local_addr(&self) -> &Addr {
        &self.addr
    }

    fn peer_addr(&self) -> &Addr {
        &self.addr
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            map_remote: true,
            cpu_free_rma: true,
            max_try_send: self.opts.chunk_bytes,
        }
    }

    fn send(&self, msg: &[u8]) -> Result<()> {
        self.check_not_gone()?;
        let mut tx = self.tx.lock().expect("send lock");
        self.send_locked(&mut tx, msg)
    }

    fn try_send(&self, msg: &[u8]) -> Result<Progress<()>> {
        self.check_not_gone()?;
        let limit = self.opts.chunk_bytes;
        if msg.len() > limit {
            return Err(Error::MessageTooLarge {
                op: "try_send",
                endpoint: self.addr.to_string(),
                len: msg.len(),
                limit,
            });
        }
        let Ok(mut tx) = self.tx.try_lock() else {
            return Ok(Progress::WouldBlock);
        };
        if tx.try_push(msg, true, false, msg.len() as u64) {
            Ok(Progress::Ready(()))
        } else {
            self.probe_alive_now_and_then()?;
            Ok(Progress::WouldBlock)
        }
    }

    fn recv_timeout(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut rx = self.rx.lock().expect("receive lock");
        match self.recv_locked(&mut rx, buf, deadline, true)? {
            Progress::Ready(n) => Ok(n),
            Progress::WouldBlock => unreachable!("blocking receive"),
        }
    }

    fn recv_into(&self, dst: &mut [u8], timeout: Option<Duration>) -> Result<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let limit = dst.len();
        let mut land = super::messages::SliceLanding { dst, got: 0 };
        let mut rx = self.rx.lock().expect("receive lock");
        let n = match self.recv_locked(&mut rx, &mut land, deadline, true)? {
            Progress::Ready(n) => n,
            Progress::WouldBlock => unreachable!("blocking receive"),
        };
        if n > limit {
            return Err(Error::MessageTooLarge {
                op: "recv_into",
                endpoint: self.addr.to_string(),
                len: n,
                limit,
            });
        }
        Ok(n)
    }

    fn try_recv(&self, buf: &mut Vec<u8>) -> Result<Progress<usize>> {
        let Ok(mut rx) = self.rx.try_lock() else {
            return Ok(Progress::WouldBlock);
        };
        let r = self.recv_locked(&mut rx, buf, None, false)?;
        if !r.is_ready() && self.probe_alive_now_and_then().is_err() {
            // A peer that sent its last message and closed between the look above and the
            // probe: the message is delivered first (the probe marked the endpoint gone, so
            // this takes the last look, and with the ring empty it is the peer-gone error).
            return self.recv_locked(&mut rx, buf, None, false);
        }
        Ok(r)
    }

    fn register(&self, len: usize, access: Access) -> Result<Window> {
        if len == 0 {
            return Err(Error::invalid(
                "register",
                "window length must be at least 1 byte",
            ));
        }
        self.check_register_limit(len)?;
        self.check_not_gone()?;
        let name = format!("accio-window-of-{}", self.addr);
        // Memory the peer may only read is sealed against writable mappings for good: our
        // own mapping, made first, stays writable.
        let region = if access.contains(Access::WRITE) {
            Region::shareable(len, &name, true)?
        } else {
            Region::shareable_read_only_for_peers(len, &name, true)?
        };
        self.register_view(&MemView::whole(Arc::new(region)), access)
    }

    fn register_view(&self, view: &MemView, access: Access) -> Result<Window> {
        let Some(file) = view.region().file() else {
            return Err(Error::invalid(
                "register_view",
                format!(
                    "{} shares window memory with its peer process: register a view of a \
                     Region::shareable region, not of private memory",
                    self.addr
                ),
            ));
        };
        if view.is_empty() || !view.start().is_multiple_of(PAGE) {
            return Err(Error::invalid(
                "register_view",
                format!(
                    "a window must start on a page boundary and hold at least 1 byte \
                     (got {} bytes at byte {:#x} of its region)",
                    view.len(),
                    view.start()
                ),
            ));
        }
        self.check_not_gone()?;
        let len = view.len();
        let mut space = self.local.write().expect("local windows lock");
        let slot = ShmEndpoint::alloc_slot(&mut space).ok_or_else(|| {
            Error::invalid(
                "register",
                format!(
                    "{} already has the maximum of {TABLE_SLOTS} windows registered",
                    self.addr
                ),
            )
        })?;
        let offset = space.alloc.allocate(len);
        let window = Window::new(view.clone(), offset, access);
        // The descriptor goes out before the table entry is published, so a peer that
        // sees the entry always finds the descriptor queued.
        let mut rec = [0u8; CTL_RECORD];
        rec[..4].copy_from_slice(&CTL_WINDOW.to_le_bytes());
        rec[4] = access.bits();
        rec[8..16].copy_from_slice(&offset.to_le_bytes());
        rec[16..24].copy_from_slice(&(len as u64).to_le_bytes());
        rec[24..32].copy_from_slice(&(view.start() as u64).to_le_bytes());
        // A window the peer may not write goes out as a read-only descriptor: the peer's
        // kernel refuses it a writable mapping, whatever its table says.
        let read_only;
        let file = if access.contains(Access::WRITE) {
            file
        } else {
            read_only = accio_core::reopen(file, false).map_err(|e| {
                space.free_slots.push(slot);
                Error::io(
                    "open read-only",
                    format!("window memory of {}", self.addr),
                    e,
                )
            })?;
            &read_only
        };
        self.send_ctl(&rec, file)
            .inspect_err(|_| space.free_slots.push(slot))?;
        let desc = window.desc();
        space.table.insert(
            desc,
            LocalWin {
                window: window.clone(),
                slot,
            },
        )?;
        self.link.table(self.side).publish(slot, desc, false);
        Ok(window)
    }

    fn register_device(
        &self,
        memory: Arc<dyn DeviceMemory>,
        access: Access,
    ) -> Result<DeviceWindow> {
        self.register_device_window(memory, access)
    }

    fn unregister(&self, offset: u64) -> Result<()> {
        let mut space = self.local.write().expect("local windows lock");
        if self.unregister_device(&mut space, offset) {
            return Ok(());
        }
        let (_, w) = space.table.remove(offset).ok_or_else(|| {
            Error::invalid(
                "unregister",
                format!("no window of {} starts at {offset:#x}", self.addr),
            )
        })?;
        self.link.table(self.side).retire(w.slot);
        space.free_slots.push(w.slot);
        // Under the write lock: a cache entry filled under a read lock before this has
        // the old generation.
        self.local_gen.fetch_add(1, Ordering::Release);
        Ok(())
    }

    fn write_to(&self, local_off: u64, len: usize, remote_off: u64, flags: RmaFlags) -> Result<()> {
        self.check_not_gone()?;
        match self.with_both(local_off, remote_off, len, Access::WRITE, |src, dst| {
            // SAFETY: both ranges were checked against their windows, which stay mapped
            // during the call; they are different mappings (ours and the peer's), so they
            // do not overlap.
            unsafe { copy_into_peer(dst, src, len, flags) }
        }) {
            Ok(()) => self.finish_rma(flags),
            Err(e) => self.or_device(e, Rma::WriteTo { local_off }, len, remote_off, flags),
        }
    }

    fn read_from(
        &self,
        local_off: u64,
        len: usize,
        remote_off: u64,
        flags: RmaFlags,
    ) -> Result<()> {
        self.check_not_gone()?;
        match self.with_both(local_off, remote_off, len, Access::READ, |dst, src| {
            // SAFETY: as in write_to, with the roles swapped.
            unsafe { copy_bytes(dst, src, len) }
        }) {
            Ok(()) => self.finish_rma(flags),
            Err(e) => self.or_device(e, Rma::ReadFrom { local_off }, len, remote_off, flags),
        }
    }

    fn vwrite_to(&self, src: &[u8], remote_off: u64, flags: RmaFlags) -> Result<()> {
        self.check_not_gone()?;
        match self.with_peer(remote_off, src.len(), Access::WRITE, |dst| {
            // SAFETY: `dst` covers src.len() checked bytes of a peer mapping; `src` is a
            // Rust slice of caller memory, which is never a peer window mapping of this
            // endpoint.
            unsafe { copy_into_peer(dst, src.as_ptr(), src.len(), flags) }
        }) {
            Ok(()) => self.finish_rma(flags),
            Err(e) => self.or_device(e, Rma::VWrite(src), src.len(), remote_off, flags),
        }
    }

    fn vread_from(&self, dst: &mut [u8], remote_off: u64, flags: RmaFlags) -> Result<()> {
        self.check_not_gone()?;
        let len = dst.len();
        let out = dst.as_mut_ptr();
        match self.with_peer(remote_off, len, Access::READ, |src| {
            // SAFETY: as in vwrite_to.
            unsafe { copy_bytes(out, src, len) }
        }) {
            Ok(()) => self.finish_rma(flags),
            Err(e) => self.or_device(e, Rma::VRead(out), len, remote_off, flags),
        }
    }

    fn check_remote(&self, remote_off: u64, len: usize, need: Access) -> Result<()> {
        self.check_not_gone()?;
        self.with_peer(remote_off, len, need, |_| ())
            .or_else(|e| match e.kind() {
                ErrorKind::OutOfWindow | ErrorKind::AccessDenied => {
                    self.peer_any_check(remote_off, len, need)
                }
                _ => Err(e),
            })
    }

    fn fence_mark(&self) -> Result<Mark> {
        // Every RMA completes before its call returns, so a mark names completed work.
        fence(Ordering::SeqCst);
        let n = self.rma_issued.load(Ordering::Relaxed);
        // Marks never step back, even when a racing `count_rma` stored a stale count.
        let before = self.marked.fetch_max(n, Ordering::AcqRel);
        Ok(Mark(n.max(before)))
    }

    fn fence_wait(&self, mark: Mark) -> Result<()> {
        mark.check_issued(
            self.marked
                .load(Ordering::Acquire)
                .max(self.rma_issued.load(Ordering::Relaxed)),
        )?;
        fence(Ordering::SeqCst);
        self.check_alive()
    }

    fn fence_signal(&self, local: Option<(u64, u64)>, remote: Option<(u64, u64)>) -> Result<()> {
        self.check_not_gone()?;
        // Check both targets before storing either, so a bad argument stores nothing.
        // Windows start on page boundaries, so offset alignment is address alignment.
        for (side, target) in [("local", local), ("remote", remote)] {
            if let Some((off, _)) = target {
                if off % 8 != 0 {
                    return Err(Error::invalid(
                        "fence_signal",
                        format!("{side} signal offset {off:#x} is not 8-byte aligned"),
                    ));
                }
            }
        }
        let local_view = match local {
            Some((off, _)) => match self.local_find(off, 8) {
                Ok(w) => Some(
                    MemView::sub(w.view().region().clone(), (off - w.offset()) as usize, 8)
                        .expect("checked"),
                ),
                Err(_) => return self.device_fence_signal(local, remote),
            },
            None => None,
        };
        let remote_view = match remote {
            Some((off, _)) => match self.peer_view(off, 8, Access::WRITE) {
                Ok(v) => Some(v),
                Err(_) => return self.device_fence_signal(local, remote),
            },
            None => None,
        };
        // Earlier RMAs are complete (they are synchronous copies); the release stores
        // order their data before the signal values for any acquiring reader.
        if let (Some(v), Some((_, val))) = (&remote_view, remote) {
            v.store_u64(0, val)?;
        }
        if let (Some(v), Some((_, val))) = (&local_view, local) {
            v.store_u64(0, val)?;
        }
        self.count_rma();
        Ok(())
    }

    fn map_remote(&self, remote_off: u64, len: usize) -> Result<RemoteMap> {
        self.check_not_gone()?;
        let view = self
            .peer_view(remote_off, len, Access::READ)
            .map_err(|_| self.unmappable(remote_off, len))?;
        Ok(RemoteMap::new(view, remote_off))
    }

    fn send_file(&self, file: &File) -> Result<()> {
        self.check_not_gone()?;
        let mut rec = [0u8; CTL_RECORD];
        rec[..4].copy_from_slice(&CTL_FILE.to_le_bytes());
        self.send_ctl(&rec, file)
    }

    fn recv_file(&self) -> Result<File> {
        self.take_file()
    }
}
