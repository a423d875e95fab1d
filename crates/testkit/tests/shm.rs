//! The conformance suite against the shared-memory backend.
accio_testkit::conformance_suite!(shm, accio_testkit::Backend::shm());

/// Device windows, with host memory behind the device-memory trait (on a GPU, the same
/// tests run with CUDA memory: `crates/accio/tests/device.rs`).
mod device_windows {
    use accio_testkit::{device_window_rejection, device_window_rma, Backend, HostBackedDevice};

    #[test]
    fn rma() {
        device_window_rma(&Backend::shm(), HostBackedDevice::maker, 64 << 10);
    }

    #[test]
    fn rejection() {
        device_window_rejection(&Backend::shm(), HostBackedDevice::maker, 4 << 10);
    }
}
