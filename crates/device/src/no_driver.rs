//! Without the `cuda` feature: the same functions as `driver.rs`, each answering
//! [`Error::NotBuilt`], so that callers compile and run unchanged.

use crate::copy::{Test, Way};
use crate::{DeviceInfo, Error, Result};

pub(crate) fn init() -> Result<()> {
    Err(Error::NotBuilt)
}

pub(crate) fn devices() -> Result<Vec<DeviceInfo>> {
    Err(Error::NotBuilt)
}

/// Never made: [`Gpu::open`] fails first.
pub(crate) enum Gpu {}

impl Gpu {
    pub(crate) fn open(_ordinal: u32, _len: usize) -> Result<Gpu> {
        Err(Error::NotBuilt)
    }

    pub(crate) fn memory_copy_gbps(&self) -> Option<f64> {
        match *self {}
    }

    pub(crate) fn l2_bytes(&self) -> Option<u64> {
        match *self {}
    }

    pub(crate) fn pass(&mut self, _test: Test, _size: usize, _copies: u64) -> Result<f64> {
        match *self {}
    }

    pub(crate) fn latency_pass(&mut self, _way: Way, _copies: u64) -> Result<f64> {
        match *self {}
    }

    pub(crate) fn flag_pass(&mut self, _copies: u64) -> Result<f64> {
        match *self {}
    }
}
