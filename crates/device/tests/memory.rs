//! Device memory: allocations, checked ranges and the staging pipeline. On a machine with
//! a GPU they run for real (the GPU machine runs this binary: `ci/device.sh`); elsewhere each
//! test checks that the call names the missing driver, device or feature, and says it
//! skipped.

use accio_device::{device_range, DeviceBuffer, Error, Stager, CHUNK};

/// A buffer on GPU 0, or `None` (printed as skipped) where there is none to use.
fn gpu_buffer(len: usize) -> Option<DeviceBuffer> {
    match DeviceBuffer::alloc(0, len) {
        Ok(b) => Some(b),
        Err(e) if e.is_unavailable() => {
            let text = e.to_string();
            assert!(
                text.starts_with("no CUDA") || text.starts_with("built without"),
                "{text}"
            );
            eprintln!("skipped: no CUDA device ({text})");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(17) ^ seed ^ (i >> 13) as u8)
        .collect()
}

#[test]
fn bytes_go_through_the_staging_chunks_both_ways_unchanged() {
    let max = 3 * CHUNK + 5;
    let Some(buf) = gpu_buffer(max) else { return };
    let mut st = Stager::new(0).unwrap();
    for len in [0, 1, 4095, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, max] {
        let src = pattern(len, len as u8);
        let range = buf.range().sub(0, len).unwrap();
        st.to_device(&src, &range).unwrap();
        let mut back = vec![0u8; len];
        st.to_host(&range, &mut back).unwrap();
        assert!(back == src, "{len} bytes changed on the way");
        // The plain copies agree with the staged ones.
        let mut plain = vec![0u8; len];
        buf.read(0, &mut plain).unwrap();
        assert!(plain == src, "{len} bytes");
    }
    // A device→device copy on the copy engine, into the second half.
    let half = max / 2;
    let (a, b) = (
        buf.range().sub(0, half).unwrap(),
        buf.range().sub(half, half).unwrap(),
    );
    st.device_to_device(&a, &b).unwrap();
    let (mut x, mut y) = (vec![0u8; half], vec![0u8; half]);
    buf.read(0, &mut x).unwrap();
    buf.read(half, &mut y).unwrap();
    assert!(x == y);
}

#[test]
fn device_ranges_are_checked_with_the_driver() {
    let host = vec![0u8; 4096];
    let Some(buf) = gpu_buffer(1 << 20) else {
        // Without a GPU the check itself names the cause.
        let e = device_range(host.as_ptr() as u64, host.len()).unwrap_err();
        assert!(e.is_unavailable(), "{e}");
        return;
    };
    let r = buf.range();
    // The whole allocation and a piece of it are device memory of GPU 0.
    assert_eq!(device_range(r.ptr(), r.len()).unwrap(), r);
    let piece = device_range(r.ptr() + 4096, 8192).unwrap();
    assert_eq!((piece.ordinal(), piece.len()), (0, 8192));
    // Host memory, a range past the allocation, and an address nobody allocated are
    // refused with the cause.
    let cases = [
        (host.as_ptr() as u64, 16, ""),
        (r.ptr() + 4096, r.len(), "runs past its allocation"),
        (r.ptr(), usize::MAX, "runs past its allocation"),
        (8, 8, "does not know the address"),
    ];
    for (ptr, len, cause) in cases {
        match device_range(ptr, len) {
            Err(e @ Error::NotDeviceMemory { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains(cause) && text.contains("not CUDA device memory"),
                    "{text}"
                );
            }
            other => panic!("{ptr:#x}+{len}: {other:?}"),
        }
    }
    // Out of bounds on a buffer's own copies, and lengths that disagree, are errors.
    assert!(buf.write(r.len() - 1, &[1, 2]).is_err());
    assert!(buf.read(usize::MAX, &mut [0u8; 1]).is_err());
    let mut st = Stager::new(0).unwrap();
    assert!(st.to_host(&r, &mut [0u8; 10]).is_err());
    assert!(r.sub(r.len(), 1).is_none());
    assert!(r.sub(1, usize::MAX).is_none());
}
