//! Window tables: ours (what we registered) and the peer's (read from its shared table,
//! mapped on first use), and the control-socket records that carry window memory.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use accio_core::{
    Access, Error, MemView, OffsetAllocator, Region, Result, Side, Window, WindowTable, PAGE,
};

use super::ShmEndpoint;
use crate::link::{Entry, TABLE_SLOTS};
use crate::sys;

/// Control-socket record: kind, access, window offset, length, and where the window starts
/// in the memory object sent with it.
pub(super) const CTL_RECORD: usize = 32;
pub(super) const CTL_WINDOW: u32 = 1;

/// One of our registered windows: the handle and its slot in our shared table.
#[derive(Debug)]
pub(super) struct LocalWin {
    pub(super) window: Window,
    pub(super) slot: usize,
}

#[derive(Debug, Default)]
pub(super) struct LocalSpace {
    pub(super) table: WindowTable<LocalWin>,
    pub(super) alloc: OffsetAllocator,
    pub(super) free_slots: Vec<usize>,
    next_slot: usize,
}

/// A peer window we have mapped, valid while its table stamp is unchanged.
#[derive(Debug, Clone)]
pub(super) struct PeerWin {
    entry: Entry,
    view: MemView,
}

#[derive(Debug, Default)]
pub(super) struct Ctl {
    /// Window memory received from the peer, by window offset, not yet mapped: the memory
    /// object and where in it the window starts.
    pending: HashMap<u64, (OwnedFd, u64)>,
}

impl ShmEndpoint {
    pub(super) fn local_find(&self, offset: u64, len: usize) -> Result<Window> {
        let space = self.local.read().expect("local windows lock");
        let (_, w) = space
            .table
            .find(offset, len as u64, Access::NONE, Side::Local, &self.addr)?;
        Ok(w.window.clone())
    }

    /// A view of `len` bytes of the peer's space at `offset`, checked for `need`.
    pub(super) fn peer_view(&self, offset: u64, len: usize, need: Access) -> Result<MemView> {
        let table = self.link.table(1 - self.side);
        {
            let cache = self.peer.read().expect("peer windows lock");
            if let Some((_, pw)) = cache.range(..=offset).next_back() {
                let d = pw.entry.desc;
                let inside = offset
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= d.offset + d.len);
                if inside && d.access.contains(need) && table.stamp(pw.entry.slot) == pw.entry.stamp
                {
                    let start = (offset - d.offset) as usize;
                    return Ok(MemView::sub(pw.view.region().clone(), start, len)
                        .expect("inside the window"));
                }
            }
        }
        self.peer_view_slow(offset, len, need)
    }

    /// Cache miss: read the peer's table, check the range there (precise errors), map the
    /// window if it is new.
    fn peer_view_slow(&self, offset: u64, len: usize, need: Access) -> Result<MemView> {
        let table = self.link.table(1 - self.side);
        let mut snapshot = WindowTable::default();
        for e in table.active() {
            // Overlapping entries would be a corrupt table; ignore the later ones.
            let _ = snapshot.insert(e.desc, e);
        }
        let (_, entry) = snapshot.find(offset, len as u64, need, Side::Remote, &self.addr)?;
        let entry = *entry;
        let mut cache = self.peer.write().expect("peer windows lock");
        // Drop stale mappings while we hold the lock.
        cache.retain(|_, pw| table.stamp(pw.entry.slot) == pw.entry.stamp);
        let region = match cache.get(&entry.desc.offset) {
            Some(pw) if pw.entry.stamp == entry.stamp => pw.view.region().clone(),
            _ => {
                let (fd, file_off) = self.take_window_fd(entry.desc.offset)?;
                let file = File::from(fd);
                let size = file
                    .metadata()
                    .map_err(|e| Error::io("fstat", self.addr.to_string(), e))?
                    .len();
                let fits = file_off.is_multiple_of(PAGE as u64)
                    && file_off
                        .checked_add(entry.desc.len)
                        .is_some_and(|end| end <= size);
                if !sys::is_size_sealed(&file) || !fits {
                    return Err(Error::protocol(
                        &self.addr,
                        format!(
                            "window {} memory is not size-sealed, or {} bytes at {file_off:#x} \
                             do not fit in its {size} bytes",
                            entry.desc, entry.desc.len
                        ),
                    ));
                }
                let region = Arc::new(Region::shared(
                    &file,
                    file_off,
                    entry.desc.len as usize,
                    false,
                    "peer window",
                )?);
                cache.insert(
                    entry.desc.offset,
                    PeerWin {
                        entry,
                        view: MemView::whole(region.clone()),
                    },
                );
                region
            }
        };
        let start = (offset - entry.desc.offset) as usize;
        Ok(MemView::sub(region, start, len).expect("inside the window"))
    }

    /// The memory object of the peer window at `offset` and where in it the window starts,
    /// read from the control socket.
    fn take_window_fd(&self, offset: u64) -> Result<(OwnedFd, u64)> {
        let mut ctl = self.ctl.lock().expect("control socket lock");
        loop {
            if let Some(got) = ctl.pending.remove(&offset) {
                return Ok(got);
            }
            let mut rec = [0u8; CTL_RECORD];
            let mut fds = Vec::new();
            // The peer sends the descriptor before it publishes the table entry, so it
            // is already queued; blocking here can only mean a broken peer.
            let got = sys::recv_with_fds(self.sock.as_raw_fd(), &mut rec, &mut fds, true).map_err(
                |e| {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        self.gone.set();
                        self.peer_gone_error()
                    } else {
                        Error::io("recvmsg", self.addr.to_string(), e)
                    }
                },
            )?;
            if !got {
                return Err(Error::protocol(
                    &self.addr,
                    format!("window at {offset:#x} was published without its memory"),
                ));
            }
            let kind = u32::from_le_bytes(rec[..4].try_into().expect("4 bytes"));
            let off = u64::from_le_bytes(rec[8..16].try_into().expect("8 bytes"));
            let file_off = u64::from_le_bytes(rec[24..32].try_into().expect("8 bytes"));
            match (kind, fds.pop()) {
                (CTL_WINDOW, Some(fd)) => {
                    ctl.pending.insert(off, (fd, file_off));
                }
                _ => {
                    return Err(Error::protocol(
                        &self.addr,
                        format!("control record kind {kind} is unknown"),
                    ))
                }
            }
        }
    }

    pub(super) fn alloc_slot(space: &mut LocalSpace) -> Option<usize> {
        if let Some(s) = space.free_slots.pop() {
            return Some(s);
        }
        if space.next_slot < TABLE_SLOTS {
            space.next_slot += 1;
            return Some(space.next_slot - 1);
        }
        None
    }
}
