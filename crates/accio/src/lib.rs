//! # accio
//!
//! SCIF-style endpoints — connect/accept, messages, registered memory windows, one-sided
//! RMA and fences — over backends chosen by address: `shm://NAME` (same node, zero-copy
//! shared memory) and `tcp://HOST:PORT` (sockets, also across hosts).
//!
//! ```
//! use std::time::Duration;
//! use accio::{Access, RmaFlags};
//!
//! # fn main() -> accio::Result<()> {
//! // The server side: listen, accept, expose a window, tell the peer where it is.
//! let name = format!("shm://doc-example-{}", std::process::id());
//! let listener = accio::listen(&name)?;
//! let server = std::thread::spawn(move || -> accio::Result<Vec<u8>> {
//!     let ep = listener.accept(Some(Duration::from_secs(5)))?;
//!     let window = ep.register(1 << 20, Access::READ_WRITE)?;
//!     ep.send(&window.offset().to_le_bytes())?;
//!     // fence_signal by the peer stores 1 at byte 0 after its data landed.
//!     window.wait_u64(0, 1, Some(Duration::from_secs(5)))?;
//!     let mut data = vec![0u8; 5];
//!     window.read_at(4096, &mut data)?;
//!     Ok(data)
//! });
//!
//! // The client side: connect, learn the window's offset, write into it one-sidedly.
//! let ep = accio::connect(&name, Duration::from_secs(5))?;
//! let mut msg = Vec::new();
//! ep.recv(&mut msg)?;
//! let remote = u64::from_le_bytes(msg[..8].try_into().unwrap());
//! let local = ep.register(8192, Access::READ)?;
//! local.write_at(0, b"hello")?;
//! ep.write_to(local.offset(), 5, remote + 4096, RmaFlags::ASYNC)?;
//! ep.fence_signal(None, Some((remote, 1)))?;
//!
//! assert_eq!(server.join().unwrap()?, b"hello");
//! # Ok(())
//! # }
//! ```
//!
//! The same program runs over TCP by changing the address to `tcp://127.0.0.1:0` (ask the
//! listener for its bound port with [`Listener::local_addr`]).
//!
//! Backends live in their own crates (`accio-shm`, `accio-tcp`) and implement the
//! [`Endpoint`] contract of `accio-core`, whose docs specify every call. Each registers one
//! [`Backend`] in [`REGISTRY`]; [`listen_with`] and [`connect_with`] carry [`Options`] to
//! the backend the address selects, so callers configure a backend without naming its crate.
//!
//! GPU memory (the `cuda` feature): [`Endpoint::register_device`] with a
//! [`device::DeviceBuffer`] makes a device window, which every RMA call reaches over `shm`
//! (CUDA IPC) and `tcp` (pinned staging); [`device::DeviceRma`] makes any device memory the
//! local side of `vwrite`/`vread` on every backend.

use std::time::Duration;

pub use accio_core::*;
pub use accio_shm::{PeerUids, ShmOptions, ShmStores};
pub use accio_tcp::TcpOptions;

/// Every backend this build knows, in the order `accio bench` measures them. Adding a
/// backend is its crate plus one line here. `mpi` is there when built with the `mpi`
/// feature (it serves only ranks that MPI launched).
#[cfg(not(feature = "mpi"))]
pub static REGISTRY: &[Backend] = &[accio_shm::BACKEND, accio_tcp::BACKEND];
/// Every backend this build knows (see the build without the `mpi` feature).
#[cfg(feature = "mpi")]
pub static REGISTRY: &[Backend] = &[accio_shm::BACKEND, accio_tcp::BACKEND, accio_mpi::BACKEND];

pub mod device;

/// The MPI side of the facade: whether MPI launched this process, MPI's own rank and size
/// (`init`, collective), and an allgather for bootstrapping a world.
pub use accio_mpi as mpi;

/// The registered backend serving `scheme`.
pub fn backend(scheme: &str) -> Option<&'static Backend> {
    REGISTRY.iter().find(|b| b.scheme == scheme)
}

/// The schemes of the registered backends (`["shm", "tcp"]`).
pub fn schemes() -> Vec<&'static str> {
    REGISTRY.iter().map(|b| b.scheme).collect()
}

/// Parses `addr` and finds the backend for its scheme.
fn resolve(addr: &str) -> Result<(Addr, &'static Backend)> {
    let a: Addr = addr.parse()?;
    let b = backend(a.scheme()).ok_or_else(|| Error::BadAddress {
        addr: addr.to_string(),
        reason: format!(
            "no backend for scheme {:?} in this build (built in: {}){}",
            a.scheme(),
            schemes().join(", "),
            if a.scheme() == "mpi" {
                "; build accio with `--features mpi` and start the ranks with mpirun"
            } else {
                ""
            }
        ),
    })?;
    Ok((a, b))
}

/// Binds `addr` (`shm://NAME` or `tcp://HOST:PORT`) and returns a listener, with every
/// backend's default options ([`listen_with`] takes options).
///
/// TCP listeners bind exactly the host given; use `tcp://127.0.0.1:0` (loopback, ephemeral
/// port) unless the peer is on another host.
pub fn listen(addr: &str) -> Result<Box<dyn Listener>> {
    listen_with(addr, &Options::default())
}

/// [`listen`] with options, e.g. `Options::new().with(ShmOptions { spin: Duration::ZERO,
/// ..ShmOptions::from_env() })` for endpoints that sleep at once when they wait. Options
/// of a backend the address does not select are ignored.
pub fn listen_with(addr: &str, opts: &Options) -> Result<Box<dyn Listener>> {
    let (a, b) = resolve(addr)?;
    (b.listen)(&a, opts)
}

/// Connects to the listener at `addr`, giving up after `timeout`, with every backend's
/// default options ([`connect_with`] takes options). A listener not bound yet is waited
/// for (tried again from 1 ms to 50 ms apart), so processes may start in any order; after
/// `timeout` with nobody listening the error is a [`ErrorKind::Timeout`] that says so.
pub fn connect(addr: &str, timeout: Duration) -> Result<Box<dyn Endpoint>> {
    connect_with(addr, timeout, &Options::default())
}

/// [`connect`] with options (ring sizes and spin time for shm, credit window and limits for
/// tcp). Options of a backend the address does not select are ignored.
pub fn connect_with(addr: &str, timeout: Duration, opts: &Options) -> Result<Box<dyn Endpoint>> {
    let (a, b) = resolve(addr)?;
    (b.connect)(&a, timeout, opts)
}
