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

/// How long one `accept` waits before the thread looks at `closing` again. `Merger::close`
/// joins this thread before it finishes the file, so this bounds what close waits for it
/// (at 100 ms it was up to 100 ms added to every close, and to every merge figure timed
/// through close: a 0.4 s run read as 0.5 s).
const ACCEPT_POLL: Duration = Duration::from_millis(2);

pub(super) fn accept_main(listener: Box<dyn Listener>, shared: Arc<Shared>) {
    while !shared.closing.load(Ordering::SeqCst) {
        match listener.accept(Some(ACCEPT_POLL)) {
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
