//! # accio-shm
//!
//! The shared-memory backend of accio: the [`Endpoint`](accio_core::Endpoint) contract
//! between threads or processes of one node, with RMA that needs no CPU on the peer.
//!
//! ## Design
//!
//! - **Rendezvous**: `shm://NAME` is an abstract Unix socket named after the user and NAME.
//!   It leaves no file behind and vanishes with its process. Any local user can bind any
//!   abstract name, so each side checks the other's user (`SO_PEERCRED`) before anything
//!   else: the connecting side checks the listener before it sends a byte or its ring
//!   memory, the listener checks the connecting process; both admit their own user only,
//!   unless [`ShmOptions::allow_uids`] lists others. The socket stays open as the *control
//!   channel*: window memory and files travel over it (`SCM_RIGHTS`), and its hang-up is
//!   how a survivor learns that a peer was killed.
//! - **Memory**: every shared object is a memfd — no name in `/dev/shm` to guess, collide
//!   with or leak. Its size is sealed, so a peer cannot shrink it under our mapping. It is
//!   freed by the kernel when the last descriptor and mapping go, even after `kill -9`.
//!   A window the peer may only read reaches it as a read-only descriptor (and a fresh
//!   `register`ed one is sealed against writable mappings), so the kernel, not the peer's
//!   good will, keeps the peer's stores out; its owner-only mode (0600) keeps a peer of
//!   another user from reopening it writable.
//! - **Link segment** (created by the connecting side): a header, one window table per side
//!   (so each side checks RMA offsets and rights against the peer's registered windows with
//!   no round trip), and two single-producer single-consumer message rings.
//! - **Messages** go through the rings: one copy in, one copy out, no system call on the
//!   hot path; a waiter spins for [`ShmOptions::spin`] and then sleeps on a futex in shared
//!   memory, which the other side wakes only when the waiter announced itself. Payloads of
//!   1 KiB and more are copied in through the cache or with non-temporal stores, whichever
//!   the host's placement of the two cores favours at the moment ([`ShmStores`]).
//! - **RMA** copies straight between the caller's memory and the peer's window mapping
//!   (mapped on first use): the peer's CPU takes no part, every call completes before it
//!   returns, and fences reduce to memory barriers.
//!
//! All other copies go through [`accio_core::copy_bytes`], which avoids the 4 KiB aliasing
//! penalty of `memcpy` on the machines accio is measured on.

// Built with `--cfg loom` (ci/loom.sh), the crate is only its rings and link, under the
// model checker: the endpoint needs sockets and a real futex, which loom cannot model.
#![cfg_attr(loom, allow(dead_code))]

#[cfg(not(loom))]
mod backend;
#[cfg(not(loom))]
mod endpoint;
mod link;
#[cfg(all(test, loom))]
mod loom_models;
mod ring;
mod stores;
mod sync;
#[cfg(not(loom))]
mod sys;

#[cfg(not(loom))]
pub use backend::BACKEND;
#[cfg(not(loom))]
pub use endpoint::{default_register_limit, PeerUids, ShmEndpoint, ShmListener, ShmOptions};
pub use stores::ShmStores;
