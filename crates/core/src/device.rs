//! Device memory behind a window: memory of an accelerator (a GPU) that the CPU cannot load
//! or store, so every access is a copy by the device's driver. The [`DeviceMemory`] trait
//! is that driver's side of the contract (`accio-device` implements it for CUDA memory);
//! [`crate::Endpoint::register_device`] exposes such memory to the peer as a
//! [`DeviceWindow`], and every RMA call then works with it on either side.

use std::fmt;
use std::sync::Arc;

use crate::error::{Result, WindowDesc};
use crate::types::Access;

/// The largest chunk [`DeviceMemory::drain`] and [`DeviceMemory::fill`] hand over.
pub const DEVICE_CHUNK: usize = 4 << 20;

/// Memory of an accelerator, reached through copies (see the [module docs](self)).
///
/// Offsets are bytes from the start of the memory; callers check them against
/// [`DeviceMemory::len`] before any call (implementations may assume they are in range).
/// Every copy is complete when its call returns.
pub trait DeviceMemory: Send + Sync + fmt::Debug {
    /// Its length in bytes.
    fn len(&self) -> usize;

    /// Whether it holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The implementation, so that [`DeviceMemory::copy_from`] knows whether `src` is
    /// memory it can copy from directly (`"cuda"`).
    fn kind(&self) -> &'static str;

    /// The device's ordinal on the node (meaningful per [`kind`](Self::kind)).
    fn device(&self) -> u32;

    /// Which memory this is, for messages: `cuda device 0`.
    fn describe(&self) -> String {
        format!("{} device {}", self.kind(), self.device())
    }

    /// Its device address (meaningful to implementations of the same [`kind`](Self::kind)).
    fn address(&self) -> u64;

    /// Copies `dst.len()` bytes at `at` into host memory `dst`.
    fn read(&self, at: usize, dst: &mut [u8]) -> Result<()>;

    /// Copies host memory `src` to byte `at`.
    fn write(&self, at: usize, src: &[u8]) -> Result<()>;

    /// Hands `len` bytes from `at` to `sink` in order, a chunk at a time (at most
    /// [`DEVICE_CHUNK`] bytes each): what a transport sends from. Implementations copy the
    /// next chunk off the device while `sink` takes this one. Stops at `sink`'s first
    /// error and returns it.
    fn drain(
        &self,
        at: usize,
        len: usize,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let mut chunk = vec![0u8; len.min(DEVICE_CHUNK)];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(DEVICE_CHUNK);
            self.read(at + done, &mut chunk[..n])?;
            sink(&chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// Fills `len` bytes from `at` from `source` in order, a chunk at a time (`source`
    /// fills each chunk it is given, at most [`DEVICE_CHUNK`] bytes): what a transport
    /// receives into. Implementations copy each chunk to the device while `source` fills
    /// the next. Stops at `source`'s first error and returns it (the chunks before it are
    /// copied).
    fn fill(
        &self,
        at: usize,
        len: usize,
        source: &mut dyn FnMut(&mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let mut chunk = vec![0u8; len.min(DEVICE_CHUNK)];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(DEVICE_CHUNK);
            source(&mut chunk[..n])?;
            self.write(at + done, &chunk[..n])?;
            done += n;
        }
        Ok(())
    }

    /// Copies `len` bytes at `src_at` of `src` to byte `at`: on the device where `src` is
    /// of the same kind (implementations that can), through host memory otherwise (the
    /// default: [`copy_through_host`]).
    fn copy_from(
        &self,
        at: usize,
        src: &dyn DeviceMemory,
        src_at: usize,
        len: usize,
    ) -> Result<()> {
        copy_through_host(self, at, src, src_at, len)
    }

    /// What another process of this node opens this memory by (a CUDA IPC handle), or an
    /// error saying why it cannot be shared.
    fn share(&self) -> Result<DeviceShare>;
}

/// Copies `len` bytes at `src_at` of `src` to byte `at` of `dst` through host memory, a
/// chunk at a time as `src` drains them ([`DeviceMemory::drain`]): between two kinds of
/// device memory, never a whole-buffer bounce.
pub fn copy_through_host<D: DeviceMemory + ?Sized>(
    dst: &D,
    at: usize,
    src: &dyn DeviceMemory,
    src_at: usize,
    len: usize,
) -> Result<()> {
    let mut done = 0;
    src.drain(src_at, len, &mut |chunk| {
        dst.write(at + done, chunk)?;
        done += chunk.len();
        Ok(())
    })
}

/// How another process opens a [`DeviceMemory`] ([`DeviceMemory::share`]): the device and
/// an opaque handle of its driver.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DeviceShare {
    /// The device's ordinal on the node.
    pub device: u32,
    /// The driver's handle of the allocation the memory lies in (`cuIpcGetMemHandle`'s 64
    /// bytes).
    pub handle: [u8; 64],
    /// Where the memory starts in that allocation, in bytes (an array of PyTorch's or
    /// CuPy's memory pool lies inside a larger allocation).
    pub offset: u64,
}

impl fmt::Debug for DeviceShare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceShare")
            .field("device", &self.device)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

/// A registered window of device memory ([`crate::Endpoint::register_device`]): the peer
/// reaches it with RMA as it reaches host windows; this process reaches it through the
/// [`DeviceMemory`] it was made of. Cloning shares the memory, which stays valid while any
/// clone (or a transfer in flight) holds it, even after `unregister`.
#[derive(Clone, Debug)]
pub struct DeviceWindow {
    memory: Arc<dyn DeviceMemory>,
    offset: u64,
    access: Access,
}

impl DeviceWindow {
    /// Wraps `memory` as the window at `offset` with the peer's `access` rights.
    pub fn new(memory: Arc<dyn DeviceMemory>, offset: u64, access: Access) -> DeviceWindow {
        DeviceWindow {
            memory,
            offset,
            access,
        }
    }

    /// Offset of the window in its endpoint's registered address space.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Rights the peer has on the window.
    pub fn access(&self) -> Access {
        self.access
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.memory.len()
    }

    /// Whether it holds no bytes (never, for a registered window).
    pub fn is_empty(&self) -> bool {
        self.memory.is_empty()
    }

    /// The device memory.
    pub fn memory(&self) -> &Arc<dyn DeviceMemory> {
        &self.memory
    }

    /// Offset, length and rights, as printed in errors.
    pub fn desc(&self) -> WindowDesc {
        WindowDesc {
            offset: self.offset,
            len: self.memory.len() as u64,
            access: self.access,
        }
    }
}
