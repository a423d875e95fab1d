//! # accio-tcp
//!
//! The TCP backend of accio: the [`Endpoint`](accio_core::Endpoint) contract over one TCP
//! connection, between processes on one node or across nodes.
//!
//! ```
//! use std::time::Duration;
//! use accio_core::{Access, Endpoint, Listener, RmaFlags};
//! use accio_tcp::{TcpEndpoint, TcpListener};
//!
//! # fn main() -> accio_core::Result<()> {
//! let listener = TcpListener::bind(&"tcp://127.0.0.1:0".parse()?)?;
//! let addr = listener.local_addr().clone(); // the real port
//! let server = std::thread::spawn(move || -> accio_core::Result<Vec<u8>> {
//!     let ep = listener.accept_tcp(Some(Duration::from_secs(5)))?;
//!     let window = ep.register(4096, Access::WRITE)?;
//!     ep.send(&window.offset().to_le_bytes())?;
//!     window.wait_u64(8, 1, Some(Duration::from_secs(5)))?; // the peer's fence_signal
//!     let mut data = vec![0u8; 5];
//!     window.read_at(0, &mut data)?;
//!     Ok(data)
//! });
//! let ep = TcpEndpoint::connect(&addr, Duration::from_secs(5))?;
//! let mut msg = Vec::new();
//! ep.recv(&mut msg)?;
//! let remote = u64::from_le_bytes(msg[..8].try_into().unwrap());
//! ep.vwrite_to(b"hello", remote, RmaFlags::ASYNC)?;
//! ep.fence_signal(None, Some((remote + 8, 1)))?;
//! assert_eq!(server.join().unwrap()?, b"hello");
//! # Ok(())
//! # }
//! ```
//!
//! ## Design
//!
//! - **Connection**: plain TCP with `TCP_NODELAY` (messages are latency-bound one by one;
//!   large ones are written in one call anyway). A listener binds exactly the host it is
//!   given. Both sides first exchange a greeting (magic, protocol version, largest
//!   accepted message, message credit, a random challenge), so a peer that is not accio is
//!   refused with a protocol error instead of being fed frames.
//! - **Authentication** ([`auth`]): in the greeting each side proves, with an HMAC over
//!   both challenges, that it holds the shared secret (`ACCIO_TCP_SECRET`, a key file, or
//!   the per-user key file made on first use); a peer that cannot is refused on both
//!   sides before any endpoint traffic, a listener too (another user squatting the port).
//!   It costs one round trip per connection and nothing per message; it neither encrypts
//!   nor protects the stream from whoever is on the network path.
//! - **Framing** ([`frame`]): every frame is a fixed 40-byte little-endian header and,
//!   for messages, writes and read data, a payload. Headers from the network are
//!   validated completely — kind, flags, every length against the limits — before any
//!   memory is allocated or addressed on their word; a bad frame closes the connection
//!   with [`Error::Protocol`](accio_core::Error::Protocol). A fuzz target (`fuzz/`)
//!   covers the decoder and the stream parser.
//! - **RMA over the stream**: TCP gives no access to the peer's memory, so RMA is
//!   carried as frames and applied in stream order by whoever reads the peer's socket:
//!   a caller that waits (`recv`, a fence, `read_from`) reads it itself — a bounded
//!   spin on non-blocking reads ([`TcpOptions::spin`]), then `poll` — so its answer costs
//!   no thread hand-off; while no caller waits, the endpoint's **reader thread** does,
//!   asleep in `poll` between frames. One holder at a time reads a frame whole (see
//!   `progress::rx`). Frames are applied in stream order, which gives fences their meaning: an ack for
//!   sequence number *n* means every RMA up to *n* has been applied. Each side keeps a
//!   mirror of the peer's window table from register/unregister notices, so a bad RMA
//!   fails at the caller before anything is sent; the peer checks again (a lying peer
//!   cannot reach outside a window) and reports refusals, which surface at the next
//!   fence or synchronous call. Answers the reader owes the peer (acks, read data) are
//!   sent by a second, usually idle **responder thread**, so that a reader never blocks
//!   writing — two readers blocked on each other's full socket would deadlock.
//! - **Copies**: a sender writes the header and the payload (from the caller's slice or
//!   straight from window memory) with one gathered `sendmsg`, no staging. The reader
//!   reads a payload straight into its final place — the message buffer handed to
//!   `recv`, the target window, the `read_from` destination — with a scatter read whose
//!   second buffer catches the next header, so a large payload crosses from the kernel
//!   once. Small frames are read ahead in bulk into a staging buffer and copied out of it,
//!   one system call for many frames. Buffers returned by `recv` are recycled, so steady
//!   receiving allocates nothing.
//! - **Flow control**: messages, and only messages, are flow-controlled by credit: each
//!   side grants the other a window of message bytes ([`TcpOptions::recv_queue_bytes`]),
//!   `send` waits and `try_send` would block when it is spent, and `recv` returns credit.
//!   So the reader never stops reading: RMA, signals and fences are applied whether or
//!   not the peer's application receives its messages (stopping the reader instead would
//!   let unreceived messages hold up one-sided operations — a deadlock for a peer that
//!   waits on a signal word before it calls `recv`). The receiver checks the credit before
//!   it allocates a message, so a peer that ignores it is a protocol error.
//! - **Failure**: end of stream, a reset or a failed send ends the connection for every
//!   call at once ([`Error::PeerGone`](accio_core::Error::PeerGone)); sends use
//!   `MSG_NOSIGNAL`, so a dead peer never raises `SIGPIPE`.

pub mod auth;
mod backend;
mod conn;
mod endpoint;
pub mod frame;
mod options;
mod progress;
mod sys;

pub use backend::BACKEND;
pub use conn::TcpListener;
pub use endpoint::TcpEndpoint;
pub use options::TcpOptions;
