//! Requests beyond what the node or the protocol allows fail at once, with an error that
//! names the size and the limit, before any memory is touched.

use std::time::{Duration, Instant};

use accio_core::{Access, Addr, Endpoint, ErrorKind};
use accio_shm::{ShmEndpoint, ShmListener};

fn pair(tag: &str) -> (ShmEndpoint, ShmEndpoint) {
    let addr: Addr = format!("shm://limits-{tag}-{}", std::process::id())
        .parse()
        .expect("address");
    let listener = ShmListener::bind(&addr).expect("bind");
    let server = std::thread::spawn(move || listener.accept_shm(Some(Duration::from_secs(10))));
    let client = ShmEndpoint::connect(&addr, Duration::from_secs(10)).expect("connect");
    (
        client,
        server.join().expect("accept thread").expect("accept"),
    )
}

fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    line[6..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>()
        .expect("kB")
        * 1024
}

/// Finding 9: `register(1 << 46)` pre-faulted until the OOM killer ended another process.
#[test]
fn a_registration_beyond_the_node_fails_before_touching_memory() {
    let (a, _b) = pair("register");
    let before = resident_bytes();
    let start = Instant::now();
    let err = a
        .register(1 << 46, Access::READ_WRITE)
        .expect_err("registered 64 TiB");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "took {:?}",
        start.elapsed()
    );
    assert_eq!(err.kind(), ErrorKind::OutOfMemory, "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&(1u64 << 46).to_string()) && text.contains("ACCIO_SHM_REGISTER_LIMIT"),
        "the error names neither the size nor the way to raise the limit: {text}"
    );
    assert!(
        resident_bytes() < before + (64 << 20),
        "memory was touched: {} -> {} bytes resident",
        before,
        resident_bytes()
    );
    // A sane registration on the same endpoint still works.
    a.register(1 << 20, Access::READ_WRITE).expect("1 MiB");
}

/// Finding 10's shm part: `send` had no overall limit. A message past 4 GiB is refused
/// before a byte of it is read (the slice here is mapped but never touched).
#[test]
fn a_message_beyond_the_limit_is_refused_before_it_is_read() {
    let (a, _b) = pair("send");
    let len = ShmEndpoint::MAX_MESSAGE + 1;
    // SAFETY: an anonymous, never-touched, unreserved mapping of `len` bytes.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap of {len} bytes");
    // SAFETY: the mapping is `len` readable bytes (zero pages, never faulted in by send).
    let huge = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
    let err = a.send(huge).expect_err("sent more than 4 GiB");
    assert_eq!(err.kind(), ErrorKind::MessageTooLarge, "{err}");
    assert!(err.to_string().contains(&len.to_string()), "{err}");
    // SAFETY: unmapping what was mapped above; `huge` is not used after.
    unsafe { libc::munmap(p, len) };
    a.send(b"still fine").expect("a small message after");
}
