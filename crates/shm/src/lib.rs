//! shm backend (stub until written).
#![allow(missing_docs)]

use std::time::Duration;

use accio_core::{Addr, Endpoint, Error, Listener, Result};

#[derive(Debug)]
pub struct ShmListener;
#[derive(Debug)]
pub struct ShmEndpoint;

impl ShmListener {
    pub fn bind(_addr: &Addr) -> Result<ShmListener> {
        Err(Error::Unsupported {
            op: "listen",
            backend: "shm",
        })
    }
}

impl ShmEndpoint {
    pub fn connect(_addr: &Addr, _timeout: Duration) -> Result<ShmEndpoint> {
        Err(Error::Unsupported {
            op: "connect",
            backend: "shm",
        })
    }
}

impl Listener for ShmListener {
    fn local_addr(&self) -> &Addr {
        unimplemented!()
    }
    fn accept(&self, _timeout: Option<Duration>) -> Result<Box<dyn Endpoint>> {
        unimplemented!()
    }
}
