//! Device windows in CUDA memory (the testkit's `cuda` feature): the device-window tests of
//! the suite with GPU memory on both sides, over `shm` and `tcp` between threads of this
//! process.
//! Run on the GPU machine by `ci/device.sh`; elsewhere they say "skipped" (no driver, no
//! device, or a build without the feature) and pass. Across processes, `accio bench
//! device` measures and checks the same copies.

use std::sync::Arc;

use accio::device::{DeviceBuffer, CHUNK};
use accio::DeviceMemory;
use accio_testkit::{device_window_rejection, device_window_rma, Backend};

/// `len` bytes on GPU 0, or `None` (said once) where there is no GPU to use.
fn gpu(len: usize) -> Option<Arc<dyn DeviceMemory>> {
    match DeviceBuffer::alloc(0, len) {
        Ok(b) => Some(Arc::new(b)),
        Err(e) if e.is_unavailable() => {
            let text = e.to_string();
            assert!(
                text.starts_with("no CUDA") || text.starts_with("built without"),
                "{text}"
            );
            None
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn rma_with_gpu_windows_over_shm_and_tcp() {
    // Three staging chunks and a piece: both pinned chunks, reused.
    for b in [Backend::shm(), Backend::tcp()] {
        device_window_rma(&b, gpu, 3 * CHUNK + 4099);
    }
}

#[test]
fn refusals_with_gpu_windows_over_shm_and_tcp() {
    for b in [Backend::shm(), Backend::tcp()] {
        device_window_rejection(&b, gpu, 1 << 20);
    }
}
