//! The tcp backend's registration with the facade: its scheme, listen and connect, and how
//! [`TcpOptions`] reach them through [`Options`].

use std::time::Duration;

use accio_core::{Addr, Backend, BackendOptions, Endpoint, Listener, Options, Result};

use crate::{TcpEndpoint, TcpListener, TcpOptions};

impl BackendOptions for TcpOptions {
    const SCHEME: &'static str = "tcp";
}

/// The tcp backend, as the facade registers it.
pub const BACKEND: Backend = Backend {
    scheme: "tcp",
    summary: "sockets: the baseline, and the way across hosts",
    listen,
    connect,
};

fn options(opts: &Options) -> TcpOptions {
    opts.get::<TcpOptions>().cloned().unwrap_or_default()
}

fn listen(addr: &Addr, opts: &Options) -> Result<Box<dyn Listener>> {
    Ok(Box::new(TcpListener::bind_with(addr, options(opts))?))
}

fn connect(addr: &Addr, timeout: Duration, opts: &Options) -> Result<Box<dyn Endpoint>> {
    Ok(Box::new(TcpEndpoint::connect_with(
        addr,
        timeout,
        options(opts),
    )?))
}
