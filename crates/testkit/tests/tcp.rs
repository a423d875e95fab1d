//! The conformance suite against the TCP backend (loopback).
accio_testkit::conformance_suite!(tcp, accio_testkit::Backend::tcp());

/// Device windows, with host memory behind the device-memory trait (on a GPU, the same
/// tests run with CUDA memory: `tests/cuda.rs`).
mod device_windows {
    use accio_testkit::{device_window_rejection, device_window_rma, Backend, HostBackedDevice};

    #[test]
    fn rma() {
        device_window_rma(&Backend::tcp(), HostBackedDevice::maker, 64 << 10);
    }

    #[test]
    fn rejection() {
        device_window_rejection(&Backend::tcp(), HostBackedDevice::maker, 4 << 10);
    }

    /// Device memory whose driver fails every copy into it.
    #[derive(Debug)]
    struct Failing(usize);

    impl accio::DeviceMemory for Failing {
        fn len(&self) -> usize {
            self.0
        }
        fn kind(&self) -> &'static str {
            "failing test"
        }
        fn device(&self) -> u32 {
            0
        }
        fn address(&self) -> u64 {
            0
        }
        fn read(&self, _: usize, dst: &mut [u8]) -> accio::Result<()> {
            dst.fill(0);
            Ok(())
        }
        fn write(&self, _: usize, _: &[u8]) -> accio::Result<()> {
            Err(accio::Error::invalid(
                "device write",
                "the test driver fails",
            ))
        }
        fn copy_from(
            &self,
            _: usize,
            _: &dyn accio::DeviceMemory,
            _: usize,
            _: usize,
        ) -> accio::Result<()> {
            Err(accio::Error::invalid(
                "device copy",
                "the test driver fails",
            ))
        }
        fn share(&self) -> accio::Result<accio::DeviceShare> {
            Err(accio::Error::invalid("share", "test memory"))
        }
    }

    /// A device copy that fails at the target is a refused write for the initiator (an
    /// I/O error naming the window), the rest of its payload is consumed, and the
    /// connection goes on.
    #[test]
    fn a_failed_device_copy_at_the_target_is_an_error_and_the_connection_goes_on() {
        let (x, y) = Backend::tcp().pair();
        let len = 9 << 20;
        let w = y
            .register_device(std::sync::Arc::new(Failing(len)), accio::Access::READ_WRITE)
            .unwrap();
        y.send(&w.offset().to_le_bytes()).unwrap();
        let mut m = Vec::new();
        x.recv(&mut m).unwrap();
        let e = x
            .vwrite_to(&vec![7u8; len], w.offset(), accio::RmaFlags::SYNC)
            .unwrap_err();
        assert_eq!(e.kind(), accio::ErrorKind::Io, "{e}");
        assert!(e.to_string().contains("device copy failed"), "{e}");
        x.send(b"after").unwrap();
        y.recv(&mut m).unwrap();
        assert_eq!(m, b"after");
        let mut back = vec![1u8; 4096];
        x.vread_from(&mut back, w.offset(), accio::RmaFlags::SYNC)
            .unwrap();
        assert!(back.iter().all(|&b| b == 0));
    }
}
