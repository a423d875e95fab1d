//! # accio-core
//!
//! The contract every accio transport backend implements, and the pieces they share:
//!
//! - [`Addr`]: `shm://NAME` and `tcp://HOST:PORT` addresses; the scheme picks the backend.
//! - [`Endpoint`] and [`Listener`]: SCIF-style connections with messages, registered
//!   windows, one-sided RMA, fences and direct mapping. The trait docs are the specification.
//! - [`Window`], [`RemoteMap`], [`MemView`], [`Region`]: registered memory and safe access to it;
//!   [`DeviceWindow`] and [`DeviceMemory`]: accelerator memory as a window.
//! - [`WindowTable`] and [`OffsetAllocator`]: the registered-address-space bookkeeping, with
//!   the bounds and rights checks that turn a bad RMA into a precise error.
//! - [`Error`] / [`ErrorKind`]: one typed error for all backends.
//! - [`copy_bytes`]: the copy routine of every data path (it sidesteps 4 KiB aliasing);
//!   [`copy_streaming`], the same with non-temporal stores.
//! - [`Spin`]: how a waiting call spins before it sleeps, handing its core over now and then.
//!
//! Applications normally use the `accio` facade crate, which picks a backend by address.

mod addr;
mod backend;
mod copy;
mod device;
pub mod endpoint;
mod error;
mod memory;
mod patience;
mod registry;
mod spin;
mod types;

pub use addr::Addr;
pub use backend::{Backend, BackendOptions, ConnectFn, ListenFn, Options};
pub use copy::{copy_bytes, copy_slice, copy_streaming};
pub use device::{copy_through_host, DeviceMemory, DeviceShare, DeviceWindow, DEVICE_CHUNK};
pub use endpoint::{Endpoint, Listener};
pub use error::{Error, ErrorKind, Result, Side, WindowDesc};
pub use memory::{huge_pages, reopen, HugePages, MemView, Region, RemoteMap, Window, PAGE};
pub use patience::ListenerWait;
pub use registry::{find_either, EitherWindow, OffsetAllocator, WindowTable, FIRST_OFFSET};
pub use spin::Spin;
pub use types::{Access, Capabilities, Mark, Progress, RmaFlags};
