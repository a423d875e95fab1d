//! GPU memory as the local side of RMA over `shm` and `tcp` ([`accio::device::DeviceRma`]).
//! On a machine with a GPU they run for real (the GPU machine runs this binary:
//! `ci/device.sh`); elsewhere each test checks that the call names the missing driver,
//! device or feature, and says it skipped.

use std::time::Duration;

use accio::device::{device_range, DeviceBuffer, DeviceRma, DeviceRmaError, CHUNK};
use accio::{Access, Endpoint, ErrorKind, RmaFlags, Window};

const TIMEOUT: Duration = Duration::from_secs(10);

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
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 12) as u8)
        .collect()
}

/// A connected pair on `scheme`: (initiator, target).
fn pair(scheme: &str) -> (Box<dyn Endpoint>, Box<dyn Endpoint>) {
    let addr = match scheme {
        "shm" => format!(
            "shm://accio-device-test-{}-{}",
            std::process::id(),
            rand_tag()
        ),
        _ => "tcp://127.0.0.1:0".to_string(),
    };
    let listener = accio::listen(&addr).unwrap();
    let at = listener.local_addr().to_string();
    let t = std::thread::spawn(move || listener.accept(Some(TIMEOUT)).unwrap());
    let init = accio::connect(&at, TIMEOUT).unwrap();
    (init, t.join().unwrap())
}

fn rand_tag() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Registers a window of `len` bytes on `target` with `access`, filled with `seed`'s
/// pattern, and tells `init` of it.
fn window(
    init: &dyn Endpoint,
    target: &dyn Endpoint,
    len: usize,
    access: Access,
    seed: u8,
) -> Window {
    let w = target.register(len, access).unwrap();
    w.write_at(0, &pattern(len, seed)).unwrap();
    target.send(&w.offset().to_le_bytes()).unwrap();
    let mut msg = Vec::new();
    init.recv(&mut msg).unwrap();
    w
}

fn window_bytes(w: &Window) -> Vec<u8> {
    let mut v = vec![0u8; w.len()];
    w.read_at(0, &mut v).unwrap();
    v
}

#[test]
fn device_bytes_reach_a_peer_window_and_come_back_over_shm_and_tcp() {
    // Three chunks and a piece: the pipeline's both chunks, reused.
    let len = 3 * CHUNK + 4099;
    let Some(src) = gpu_buffer(len) else { return };
    let back = DeviceBuffer::alloc(0, len).unwrap();
    let data = pattern(len, 7);
    src.write(0, &data).unwrap();
    for scheme in ["shm", "tcp"] {
        let (init, target) = pair(scheme);
        let wlen = len + 2 * 4096;
        let w = window(&*init, &*target, wlen, Access::READ_WRITE, 1);
        let at = 4096 + 3;
        for flags in [RmaFlags::SYNC, RmaFlags::ASYNC] {
            w.write_at(0, &pattern(wlen, 1)).unwrap();
            init.vwrite_device(&src.range(), w.offset() + at as u64, flags)
                .unwrap_or_else(|e| panic!("{scheme}: vwrite_device: {e}"));
            if !flags.sync {
                let m = init.fence_mark().unwrap();
                init.fence_wait(m).unwrap();
            }
            let mut want = pattern(wlen, 1);
            want[at..at + len].copy_from_slice(&data);
            assert!(
                window_bytes(&w) == want,
                "{scheme} {flags:?}: the window after vwrite_device"
            );
        }

        // A part of the window back into device memory, at an offset of the buffer.
        let part = back.range().sub(5, len - 5).unwrap();
        init.vread_device(&part, w.offset() + at as u64 + 5, RmaFlags::ASYNC)
            .unwrap_or_else(|e| panic!("{scheme}: vread_device: {e}"));
        let mut got = vec![0u8; len - 5];
        back.read(5, &mut got).unwrap();
        assert!(
            got == data[5..],
            "{scheme}: device bytes after vread_device"
        );

        // Through a pointer checked by the driver, as C and Python give them.
        let r = device_range(src.range().ptr() + 1, 100).unwrap();
        init.vwrite_device(&r, w.offset(), RmaFlags::SYNC).unwrap();
        let mut head = vec![0u8; 100];
        w.read_at(0, &mut head).unwrap();
        assert_eq!(
            head,
            data[1..101],
            "{scheme}: 100 bytes from a checked pointer"
        );
    }
}

#[test]
fn a_device_transfer_the_window_refuses_moves_no_byte() {
    let len = 2 * CHUNK;
    let Some(src) = gpu_buffer(len) else { return };
    src.write(0, &pattern(len, 3)).unwrap();
    for scheme in ["shm", "tcp"] {
        let (init, target) = pair(scheme);
        let w = window(&*init, &*target, len, Access::READ_WRITE, 9);
        let ro = window(&*init, &*target, len, Access::READ, 10);
        // One byte past the end: the first chunk would fit, the last not.
        let e = init
            .vwrite_device(&src.range(), w.offset() + 1, RmaFlags::SYNC)
            .unwrap_err();
        assert!(
            matches!(&e, DeviceRmaError::Transport(t) if t.kind() == ErrorKind::OutOfWindow),
            "{scheme}: {e}"
        );
        let e = init
            .vwrite_device(&src.range(), ro.offset(), RmaFlags::SYNC)
            .unwrap_err();
        assert!(
            matches!(&e, DeviceRmaError::Transport(t) if t.kind() == ErrorKind::AccessDenied),
            "{scheme}: {e}"
        );
        let m = init.fence_mark().unwrap();
        init.fence_wait(m).unwrap();
        assert!(
            window_bytes(&w) == pattern(len, 9),
            "{scheme}: window after a refused write"
        );
        assert!(
            window_bytes(&ro) == pattern(len, 10),
            "{scheme}: read-only window"
        );
        // And the reverse: reading past the end leaves the device bytes as they were.
        let e = init
            .vread_device(&src.range(), w.offset() + 8, RmaFlags::SYNC)
            .unwrap_err();
        assert!(matches!(e, DeviceRmaError::Transport(_)), "{scheme}: {e}");
        let mut got = vec![0u8; len];
        src.read(0, &mut got).unwrap();
        assert!(
            got == pattern(len, 3),
            "{scheme}: device bytes after a refused read"
        );
    }
}

/// Host memory is never taken for device memory: the driver's check refuses it (on a
/// machine without a GPU, the check names what is missing).
#[test]
fn host_memory_given_as_device_memory_is_refused_with_its_cause() {
    let host = vec![0u8; 4096];
    let e = device_range(host.as_ptr() as u64, host.len()).unwrap_err();
    let text = e.to_string();
    if e.is_unavailable() {
        assert!(
            text.starts_with("no CUDA") || text.starts_with("built without"),
            "{text}"
        );
        eprintln!("skipped: no CUDA device ({text})");
    } else {
        assert!(text.contains("not CUDA device memory"), "{text}");
    }
}
