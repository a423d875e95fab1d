//! The conformance suite against the TCP backend (loopback).
accio_testkit::conformance_suite!(tcp, accio_testkit::Backend::tcp());

/// Device windows, with host memory behind the device-memory trait (on a GPU, the same
/// tests run with CUDA memory: `tests/cuda.rs`).
mod device_windows {
    use accio_testkit::{
        device_copy_failure, device_window_rejection, device_window_rma, Backend, HostBackedDevice,
    };

    #[test]
    fn rma() {
        device_window_rma(&Backend::tcp(), HostBackedDevice::maker, 64 << 10);
    }

    #[test]
    fn rejection() {
        device_window_rejection(&Backend::tcp(), HostBackedDevice::maker, 4 << 10);
    }

    #[test]
    fn a_failed_device_copy_at_the_target_is_an_error_and_the_connection_goes_on() {
        device_copy_failure(&Backend::tcp());
    }
}
