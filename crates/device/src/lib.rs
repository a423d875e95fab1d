//! # accio-device
//!
//! The GPU data paths' home: NVIDIA GPUs through the driver API (`libcuda`), by way of
//! [`cudarc`](https://docs.rs/cudarc)'s raw bindings. The driver library is loaded at run
//! time, so that accio builds, and its tests pass, on machines with no CUDA toolkit and no
//! GPU; everything that touches a GPU is behind this crate's cargo feature `cuda`.
//!
//! Every call answers with a typed [`Error`] that names the cause when there is no GPU to
//! reach: [`Error::NotBuilt`] (built without the `cuda` feature), [`Error::NoDriver`]
//! (`libcuda.so.1` is not on this machine), [`Error::NoDevice`] (the driver sees no GPU).
//! Presence of the driver is asked (`cudarc::driver::sys::is_culib_present`) before any
//! other driver call: cudarc's other entry points panic when the library is missing. No
//! panic leaves this crate: driver calls run under `catch_unwind`, and one that panics
//! anyway becomes [`Error::Panicked`].
//!
//! What is here:
//!
//! - [`devices`]: the GPUs the driver sees (ordinal, name, memory, PCI bus id).
//! - [`bench::DeviceBench`]: NVIDIA `nvbandwidth`'s copy-engine method for `accio bench
//!   device`: host→device and device→host (pinned and pageable host memory), both
//!   directions at once, device→device, and host↔device latency (a small copy, and a flag
//!   polled by the GPU in mapped pinned memory), each figure beside its
//!   ceiling (the GPU's PCIe link, or the device memory's own copy rate), and copies from
//!   another process into device memory through CUDA IPC.
//! - Device memory: [`DeviceBuffer`] (an allocation of this process, with its CUDA IPC
//!   handle), [`PeerMemory`] (another process's, opened by that handle), [`device_range`]
//!   (any device pointer, checked with the driver into a [`DeviceRange`]), and [`Stager`]
//!   (two pinned chunks between device memory and any host memory, the copy engine on one
//!   while the CPU copies the other, or a transport sends from or receives into the other:
//!   [`Stager::drain`], [`Stager::fill`]): what `Producer::write_device` in `accio-merge`
//!   and `accio::device::DeviceRma` use; [`with_stager`] lends one from a pool.
//! - Device windows: [`DeviceBuffer`], [`PeerMemory`] and [`ForeignMemory`] (memory of
//!   another library's array) are `accio_core::DeviceMemory`, the memory behind
//!   `Endpoint::register_device`; [`open_shared`] opens a peer's from its CUDA IPC share.
//!
//! ```
//! match accio_device::devices() {
//!     Ok(gpus) => {
//!         for g in gpus {
//!             println!("GPU {}: {} ({} bytes), PCI {}", g.ordinal, g.name, g.memory_bytes, g.pci_bus_id);
//!         }
//!     }
//!     // On a machine without a GPU (or a build without `--features cuda`) the error says
//!     // which: no driver, no device, or the feature not built.
//!     Err(e) => println!("{e}"),
//! }
//! ```

pub mod bench;
pub mod copy;

#[cfg(feature = "cuda")]
mod driver;
#[cfg(not(feature = "cuda"))]
#[path = "no_driver.rs"]
mod driver;

#[cfg(feature = "cuda")]
#[path = "cuda_memory.rs"]
mod memory;
#[cfg(not(feature = "cuda"))]
#[path = "no_memory.rs"]
mod memory;

pub use memory::{DeviceBuffer, PeerMemory, Stager, CHUNK};
pub use window::{open_shared, ForeignMemory, KIND};

mod window;

/// How a staged copy with a host side ([`Stager::drain`], [`Stager::fill`]) failed: on the
/// GPU, or in the caller's host side (a transport's send or receive).
#[derive(Debug)]
pub enum Staged<E> {
    /// A driver call failed (or there is no GPU).
    Device(Error),
    /// The host side returned this error.
    Host(E),
}

