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
//! [`Endpoint`] contract of `accio-core`, whose docs specify every call.

use std::time::Duration;

pub use accio_core::*;

/// Binds `addr` (`shm://NAME` or `tcp://HOST:PORT`) and returns a listener.
///
/// TCP listeners bind exactly the host given; use `tcp://127.0.0.1:0` (loopback, ephemeral
/// port) unless the peer is on another host.
pub fn listen(addr: &str) -> Result<Box<dyn Listener>> {
    match addr.parse::<Addr>()? {
        a @ Addr::Shm(_) => Ok(Box::new(accio_shm::ShmListener::bind(&a)?)),
        a @ Addr::Tcp { .. } => Ok(Box::new(accio_tcp::TcpListener::bind(&a)?)),
    }
}

/// Connects to the listener at `addr`, giving up after `timeout`.
pub fn connect(addr: &str, timeout: Duration) -> Result<Box<dyn Endpoint>> {
    match addr.parse::<Addr>()? {
        a @ Addr::Shm(_) => Ok(Box::new(accio_shm::ShmEndpoint::connect(&a, timeout)?)),
        a @ Addr::Tcp { .. } => Ok(Box::new(accio_tcp::TcpEndpoint::connect(&a, timeout)?)),
    }
}

/// The backends this build knows, by scheme.
pub const BACKENDS: &[&str] = &["shm", "tcp"];
