//! GPU memory as the local side of RMA, on every backend: [`DeviceRma::vwrite_device`]
//! copies device memory into a peer's window, [`DeviceRma::vread_device`] a peer's window
//! into device memory, staged through pinned host chunks ([`accio_device::Stager`]) with
//! the copy engine and the transport working at once: while the transport sends chunk
//! *i* (`vwrite_to` straight from pinned memory), the copy engine fills chunk *i + 1*;
//! while the copy engine moves chunk *i* to the device, the transport receives chunk
//! *i + 1* (`vread_from` straight into pinned memory). Never a whole-buffer bounce: two
//! chunks of [`accio_device::CHUNK`] bytes, from a pool of this process.
//!
//! The whole remote range is checked first ([`Endpoint::check_remote`]), so a range that
//! would fail part-way moves no byte; bounds and rights are the peer window's, exactly as
//! for `vwrite_to` and `vread_from`. Device memory is given as a
//! [`DeviceRange`], which only [`device_range`] (the driver's check of a device pointer)
//! or an owner of device memory makes: a host pointer can never be taken for a device one.
//!
//! Built without the `cuda` feature, or on a machine without driver or GPU, every call
//! fails with a [`DeviceRmaError::Device`] that names what is missing.
//!
//! ```no_run
//! use accio::device::{device_range, DeviceRma};
//! # fn f(ep: &dyn accio::Endpoint, dev_ptr: u64, remote: u64) -> Result<(), accio::device::DeviceRmaError> {
//! let src = device_range(dev_ptr, 64 << 20)?; // e.g. a cudaMalloc'd buffer
//! ep.vwrite_device(&src, remote, accio::RmaFlags::SYNC)?;
//! # Ok(()) }
//! ```

use accio_core::{Access, Endpoint, RmaFlags};
pub use accio_device::{
    device_range, synchronize, DeviceBuffer, DeviceRange, Error as DeviceError, CHUNK,
};

/// Why a staged RMA with device memory failed.
#[derive(Debug, thiserror::Error)]
pub enum DeviceRmaError {
    /// The transport refused or failed: bounds, rights, the peer gone. A refusal
    /// (`OutOfWindow`, `AccessDenied`) moved no byte.
    #[error(transparent)]
    Transport(#[from] accio_core::Error),
    /// The GPU side failed, or there is none ([`DeviceError::is_unavailable`]).
    #[error(transparent)]
    Device(#[from] DeviceError),
}

impl From<accio_device::Staged<accio_core::Error>> for DeviceRmaError {
    fn from(s: accio_device::Staged<accio_core::Error>) -> Self {
        match s {
            accio_device::Staged::Device(e) => DeviceRmaError::Device(e),
            accio_device::Staged::Host(e) => DeviceRmaError::Transport(e),
        }
    }
}

/// One-sided RMA from and into GPU memory, for every endpoint (see the module docs).
pub trait DeviceRma {
    /// Copies the device bytes `src` to the peer's `remote_off`, as `vwrite_to` copies host
    /// bytes. With [`RmaFlags::SYNC`] it returns once all of them are in the peer's window;
    /// without, once they were consumed (a fence awaits their completion). The work that
    /// wrote `src` must be complete (see [`synchronize`]).
    fn vwrite_device(
        &self,
        src: &DeviceRange,
        remote_off: u64,
        flags: RmaFlags,
    ) -> Result<(), DeviceRmaError>;

    /// Copies `dst.len()` bytes at the peer's `remote_off` into the device bytes `dst`, as
    /// `vread_from` fills host memory; they are in device memory when it returns.
    fn vread_device(
        &self,
        dst: &DeviceRange,
        remote_off: u64,
        flags: RmaFlags,
    ) -> Result<(), DeviceRmaError>;
}

impl<T: Endpoint + ?Sized> DeviceRma for T {
    fn vwrite_device(
        &self,
        src: &DeviceRange,
        remote_off: u64,
        flags: RmaFlags,
    ) -> Result<(), DeviceRmaError> {
        if src.is_empty() {
            // The backend's own rule for empty transfers.
            return Ok(self.vwrite_to(&[], remote_off, flags)?);
        }
        self.check_remote(remote_off, src.len(), Access::WRITE)?;
        // Each chunk needs only to be consumed before its pinned memory is refilled; a
        // synchronous call waits for all of them once, at the end.
        let chunk_flags = RmaFlags {
            sync: false,
            ..flags
        };
        accio_device::with_stager(src.ordinal(), |st| {
            st.drain(src, |at, bytes| {
                self.vwrite_to(bytes, remote_off + at as u64, chunk_flags)
            })
        })??;
        if flags.sync {
            let mark = self.fence_mark()?;
            self.fence_wait(mark)?;
        }
        Ok(())
    }

    fn vread_device(
        &self,
        dst: &DeviceRange,
        remote_off: u64,
        flags: RmaFlags,
    ) -> Result<(), DeviceRmaError> {
        if dst.is_empty() {
            return Ok(self.vread_from(&mut [], remote_off, flags)?);
        }
        self.check_remote(remote_off, dst.len(), Access::READ)?;
        accio_device::with_stager(dst.ordinal(), |st| {
            st.fill(dst, |at, chunk| {
                self.vread_from(chunk, remote_off + at as u64, flags)
            })
        })??;
        Ok(())
    }
}