impl Staged<std::convert::Infallible> {
    /// The device error of a staged copy whose host side cannot fail.
    pub fn into_device(self) -> Error {
        match self {
            Staged::Device(e) => e,
            Staged::Host(never) => match never {},
        }
    }
}

/// Idle stagers kept per GPU by [`with_stager`]: each holds 2 × [`CHUNK`] of pinned memory.
const POOLED_PER_GPU: usize = 4;

/// Runs `f` with a [`Stager`] for GPU `ordinal` taken from a pool of this process (made
/// when none is idle, and put back after, up to four per GPU): a stager's pinned memory
/// takes milliseconds to allocate, more than staging a few MiB takes.
pub fn with_stager<R>(ordinal: u32, f: impl FnOnce(&mut Stager) -> R) -> Result<R> {
    use std::sync::Mutex;
    static IDLE: Mutex<Vec<Stager>> = Mutex::new(Vec::new());
    let pooled = {
        let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
        idle.iter()
            .position(|s| s.ordinal() == ordinal)
            .map(|i| idle.swap_remove(i))
    };
    let mut stager = match pooled {
        Some(s) => s,
        None => Stager::new(ordinal)?,
    };
    let r = f(&mut stager);
    let mut idle = IDLE.lock().unwrap_or_else(|p| p.into_inner());
    if idle.iter().filter(|s| s.ordinal() == ordinal).count() < POOLED_PER_GPU {
        idle.push(stager);
    }
    Ok(r)
}

/// What went wrong with a GPU call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// This build has no GPU code.
    #[error("built without the cuda feature: cargo build --features cuda")]
    NotBuilt,
    /// The driver library is not installed (no NVIDIA driver on this machine).
    #[error("no CUDA driver: libcuda.so.1 not found (this build loads it at run time)")]
    NoDriver,
    /// The driver is installed and sees no GPU.
    #[error("no CUDA device: the driver ({driver}) found none")]
    NoDevice {
        /// The driver's version, as `cuDriverGetVersion` gives it (`12.8`), or what failed.
        driver: String,
    },
    /// A driver call failed.
    #[error("{call} failed: {name} (CUresult {code})")]
    Driver {
        /// The driver function (`cuMemAlloc`).
        call: &'static str,
        /// The error's name (`CUDA_ERROR_OUT_OF_MEMORY`).
        name: String,
        /// Its number.
        code: u32,
    },
    /// An argument out of range (a bench's, or a copy's bounds).
    #[error("{0}")]
    Argument(String),
    /// An address given as device memory is not (or not all of it): host memory, memory
    /// the driver does not know, or a range past its allocation.
    #[error("{len} bytes at {ptr:#x} are not CUDA device memory: {cause}")]
    NotDeviceMemory {
        /// The address given.
        ptr: u64,
        /// The bytes asked for from it.
        len: usize,
        /// Why (the driver's answer).
        cause: String,
    },
    /// The bench was stopped (Ctrl-C) between two figures.
    #[error("interrupted")]
    Interrupted,
    /// Recording a figure failed (the results file could not be written).
    #[error("recording a figure: {0}")]
    Results(#[from] std::io::Error),
    /// A driver binding panicked (e.g. an entry point missing from an old driver); caught
    /// here so that no panic leaves the crate.
    #[error("the CUDA driver binding panicked: {0}")]
    Panicked(String),
}

impl Error {
    /// Whether the error says there is no GPU to use here (not built, no driver, no
    /// device), as opposed to a GPU call that failed: callers skip the GPU work on these.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::NotBuilt | Error::NoDriver | Error::NoDevice { .. }
        )
    }
}

/// Result of this crate's calls.
pub type Result<T> = std::result::Result<T, Error>;

/// One GPU as the driver sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The driver's ordinal (`cuDeviceGet`).
    pub ordinal: u32,
    /// Product name (`NVIDIA H200`).
    pub name: String,
    /// Device memory in bytes.
    pub memory_bytes: u64,
    /// PCI address in sysfs's spelling (`0000:3b:00.0`, see [`copy::normalize_bus_id`]),
    /// to find its link in `accio info`'s facts.
    pub pci_bus_id: String,
}

