//! Device windows over `shm` ([`accio_core::Endpoint::register_device`]): GPU memory the
//! peer process reaches with RMA as it reaches host windows. The initiator of an RMA does
//! every copy, as for host windows: a peer's device window is opened in its process
//! through CUDA IPC (`accio_device::open_shared`), so device→device across processes is
//! one copy on the GPU, and host↔device copies go through the driver's pinned staging
//! (into or out of a peer's mapped host window directly).
//!
//! The fast paths of host RMA never see a device window: ours are in their own table,
//! the peer's are skipped by its mapping code, so their lookups fail and the RMA calls
//! come here ([`ShmEndpoint::device_rma`]), which finds windows of both kinds and either
//! copies or returns the precise error the host path would have.
//!
//! The peer learns of a device window from a control record ([`CTL_DEVICE`]) sent before
//! the table entry is published: its size and rights, the driver's handle
//! ([`DeviceShare`]), and a token that a peer in the same process (where CUDA IPC cannot
//! open a handle) looks the memory up by. CUDA IPC maps memory readable and writable
//! whatever the window's rights: accio checks them on every RMA, as for host windows,
//! but a peer process that broke the contract could write a read-only device window.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use accio_core::{
    copy_bytes, find_either, Access, DeviceMemory, DeviceShare, DeviceWindow, EitherWindow, Error,
    MemView, Result, Side, WindowDesc, WindowTable,
};

use super::windows::{CTL_DEVICE, CTL_RECORD};
use super::ShmEndpoint;
use crate::link::Entry;

/// Bytes of a device record's payload: token (16), pid (4), has-share (4), device (4),
/// reserved (4), handle (64), offset in the handle's allocation (8).
pub(super) const DEVICE_RECORD: usize = 104;

/// What the peer sent of one of its device windows.
#[derive(Clone, Copy, Debug)]
pub(super) struct DeviceRecord {
    token: u128,
    pid: u32,
    share: Option<DeviceShare>,
}

impl DeviceRecord {
    pub(super) fn decode(b: &[u8; DEVICE_RECORD]) -> DeviceRecord {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        DeviceRecord {
            token: u128::from_le_bytes(b[..16].try_into().expect("16 bytes")),
            pid: u32_at(16),
            share: (u32_at(20) != 0).then(|| DeviceShare {
                device: u32_at(24),
                handle: b[32..96].try_into().expect("64 bytes"),
                offset: u64::from_le_bytes(b[96..104].try_into().expect("8 bytes")),
            }),
        }
    }

    fn encode(&self) -> [u8; DEVICE_RECORD] {
        let mut b = [0u8; DEVICE_RECORD];
        b[..16].copy_from_slice(&self.token.to_le_bytes());
        b[16..20].copy_from_slice(&self.pid.to_le_bytes());
        if let Some(s) = &self.share {
            b[20..24].copy_from_slice(&1u32.to_le_bytes());
            b[24..28].copy_from_slice(&s.device.to_le_bytes());
            b[32..96].copy_from_slice(&s.handle);
            b[96..104].copy_from_slice(&s.offset.to_le_bytes());
        }
        b
    }
}

/// A peer's device window opened here: its table entry (slot, stamp, extent, rights) and
/// its memory.
#[derive(Debug)]
pub(super) struct OpenedDevice {
    entry: Entry,
    memory: Arc<dyn DeviceMemory>,
}

/// Device memory of this process's device windows, by token, for peers in this process.
static SHARED: Mutex<Option<HashMap<u128, Weak<dyn DeviceMemory>>>> = Mutex::new(None);

fn shared() -> std::sync::MutexGuard<'static, Option<HashMap<u128, Weak<dyn DeviceMemory>>>> {
    SHARED.lock().unwrap_or_else(|p| p.into_inner())
}

/// One of our device windows: the handle, its table slot, its token.
#[derive(Debug)]
pub(super) struct DeviceWin {
    pub(super) window: DeviceWindow,
    pub(super) slot: usize,
    token: u128,
}

impl Drop for DeviceWin {
    fn drop(&mut self) {
        if let Some(m) = shared().as_mut() {
            m.remove(&self.token);
        }
    }
}

/// One side of a copy: host bytes at an address, or bytes of device memory.
enum Place {
    Host(*mut u8),
    Device(Arc<dyn DeviceMemory>, usize),
}

