//! CUDA memory as the memory of a window ([`accio_core::DeviceMemory`]): a
//! [`DeviceBuffer`] of this process, another library's array ([`ForeignMemory`]), or a
//! peer's allocation opened through CUDA IPC ([`open_shared`]), which
//! `Endpoint::register_device` exposes and the `shm` backend opens. Copies to and from
//! host memory go through the pinned [`Stager`] pipeline (any host memory: a peer's mapped
//! window too); device→device copies run on the copy engine.

use std::sync::Arc;

use accio_core::{DeviceMemory, DeviceShare};

use crate::{with_stager, DeviceBuffer, DeviceRange, Error, PeerMemory, Result, Staged, Stager};

/// The kind of [`DeviceMemory`] this crate makes.
pub const KIND: &str = "cuda";

/// An accio-core error of a failed device copy `op` on `what`: memory that is not what it
/// was given as is an invalid argument, anything else (no GPU, a driver call) an I/O
/// error naming the driver's cause.
fn core_error(op: &'static str, what: &str, e: Error) -> accio_core::Error {
    match e {
        Error::NotDeviceMemory { .. } | Error::Argument(_) => {
            accio_core::Error::invalid(op, format!("{what}: {e}"))
        }
        e => accio_core::Error::io(op, what.to_string(), std::io::Error::other(e.to_string())),
    }
}

/// `len` bytes at `at` of `range`, or the error naming `op`.
fn part(
    op: &'static str,
    range: &DeviceRange,
    at: usize,
    len: usize,
) -> accio_core::Result<DeviceRange> {
    range.sub(at, len).ok_or_else(|| {
        accio_core::Error::invalid(
            op,
            format!(
                "{at:#x} + {len} is outside the {}-byte device memory",
                range.len()
            ),
        )
    })
}

/// What errors call `range`.
fn what(range: &DeviceRange) -> String {
    format!("{} bytes of GPU {} memory", range.len(), range.ordinal())
}

/// Runs `f` with a pooled stager of `range`'s GPU; its error as accio-core's, naming `op`.
fn run(
    op: &'static str,
    range: &DeviceRange,
    f: impl FnOnce(&mut Stager) -> Result<()>,
) -> accio_core::Result<()> {
    with_stager(range.ordinal(), f)
        .and_then(|r| r)
        .map_err(|e| core_error(op, &what(range), e))
}

/// [`run`] for a pipeline whose host side (a transport) may fail: its error comes back
/// as it was.
fn staged(
    op: &'static str,
    range: &DeviceRange,
    f: impl FnOnce(&mut Stager) -> std::result::Result<(), Staged<accio_core::Error>>,
) -> accio_core::Result<()> {
    match with_stager(range.ordinal(), f) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(Staged::Host(e))) => Err(e),
        Ok(Err(Staged::Device(e))) | Err(e) => Err(core_error(op, &what(range), e)),
    }
}

/// The [`DeviceMemory`] methods of memory known by its [`DeviceRange`].
macro_rules! device_memory {
    ($ty:ty) => {
        impl DeviceMemory for $ty {
            fn len(&self) -> usize {
                self.range().len()
            }

            fn kind(&self) -> &'static str {
                KIND
            }

            fn device(&self) -> u32 {
                self.range().ordinal()
            }

            fn address(&self) -> u64 {
                self.range().ptr()
            }

            fn read(&self, at: usize, dst: &mut [u8]) -> accio_core::Result<()> {
                let r = self.range();
                let src = part("device read", &r, at, dst.len())?;
                run("device read", &r, |st| st.to_host(&src, dst))
            }

            fn write(&self, at: usize, src: &[u8]) -> accio_core::Result<()> {
                let r = self.range();
                let dst = part("device write", &r, at, src.len())?;
                run("device write", &r, |st| st.to_device(src, &dst))
            }

            fn drain(
                &self,
                at: usize,
                len: usize,
                sink: &mut dyn FnMut(&[u8]) -> accio_core::Result<()>,
            ) -> accio_core::Result<()> {
                let r = self.range();
                let src = part("device drain", &r, at, len)?;
                staged("device drain", &r, |st| {
                    st.drain(&src, |_, chunk| sink(chunk))
                })
            }

            fn fill(
                &self,
                at: usize,
                len: usize,
                source: &mut dyn FnMut(&mut [u8]) -> accio_core::Result<()>,
            ) -> accio_core::Result<()> {
                let r = self.range();
                let dst = part("device fill", &r, at, len)?;
                staged("device fill", &r, |st| {
                    st.fill(&dst, |_, chunk| source(chunk))
                })
            }

            fn copy_from(
                &self,
                at: usize,
                src: &dyn DeviceMemory,
                src_at: usize,
                len: usize,
            ) -> accio_core::Result<()> {
                let r = self.range();
                let dst = part("device copy", &r, at, len)?;
                if src.kind() != KIND {
                    return accio_core::copy_through_host(self, at, src, src_at, len);
                }
                let from = DeviceRange {
                    ordinal: src.device(),
                    ptr: src.address() + src_at as u64,
                    len,
                };
                run("device copy", &r, |st| st.device_to_device(&from, &dst))
            }

            fn share(&self) -> accio_core::Result<DeviceShare> {
                Shareable::share_memory(self)
            }
        }
    };
}