/// Bytes of device memory: `len` bytes at device address `ptr` on GPU `ordinal`. Made by
/// [`device_range`] (which asks the driver that the bytes are device memory of one
/// allocation) or by the types that own device memory ([`DeviceBuffer::range`],
/// [`PeerMemory::range`]); its fields are private, so that a range is never made unchecked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRange {
    pub(crate) ordinal: u32,
    pub(crate) ptr: u64,
    pub(crate) len: usize,
}

impl DeviceRange {
    /// The GPU the bytes are on.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// Their device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Their length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `len` bytes from byte `at` of the range, or `None` past its end.
    pub fn sub(&self, at: usize, len: usize) -> Option<DeviceRange> {
        (at.checked_add(len)? <= self.len).then_some(DeviceRange {
            ordinal: self.ordinal,
            ptr: self.ptr + at as u64,
            len,
        })
    }
}

/// Checks with the driver that `len` bytes at `ptr` are CUDA device memory within one
/// allocation (`cuPointerGetAttribute`: memory type, GPU, the allocation's start and size),
/// the way to take a device pointer from C, Python or another library.
///
/// # Errors
///
/// [`Error::NotDeviceMemory`] naming the cause: host memory (pinned or not), an address
/// the driver does not know, a range past its allocation; [`Error::is_unavailable`]
/// errors without a GPU.
pub fn device_range(ptr: u64, len: usize) -> Result<DeviceRange> {
    memory::device_range(ptr, len)
}

/// Waits for all work queued on GPU `ordinal` in its primary context, the one the CUDA
/// runtime (PyTorch, CuPy) uses: before reading an array another library wrote on a stream
/// accio does not know.
pub fn synchronize(ordinal: u32) -> Result<()> {
    memory::synchronize(ordinal)
}

/// Whether GPU calls can work here: `Ok` when this build has the `cuda` feature, the driver
/// library loads and it sees at least one GPU; otherwise the error that says which is
/// missing.
pub fn available() -> Result<()> {
    driver::init()
}

/// The GPUs the driver sees, in ordinal order.
///
/// # Errors
///
/// [`Error::NotBuilt`], [`Error::NoDriver`], [`Error::NoDevice`] when there is no GPU to
/// reach; [`Error::Driver`] when a query fails.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    driver::devices()
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
/// Runs `f`, turning a panic into [`Error::Panicked`] so that none leaves the crate.
pub(crate) fn no_panic<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Err(Error::Panicked(msg))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unavailable_errors_name_their_cause() {
        assert_eq!(
            Error::NoDriver.to_string(),
            "no CUDA driver: libcuda.so.1 not found (this build loads it at run time)"
        );
        assert_eq!(
            Error::NotBuilt.to_string(),
            "built without the cuda feature: cargo build --features cuda"
        );
        assert!(Error::NoDriver.is_unavailable());
        assert!(!Error::Interrupted.is_unavailable());
    }

    #[test]
    fn a_panic_becomes_an_error() {
        let r: Result<()> = no_panic(|| panic!("symbol cuFoo not found"));
        match r {
            Err(Error::Panicked(m)) => assert!(m.contains("cuFoo"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    /// On this machine, for real: without a driver (or without the feature) every call
    /// returns the error that names the cause, and none panics. On a GPU machine the same
    /// calls succeed.
    #[test]
    fn without_a_driver_every_call_names_the_cause() {
        match devices() {
            Ok(gpus) => {
                assert!(!gpus.is_empty());
                eprintln!("skipped: a CUDA device is present ({} GPUs)", gpus.len());
            }
            Err(e) => {
                let text = e.to_string();
                if cfg!(feature = "cuda") {
                    assert!(
                        matches!(e, Error::NoDriver | Error::NoDevice { .. }),
                        "{text}"
                    );
                } else {
                    assert!(matches!(e, Error::NotBuilt), "{text}");
                }
                assert!(text.starts_with("no CUDA") || text.starts_with("built without"));
                let again = available().unwrap_err().to_string();
                assert_eq!(again, text);
            }
        }
    }
}
