//! The accept thread: waits for producers and hands their endpoints to the progress thread.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use accio::{ErrorKind, Listener};

use super::{Event, Shared};
use crate::error::Result;

/// The merger's listener. Its shm endpoints do not spin: the merger polls many endpoints
/// and probes idle ones for liveness with a zero-timeout receive, which must cost one
/// `poll` system call, not a 50 µs spin.
pub(super) fn bind(addr: &str) -> Result<Box<dyn Listener>> {
    let shm = accio::ShmOptions {
        spin: Duration::ZERO,
        ..accio::ShmOptions::from_env()
    };
    Ok(accio::listen_with(addr, &accio::Options::new().with(shm))?)
}

pub(super) fn accept_main(listener: Box<dyn Listener>, shared: Arc<Shared>) {
    while !shared.closing.load(Ordering::SeqCst) {
        match listener.accept(Some(Duration::from_millis(100))) {
            Ok(ep) => shared.inbox.lock().expect("merger inbox lock").push(ep),
            Err(e) if e.kind() == ErrorKind::Timeout => {}
            Err(e) => {
                shared.handshake_drops.fetch_add(1, Ordering::SeqCst);
                (shared.events)(&Event::Dropped {
                    peer: listener.local_addr().to_string(),
                    reason: format!("handshake failed: {e}"),
                });
                // Avoid a hot loop on a persistent accept error (e.g. out of descriptors).
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}
