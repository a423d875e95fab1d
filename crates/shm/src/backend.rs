//! The shm backend's registration with the facade: its scheme, listen and connect, and how
//! [`ShmOptions`] reach them through [`Options`].

use std::time::Duration;

use accio_core::{Addr, Backend, BackendOptions, Endpoint, Listener, Options, Result};

use crate::{ShmEndpoint, ShmListener, ShmOptions};

impl BackendOptions for ShmOptions {
    const SCHEME: &'static str = "shm";
}

/// The shm backend, as the facade registers it.
pub const BACKEND: Backend = Backend {
    scheme: "shm",
    summary: "same node, shared memory: zero-copy windows, lock-free message rings",
    listen,
    connect,
};

fn listen(addr: &Addr, opts: &Options) -> Result<Box<dyn Listener>> {
    let o = opts
        .get::<ShmOptions>()
        .cloned()
        .unwrap_or_else(ShmOptions::from_env);
    Ok(Box::new(ShmListener::bind_with(addr, o)?))
}

fn connect(addr: &Addr, timeout: Duration, opts: &Options) -> Result<Box<dyn Endpoint>> {
    let o = opts
        .get::<ShmOptions>()
        .cloned()
        .unwrap_or_else(ShmOptions::from_env);
    Ok(Box::new(ShmEndpoint::connect_with(addr, timeout, o)?))
}
