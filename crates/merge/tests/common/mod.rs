//! Helpers shared by the merge integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// A folder of its own for the calling test: named after the test binary, this process and
/// the test's thread, created if missing.
pub fn test_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "accio-merge-{}-{}-{}",
        env!("CARGO_CRATE_NAME"),
        std::process::id(),
        std::thread::current()
            .name()
            .unwrap_or("t")
            .replace("::", "-")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `name` in the calling test's folder.
pub fn tmp(name: &str) -> PathBuf {
    test_dir().join(name)
}

/// Deterministic payload of block `seq` of producer `p`, `len` bytes.
pub fn payload(p: u32, seq: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    for (i, b) in v.iter_mut().enumerate() {
        *b = (i as u64 ^ (seq << 8) ^ (u64::from(p) << 16)).wrapping_mul(0x9E37) as u8;
    }
    v
}

/// A producer connected to `addr` under id `id`.
pub fn connect_as(addr: &str, id: u32) -> accio_merge::Producer {
    accio_merge::Producer::connect_with(
        addr,
        accio_merge::ProducerOptions {
            id: Some(id),
            ..Default::default()
        },
    )
    .unwrap()
}

/// Whether this kernel and sandbox give this process a userfaultfd (what inserting pages
/// needs; `UFFD_USER_MODE_ONLY` needs no privilege from Linux 5.11).
pub fn userfaultfd_available() -> bool {
    // SAFETY: a system call with flags only; a descriptor it returns is closed at once.
    unsafe {
        let fd = libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | 1);
        if fd >= 0 {
            libc::close(fd as libc::c_int);
        }
        fd >= 0
    }
}