/// A local or peer window's bytes found for an RMA, kept alive for the copy.
struct Found {
    place: Place,
    /// The host mapping the address points into, held while it is used.
    _keep: Option<MemView>,
}

/// The RMA calls that reach device windows.
#[derive(Clone, Copy, Debug)]
pub(super) enum Rma<'a> {
    WriteTo { local_off: u64 },
    ReadFrom { local_off: u64 },
    VWrite(&'a [u8]),
    VRead(*mut u8),
}

impl ShmEndpoint {
    pub(super) fn register_device_window(
        &self,
        memory: Arc<dyn DeviceMemory>,
        access: Access,
    ) -> Result<DeviceWindow> {
        let len = memory.len();
        if len == 0 {
            return Err(Error::invalid(
                "register_device",
                "window length must be at least 1 byte",
            ));
        }
        self.check_not_gone()?;
        let mut token = [0u8; 16];
        getrandom::fill(&mut token).map_err(|e| {
            Error::io(
                "getrandom",
                "a device window's token",
                std::io::Error::other(e.to_string()),
            )
        })?;
        let record = DeviceRecord {
            token: u128::from_le_bytes(token),
            pid: std::process::id(),
            // Memory no other process can open still serves peers in this one.
            share: memory.share().ok(),
        };
        let mut space = self.local.write().expect("local windows lock");
        let slot = ShmEndpoint::alloc_slot(&mut space).ok_or_else(|| {
            Error::invalid(
                "register_device",
                format!(
                    "{} already has the maximum of {} windows registered",
                    self.addr,
                    crate::link::TABLE_SLOTS
                ),
            )
        })?;
        let offset = space.alloc.allocate(len);
        let window = DeviceWindow::new(memory.clone(), offset, access);
        let mut bytes = [0u8; CTL_RECORD + DEVICE_RECORD];
        bytes[..4].copy_from_slice(&CTL_DEVICE.to_le_bytes());
        bytes[4] = access.bits();
        bytes[8..16].copy_from_slice(&offset.to_le_bytes());
        bytes[16..24].copy_from_slice(&(len as u64).to_le_bytes());
        bytes[CTL_RECORD..].copy_from_slice(&record.encode());
        shared()
            .get_or_insert_with(HashMap::new)
            .insert(record.token, Arc::downgrade(&memory));
        let win = DeviceWin {
            window: window.clone(),
            slot,
            token: record.token,
        };
        // The record goes out before the table entry is published, as a host window's
        // descriptor does.
        if let Err(e) = self.send_ctl_bytes(&bytes, None) {
            space.free_slots.push(slot);
            return Err(e);
        }
        let desc = window.desc();
        space.devices.insert(desc, win)?;
        self.link.table(self.side).publish(slot, desc, true);
        Ok(window)
    }

    /// Withdraws our device window at `offset`; `false` if there is none there.
    pub(super) fn unregister_device(
        &self,
        space: &mut super::windows::LocalSpace,
        offset: u64,
    ) -> bool {
        let Some((_, w)) = space.devices.remove(offset) else {
            return false;
        };
        self.link.table(self.side).retire(w.slot);
        space.free_slots.push(w.slot);
        true
    }

    /// Bytes `offset..+len` of our windows, of either kind.
    fn local_any(&self, offset: u64, len: usize) -> Result<Found> {
        let space = self.local.read().expect("local windows lock");
        let (need, side) = (Access::NONE, Side::Local);
        Ok(
            match find_either(
                &space.table,
                &space.devices,
                offset,
                len as u64,
                need,
                side,
                &self.addr,
            )? {
                EitherWindow::First(d, w) => {
                    let at = (offset - d.offset) as usize;
                    let view = w.window.view();
                    let keep = MemView::sub(view.region().clone(), view.start() + at, len)
                        .expect("inside the window");
                    Found {
                        place: Place::Host(keep.as_ptr()),
                        _keep: Some(keep),
                    }
                }
                EitherWindow::Second(d, w) => Found {
                    place: Place::Device(w.window.memory().clone(), (offset - d.offset) as usize),
                    _keep: None,
                },
            },
        )
    }

