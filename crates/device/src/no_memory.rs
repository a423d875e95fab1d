//! Without the `cuda` feature: the device memory types, never made (every constructor
//! answers [`Error::NotBuilt`]), so that callers compile and run unchanged. They are
//! ordinary types rather than empty enums, so that callers' code after a constructor is
//! not unreachable to the compiler; their other methods answer `NotBuilt` (or nothing) too.

use crate::{DeviceRange, Error, Result, Staged};

pub(crate) fn synchronize(_ordinal: u32) -> Result<()> {
    Err(Error::NotBuilt)
}

pub(crate) fn device_range(_ptr: u64, _len: usize) -> Result<DeviceRange> {
    Err(Error::NotBuilt)
}

pub(crate) fn ipc_share(_range: &DeviceRange) -> Result<([u8; 64], u64)> {
    Err(Error::NotBuilt)
}

pub(crate) fn timed_copies(
    _dst: &DeviceRange,
    _src: &DeviceRange,
    _copies: u64,
    _passes: usize,
) -> Result<Vec<f64>> {
    Err(Error::NotBuilt)
}

const NONE: DeviceRange = DeviceRange {
    ordinal: 0,
    ptr: 0,
    len: 0,
};

/// Device memory of one GPU (never made without the `cuda` feature).
#[derive(Debug)]
pub struct DeviceBuffer {
    _never: (),
}

impl DeviceBuffer {
    /// Answers [`Error::NotBuilt`].
    pub fn alloc(_ordinal: u32, _len: usize) -> Result<DeviceBuffer> {
        Err(Error::NotBuilt)
    }

    /// Answers [`Error::NotBuilt`].
    pub fn zeroed(_ordinal: u32, _len: usize) -> Result<DeviceBuffer> {
        Err(Error::NotBuilt)
    }

    /// The whole buffer as a range.
    pub fn range(&self) -> DeviceRange {
        NONE
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        0
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        true
    }

    /// Copies `src` to byte `at` of the buffer.
    pub fn write(&self, _at: usize, _src: &[u8]) -> Result<()> {
        Err(Error::NotBuilt)
    }

    /// Copies bytes from `at` of the buffer into `dst`.
    pub fn read(&self, _at: usize, _dst: &mut [u8]) -> Result<()> {
        Err(Error::NotBuilt)
    }

    /// A CUDA IPC handle for another process.
    pub fn ipc_handle(&self) -> Result<[u8; 64]> {
        Err(Error::NotBuilt)
    }
}

/// Another process's device allocation (never made without the `cuda` feature).
#[derive(Debug)]
pub struct PeerMemory {
    _never: (),
}

impl PeerMemory {
    /// Answers [`Error::NotBuilt`].
    pub fn open(
        _ordinal: u32,
        _handle: &[u8; 64],
        _offset: u64,
        _len: usize,
    ) -> Result<PeerMemory> {
        Err(Error::NotBuilt)
    }

    /// The opened memory.
    pub fn range(&self) -> DeviceRange {
        NONE
    }
}

/// Bytes per staging chunk.
pub const CHUNK: usize = 4 << 20;

/// The pinned staging pipeline (never made without the `cuda` feature).
#[derive(Debug)]
pub struct Stager {
    _never: (),
}

impl Stager {
    /// Answers [`Error::NotBuilt`].
    pub fn new(_ordinal: u32) -> Result<Stager> {
        Err(Error::NotBuilt)
    }

    /// The GPU it copies for.
    pub fn ordinal(&self) -> u32 {
        0
    }

    /// Device → host.
    pub fn to_host(&mut self, _src: &DeviceRange, _dst: &mut [u8]) -> Result<()> {
        Err(Error::NotBuilt)
    }

    /// Device → host, chunk by chunk into `sink`.
    pub fn drain<E>(
        &mut self,
        _src: &DeviceRange,
        _sink: impl FnMut(usize, &[u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), Staged<E>> {
        Err(Staged::Device(Error::NotBuilt))
    }

    /// Host → device, chunk by chunk from `source`.
    pub fn fill<E>(
        &mut self,
        _dst: &DeviceRange,
        _source: impl FnMut(usize, &mut [u8]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), Staged<E>> {
        Err(Staged::Device(Error::NotBuilt))
    }

    /// Host → device.
    pub fn to_device(&mut self, _src: &[u8], _dst: &DeviceRange) -> Result<()> {
        Err(Error::NotBuilt)
    }

    /// Device → device.
    pub fn device_to_device(&mut self, _src: &DeviceRange, _dst: &DeviceRange) -> Result<()> {
        Err(Error::NotBuilt)
    }
}
