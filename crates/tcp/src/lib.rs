//! tcp backend (stub until written).
#![allow(missing_docs)]

use std::time::Duration;

use accio_core::{Addr, Endpoint, Error, Listener, Result};

#[derive(Debug)]
pub struct TcpListener;
#[derive(Debug)]
pub struct TcpEndpoint;

impl TcpListener {
    pub fn bind(_addr: &Addr) -> Result<TcpListener> {
        Err(Error::Unsupported {
            op: "listen",
            backend: "tcp",
        })
    }
}

impl TcpEndpoint {
    pub fn connect(_addr: &Addr, _timeout: Duration) -> Result<TcpEndpoint> {
        Err(Error::Unsupported {
            op: "connect",
            backend: "tcp",
        })
    }
}

impl Listener for TcpListener {
    fn local_addr(&self) -> &Addr {
        unimplemented!()
    }
    fn accept(&self, _timeout: Option<Duration>) -> Result<Box<dyn Endpoint>> {
        unimplemented!()
    }
}