/// How each kind of memory answers [`DeviceMemory::share`].
trait Shareable {
    fn share_memory(&self) -> accio_core::Result<DeviceShare>;
}

/// What another process opens `range` by ([`crate::memory::ipc_share`]): the handle of the
/// allocation it lies in, and its place there.
fn share_range(range: &DeviceRange) -> accio_core::Result<DeviceShare> {
    crate::memory::ipc_share(range)
        .map(|(handle, offset)| DeviceShare {
            device: range.ordinal(),
            handle,
            offset,
        })
        .map_err(|e| core_error("share", &format!("GPU {} memory", range.ordinal()), e))
}

impl Shareable for DeviceBuffer {
    fn share_memory(&self) -> accio_core::Result<DeviceShare> {
        share_range(&self.range())
    }
}

impl Shareable for ForeignMemory {
    fn share_memory(&self) -> accio_core::Result<DeviceShare> {
        share_range(&self.range)
    }
}

/// Device memory this process has from elsewhere (a CuPy or PyTorch array, a pointer a C
/// program allocated), as the memory of a window: the range the driver vouched for
/// ([`crate::device_range`]) and whatever keeps the memory allocated (the array object),
/// held as long as the window is. Peers in other processes open it through CUDA IPC, as
/// the allocation it lies in and its place there.
pub struct ForeignMemory {
    range: DeviceRange,
    _owner: Box<dyn std::any::Any + Send + Sync>,
}

impl std::fmt::Debug for ForeignMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForeignMemory")
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}

impl ForeignMemory {
    /// `range`, kept allocated by `owner` (dropped with the last holder of this memory).
    /// Nothing else frees the memory meanwhile: that is the caller's promise (a copy into
    /// freed device memory is the driver's error, or another allocation's bytes).
    pub fn new(range: DeviceRange, owner: impl std::any::Any + Send + Sync) -> ForeignMemory {
        ForeignMemory {
            range,
            _owner: Box::new(owner),
        }
    }

    /// The memory.
    pub fn range(&self) -> DeviceRange {
        self.range
    }
}

impl Shareable for PeerMemory {
    fn share_memory(&self) -> accio_core::Result<DeviceShare> {
        Err(accio_core::Error::invalid(
            "share",
            "memory opened from another process is shared by its owner, not again",
        ))
    }
}

device_memory!(DeviceBuffer);
device_memory!(PeerMemory);
device_memory!(ForeignMemory);

/// Opens `len` bytes of another process's device memory from what its
/// [`DeviceMemory::share`] gave (CUDA IPC), as the memory of a peer's window.
///
/// # Errors
///
/// An I/O error naming the driver's cause (no GPU here, a handle of another node or of
/// memory since freed).
pub fn open_shared(share: &DeviceShare, len: usize) -> accio_core::Result<Arc<dyn DeviceMemory>> {
    let what = format!("{len} bytes of a peer's GPU {} memory", share.device);
    let m = PeerMemory::open(share.device, &share.handle, share.offset, len)
        .map_err(|e| core_error("cuIpcOpenMemHandle", &what, e))?;
    Ok(Arc::new(m))
}
