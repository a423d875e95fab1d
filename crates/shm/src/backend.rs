//! The shm backend's registration with the facade: its scheme, listen and connect, and how
//! [`ShmOptions`] reach them through [`Options`].

use std::time::Duration;

use accio_core::{Addr, Backend, BackendOptions, Endpoint, Listener, Options, Result};

use crate::{ShmEndpoint, ShmListener, ShmOptions, ShmStores};

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
    let inner = ShmListener::bind(addr)?;
    Ok(match opts.get::<ShmOptions>() {
        None => Box::new(inner),
        Some(o) => Box::new(Configured {
            inner,
            spin: o.spin,
            stores: o.stores,
        }),
    })
}

fn connect(addr: &Addr, timeout: Duration, opts: &Options) -> Result<Box<dyn Endpoint>> {
    let o = opts
        .get::<ShmOptions>()
        .cloned()
        .unwrap_or_else(ShmOptions::from_env);
    Ok(Box::new(ShmEndpoint::connect_with(addr, timeout, o)?))
}

/// A listener given options: the connecting side chooses the rings, so what the accepting
/// side's options decide is how long its endpoints spin before they sleep and how they
/// store into their rings.
#[derive(Debug)]
struct Configured {
    inner: ShmListener,
    spin: Duration,
    stores: ShmStores,
}

impl Listener for Configured {
    fn local_addr(&self) -> &Addr {
        self.inner.local_addr()
    }

    fn accept(&self, timeout: Option<Duration>) -> Result<Box<dyn Endpoint>> {
        let mut ep = self.inner.accept_shm(timeout)?;
        ep.set_spin(self.spin);
        ep.set_stores(self.stores);
        Ok(Box::new(ep))
    }
}