    /// Bytes `offset..+len` of the peer's windows, of either kind, checked for `need`.
    fn peer_any(&self, offset: u64, len: usize, need: Access) -> Result<Found> {
        let table = self.link.table(1 - self.side);
        // A device window opened before and still registered, as is: no table scan.
        {
            let open = self.peer_devices.lock().expect("peer device windows lock");
            if let Some((_, o)) = open.range(..=offset).next_back() {
                let d = o.entry.desc;
                let inside = offset
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= d.offset + d.len);
                if inside && d.access.contains(need) && table.stamp(o.entry.slot) == o.entry.stamp {
                    return Ok(Found {
                        place: Place::Device(o.memory.clone(), (offset - d.offset) as usize),
                        _keep: None,
                    });
                }
            }
        }
        let mut snapshot = WindowTable::default();
        for e in table.active() {
            // Overlapping entries would be a corrupt table; ignore the later ones.
            let _ = snapshot.insert(e.desc, e);
        }
        let (_, entry) = snapshot.find(offset, len as u64, need, Side::Remote, &self.addr)?;
        let entry = *entry;
        if !entry.device {
            let view = self.peer_view(offset, len, need)?;
            return Ok(Found {
                place: Place::Host(view.as_ptr()),
                _keep: Some(view),
            });
        }
        let memory = self.peer_device(&entry)?;
        Ok(Found {
            place: Place::Device(memory, (offset - entry.desc.offset) as usize),
            _keep: None,
        })
    }

    /// `check_remote` over windows of both kinds.
    pub(super) fn peer_any_check(&self, offset: u64, len: usize, need: Access) -> Result<()> {
        self.peer_any(offset, len, need).map(|_| ())
    }

    /// The memory of the peer's device window `entry`, opened on first use.
    fn peer_device(&self, entry: &Entry) -> Result<Arc<dyn DeviceMemory>> {
        let desc = entry.desc;
        let mut open = self.peer_devices.lock().expect("peer device windows lock");
        if let Some(o) = open.get(&desc.offset) {
            if o.entry.stamp == entry.stamp {
                return Ok(o.memory.clone());
            }
        }
        // Withdrawn windows' memory is let go (a CUDA IPC mapping closed).
        let table = self.link.table(1 - self.side);
        open.retain(|_, o| table.stamp(o.entry.slot) == o.entry.stamp);
        let record = self.take_device_record(desc.offset)?;
        let memory = self.open_peer_device(&record, desc)?;
        open.insert(
            desc.offset,
            OpenedDevice {
                entry: *entry,
                memory: memory.clone(),
            },
        );
        Ok(memory)
    }

    /// The record the peer sent of its device window at `offset`, read from the control
    /// socket.
    fn take_device_record(&self, offset: u64) -> Result<DeviceRecord> {
        let mut ctl = self.ctl.lock().expect("control socket lock");
        loop {
            if let Some(r) = ctl.devices.remove(&offset) {
                return Ok(r);
            }
            // Sent before the table entry was published: none queued is a broken peer.
            if !self.read_ctl(&mut ctl)? {
                return Err(Error::protocol(
                    &self.addr,
                    format!("device window at {offset:#x} was published without its record"),
                ));
            }
        }
    }

    fn open_peer_device(
        &self,
        r: &DeviceRecord,
        desc: WindowDesc,
    ) -> Result<Arc<dyn DeviceMemory>> {
        let memory = if r.pid == std::process::id() {
            // A peer in this process: its memory by token (a CUDA IPC handle does not
            // open in the process that made it). An unknown token is a lying peer.
            shared()
                .as_ref()
                .and_then(|m| m.get(&r.token))
                .and_then(Weak::upgrade)
                .ok_or_else(|| {
                    Error::protocol(
                        &self.addr,
                        format!("device window {desc} names memory this process does not have"),
                    )
                })?
        } else {
            let share = r.share.ok_or_else(|| {
                Error::invalid(
                    "device window",
                    format!(
                        "the peer's device window {desc} of {} cannot be opened by another \
                         process (its memory gave no IPC handle)",
                        self.addr
                    ),
                )
            })?;
            accio_device::open_shared(&share, desc.len as usize)?
        };
        if memory.len() as u64 != desc.len {
            return Err(Error::protocol(
                &self.addr,
                format!(
                    "device window {desc} opened as {} bytes of {}",
                    memory.len(),
                    memory.describe()
                ),
            ));
        }
        Ok(memory)
    }

    /// An RMA the host path refused because a window it needs is device memory (or that
    /// is refused): finds both windows of either kind and copies, or returns the error.
    /// `remote_off + len` is the peer's side, checked for `need` by the call's direction.
    pub(super) fn device_rma(&self, op: Rma<'_>, len: usize, remote_off: u64) -> Result<()> {
        let (need, local) = match op {
            Rma::WriteTo { local_off } => (Access::WRITE, Some(self.local_any(local_off, len)?)),
            Rma::ReadFrom { local_off } => (Access::READ, Some(self.local_any(local_off, len)?)),
            Rma::VWrite(_) => (Access::WRITE, None),
            Rma::VRead(_) => (Access::READ, None),
        };
        let peer = self.peer_any(remote_off, len, need)?;
        // `local` and `peer` hold their mappings until the copy is done.
        let slice;
        let local_place = match (&local, op) {
            (Some(l), _) => &l.place,
            (None, Rma::VWrite(src)) => {
                slice = Place::Host(src.as_ptr() as *mut u8);
                &slice
            }
            (None, Rma::VRead(dst)) => {
                slice = Place::Host(dst);
                &slice
            }
            (None, _) => unreachable!("write_to and read_from have a local window"),
        };
        if need == Access::WRITE {
            copy(&peer.place, local_place, len)
        } else {
            copy(local_place, &peer.place, len)
        }
    }

    /// Stores `value` at `offset` of our window (`remote` false) or the peer's, of either
    /// kind: `fence_signal`'s path for device windows (after its host path refused).
    pub(super) fn device_signal(&self, remote: bool, offset: u64, value: u64) -> Result<()> {
        let found = if remote {
            self.peer_any(offset, 8, Access::WRITE)?
        } else {
            self.local_any(offset, 8)?
        };
        let bytes = value.to_le_bytes();
        copy(&found.place, &Place::Host(bytes.as_ptr() as *mut u8), 8)
    }

    /// `fence_signal`'s targets checked before either is stored: `Ok` when both exist
    /// (in windows of either kind) with the rights a store needs.
    pub(super) fn check_signal_targets(
        &self,
        local: Option<u64>,
        remote: Option<u64>,
    ) -> Result<()> {
        if let Some(off) = local {
            self.local_any(off, 8)?;
        }
        if let Some(off) = remote {
            self.peer_any(off, 8, Access::WRITE)?;
        }
        Ok(())
    }

    /// Why the peer's bytes `offset..+len` cannot be mapped: a device window, or the error
    /// of the lookup.
    pub(super) fn unmappable(&self, offset: u64, len: usize) -> Error {
        match self.peer_any(offset, len, Access::READ) {
            Ok(Found {
                place: Place::Device(m, _),
                ..
            }) => Error::invalid(
                "map_remote",
                format!(
                    "{offset:#x} + {len} of {} is in a window of device memory ({}): it is \
                     reached with RMA, not mapped",
                    self.addr,
                    m.describe()
                ),
            ),
            Ok(_) => Error::invalid("map_remote", "the window changed during the call"),
            Err(e) => e,
        }
    }
}

/// Copies `len` bytes from `src` to `dst`, each host or device memory.
fn copy(dst: &Place, src: &Place, len: usize) -> Result<()> {
    match (dst, src) {
        (Place::Host(d), Place::Host(s)) => {
            // SAFETY: both ranges were checked against their windows (or are the caller's
            // slices) and are held mapped by the caller; windows of one endpoint's two
            // sides are different mappings, and a caller's slice is never a window.
            unsafe { copy_bytes(*d, *s, len) };
            Ok(())
        }
        (Place::Device(m, at), Place::Host(s)) => {
            // SAFETY: as above; the driver only reads the `len` bytes.
            let src = unsafe { std::slice::from_raw_parts(*s, len) };
            m.write(*at, src)
        }
        (Place::Host(d), Place::Device(m, at)) => {
            // SAFETY: as above; window memory is shared with the peer by contract, and the
            // driver only writes the `len` bytes.
            let dst = unsafe { std::slice::from_raw_parts_mut(*d, len) };
            m.read(*at, dst)
        }
        (Place::Device(d, at), Place::Device(s, src_at)) => d.copy_from(*at, &**s, *src_at, len),
    }
}
