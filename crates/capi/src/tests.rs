//! Unit tests of the C API, called as C calls it: raw pointers in, statuses out.

use std::ffi::{CStr, CString};
use std::ptr;

use crate::accio_status::*;
use crate::*;

fn last_error() -> String {
    // SAFETY: accio_last_error_message returns a valid NUL-terminated string.
    unsafe { CStr::from_ptr(accio_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

fn unique(tag: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "accio-capi-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A raw pointer that may cross to a test thread (the C API's handles are thread-safe
/// where the docs say so).
struct Send_<T>(T);
// SAFETY: used only for handles the API documents as usable from any thread.
unsafe impl<T> Send for Send_<T> {}

#[test]
fn header_is_fresh() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config =
        cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    let path = format!("{dir}/include/accio.h");
    if std::env::var_os("ACCIO_UPDATE_HEADER").is_some() {
        std::fs::write(&path, &out).expect("writing accio.h");
    }
    let current = std::fs::read(&path).unwrap_or_default();
    assert!(
        current == out,
        "{path} is stale: regenerate it with `ACCIO_UPDATE_HEADER=1 cargo test --release -p \
         accio-capi header_is_fresh` and commit it"
    );
}

/// The header must compile as strict C and as C++ (a name used both as a type and a
/// function, say, is fine in Rust and an error in C).
#[test]
fn header_compiles_as_c_and_cpp() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let include = format!("{dir}/include");
    let hpp = format!("{dir}/../../bindings/c/include");
    let runs: [(&str, &[&str]); 2] = [
        (
            "cc",
            &[
                "-std=c99",
                "-pedantic",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-x",
                "c",
            ],
        ),
        (
            "c++",
            &["-std=c++17", "-Wall", "-Wextra", "-Werror", "-x", "c++"],
        ),
    ];
    for (compiler, flags) in runs {
        let header = if compiler == "cc" {
            "accio.h"
        } else {
            "accio.hpp"
        };
        let status = std::process::Command::new(compiler)
            .args(flags)
            .args(["-fsyntax-only", "-I", &include, "-I", &hpp, "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write as _;
                c.stdin.take().expect("piped").write_all(
                    format!("#include <{header}>\nint main(void) {{ return 0; }}\n").as_bytes(),
                )?;
                c.wait()
            });
        match status {
            Ok(s) => assert!(
                s.success(),
                "{header} does not compile with {compiler} {flags:?}"
            ),
            Err(e) if std::env::var_os("ACCIO_REQUIRE_PEER_TOOLS").is_none() => {
                eprintln!("skipping the {compiler} check of {header}: {e}");
            }
            Err(e) => panic!("{compiler} is needed to check {header}: {e}"),
        }
    }
}

#[test]
fn null_and_wrong_handles_are_refused_with_a_status() {
    let mut ep: *mut accio_endpoint = ptr::null_mut();
    // SAFETY: deliberately NULL arguments; the API must refuse them.
    unsafe {
        assert_eq!(
            accio_endpoint_connect(ptr::null(), 10, &mut ep),
            ACCIO_NULL_POINTER
        );
        assert_eq!(last_error(), "accio_endpoint_connect: addr is NULL");
        assert_eq!(
            accio_endpoint_connect(c"shm://x".as_ptr(), 10, ptr::null_mut()),
            ACCIO_NULL_POINTER
        );
        assert_eq!(
            accio_endpoint_send(ptr::null(), ptr::null(), 0),
            ACCIO_NULL_POINTER
        );
        assert!(
            last_error().contains("accio_endpoint is NULL"),
            "{}",
            last_error()
        );
        assert_eq!(accio_endpoint_destroy(ptr::null_mut()), ACCIO_OK);
        assert_eq!(
            accio_endpoint_connect(c"nope://x".as_ptr(), 10, &mut ep),
            ACCIO_BAD_ADDRESS
        );
        assert!(last_error().contains("nope://x"), "{}", last_error());
        assert!(ep.is_null(), "a failed call stores nothing");
    }

    // A listener passed where an endpoint is expected.
    let addr = CString::new(format!("shm://{}", unique("wrong"))).unwrap();
    let mut l: *mut accio_listener = ptr::null_mut();
    // SAFETY: valid arguments, then a listener handle misused as an endpoint handle.
    unsafe {
        assert_eq!(accio_listener_create(addr.as_ptr(), &mut l), ACCIO_OK);
        let wrong = l as *const accio_endpoint;
        assert_eq!(
            accio_endpoint_send(wrong, b"x".as_ptr(), 1),
            ACCIO_INVALID_HANDLE
        );
        assert!(
            last_error().contains("not a live accio_endpoint"),
            "{}",
            last_error()
        );
        // Unknown flags and rights are refused by name.
        let mut out = ptr::null_mut();
        assert_eq!(
            accio_listener_accept(l, 10, &mut out),
            ACCIO_TIMEOUT,
            "{}",
            last_error()
        );
        assert_eq!(accio_listener_destroy(l), ACCIO_OK);
    }
    // SAFETY: static strings.
    unsafe {
        assert_eq!(
            CStr::from_ptr(accio_status_name(ACCIO_OUT_OF_WINDOW as _)).to_str(),
            Ok("ACCIO_OUT_OF_WINDOW")
        );
        assert_eq!(
            CStr::from_ptr(accio_status_name(99)).to_str(),
            Ok("ACCIO_UNKNOWN_STATUS")
        );
        assert_eq!(
            CStr::from_ptr(accio_version()).to_str(),
            Ok(env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn messages_windows_rma_and_fence_signal() {
    let name = CString::new(format!("shm://{}", unique("rma"))).unwrap();
    let mut l: *mut accio_listener = ptr::null_mut();
    // SAFETY: valid arguments throughout; handles are destroyed once at the end.
    unsafe {
        assert_eq!(
            accio_listener_create(name.as_ptr(), &mut l),
            ACCIO_OK,
            "{}",
            last_error()
        );
        let mut addr = [0 as std::ffi::c_char; 8];
        let mut len = 0usize;
        assert_eq!(
            accio_listener_addr(l, addr.as_mut_ptr(), addr.len(), &mut len),
            ACCIO_BUFFER_TOO_SMALL
        );
        assert_eq!(len, name.as_bytes().len());

        let lh = Send_(l);
        let server = std::thread::spawn(move || {
            let lh = lh;
            let mut ep: *mut accio_endpoint = ptr::null_mut();
            assert_eq!(
                accio_listener_accept(lh.0, 5000, &mut ep),
                ACCIO_OK,
                "{}",
                last_error()
            );
            let mut w: *mut accio_window = ptr::null_mut();
            assert_eq!(
                accio_window_register(ep, 1 << 16, ACCIO_ACCESS_READ_WRITE, &mut w),
                ACCIO_OK
            );
            let mut off = 0u64;
            assert_eq!(accio_window_offset(w, &mut off), ACCIO_OK);
            assert_eq!(
                accio_endpoint_send(ep, off.to_le_bytes().as_ptr(), 8),
                ACCIO_OK
            );
            // The peer's fence_signal stores 7 at byte 0 after its data landed.
            assert_eq!(
                accio_window_wait_u64(w, 0, 7, 5000),
                ACCIO_OK,
                "{}",
                last_error()
            );
            let (mut p, mut n) = (ptr::null_mut(), 0usize);
            assert_eq!(accio_window_memory(w, &mut p, &mut n), ACCIO_OK);
            assert_eq!(n, 1 << 16);
            let got = std::slice::from_raw_parts(p.add(4096), 5).to_vec();
            // A message longer than the buffer is kept for the next call.
            let mut small = [0u8; 2];
            let mut mlen = 0usize;
            assert_eq!(
                accio_endpoint_recv(ep, small.as_mut_ptr(), 2, &mut mlen, 5000),
                ACCIO_BUFFER_TOO_SMALL
            );
            assert_eq!(mlen, 5);
            let mut big = [0u8; 16];
            assert_eq!(
                accio_endpoint_recv(ep, big.as_mut_ptr(), 16, &mut mlen, 5000),
                ACCIO_OK
            );
            assert_eq!(&big[..mlen], b"bye!!");
            assert_eq!(accio_window_destroy(w), ACCIO_OK);
            assert_eq!(accio_endpoint_destroy(ep), ACCIO_OK);
            got
        });

        let mut ep: *mut accio_endpoint = ptr::null_mut();
        assert_eq!(
            accio_endpoint_connect(name.as_ptr(), 5000, &mut ep),
            ACCIO_OK,
            "{}",
            last_error()
        );
        let mut msg = [0u8; 8];
        let mut mlen = 0usize;
        assert_eq!(
            accio_endpoint_recv(ep, msg.as_mut_ptr(), 8, &mut mlen, 5000),
            ACCIO_OK
        );
        assert_eq!(mlen, 8);
        let remote = u64::from_le_bytes(msg);
        let mut local: *mut accio_window = ptr::null_mut();
        assert_eq!(
            accio_window_register(ep, 8192, ACCIO_ACCESS_READ, &mut local),
            ACCIO_OK
        );
        let (mut p, mut n) = (ptr::null_mut(), 0usize);
        assert_eq!(accio_window_memory(local, &mut p, &mut n), ACCIO_OK);
        ptr::copy_nonoverlapping(b"hello".as_ptr(), p, 5);
        let mut loff = 0;
        assert_eq!(accio_window_offset(local, &mut loff), ACCIO_OK);
        // Out of the peer's window: refused before any byte moves, with the window named.
        assert_eq!(
            accio_endpoint_write_to(ep, loff, 5, remote + (1 << 16) - 2, 0),
            ACCIO_OUT_OF_WINDOW
        );
        assert!(last_error().contains("does not cover"), "{}", last_error());
        assert_eq!(
            accio_endpoint_write_to(ep, loff, 5, remote, 0x10),
            ACCIO_INVALID_ARGUMENT
        );
        assert_eq!(
            accio_endpoint_write_to(ep, loff, 5, remote + 4096, 0),
            ACCIO_OK
        );
        // vwrite_to from unregistered memory, then read both back one-sidedly.
        assert_eq!(
            accio_endpoint_vwrite_to(ep, b"world".as_ptr(), 5, remote + 8192, ACCIO_RMA_SYNC),
            ACCIO_OK
        );
        let mut back = [0u8; 5];
        assert_eq!(
            accio_endpoint_vread_from(ep, back.as_mut_ptr(), 5, remote + 8192, 0),
            ACCIO_OK
        );
        assert_eq!(&back, b"world");
        assert_eq!(
            accio_endpoint_read_from(ep, loff + 16, 5, remote + 8192, 0),
            ACCIO_OK
        );
        assert_eq!(std::slice::from_raw_parts(p.add(16), 5), b"world");
        let mut mark = 0;
        assert_eq!(accio_endpoint_fence_mark(ep, &mut mark), ACCIO_OK);
        assert_eq!(accio_endpoint_fence_wait(ep, mark), ACCIO_OK);
        // A mark this endpoint never issued is refused, naming it and the latest one.
        for bad in [mark + 1, 12345 + mark, u64::MAX] {
            assert_eq!(
                accio_endpoint_fence_wait(ep, bad),
                ACCIO_INVALID_ARGUMENT,
                "fence_wait({bad})"
            );
            let e = last_error();
            assert!(
                e.contains(&format!("mark {bad} ")) && e.contains(&format!("latest is {mark}")),
                "{e}"
            );
        }
        assert_eq!(accio_endpoint_fence_wait(ep, 0), ACCIO_OK, "an older mark");
        let bad = accio_signal {
            offset: remote + 3,
            value: 7,
        };
        assert_eq!(
            accio_endpoint_fence_signal(ep, ptr::null(), &bad),
            ACCIO_INVALID_ARGUMENT
        );
        let sig = accio_signal {
            offset: remote,
            value: 7,
        };
        assert_eq!(
            accio_endpoint_fence_signal(ep, ptr::null(), &sig),
            ACCIO_OK,
            "{}",
            last_error()
        );
        // Unregistered, the window refuses RMA; its handle and memory stay usable.
        assert_eq!(accio_window_unregister(ep, local), ACCIO_OK);
        assert_eq!(
            accio_endpoint_write_to(ep, loff, 5, remote, 0),
            ACCIO_OUT_OF_WINDOW
        );
        assert_eq!(std::slice::from_raw_parts(p, 5), b"hello");
        assert_eq!(accio_endpoint_send(ep, b"bye!!".as_ptr(), 5), ACCIO_OK);
        assert_eq!(server.join().unwrap(), b"hello");
        assert_eq!(accio_window_destroy(local), ACCIO_OK);
        // The peer is gone: a blocked receive says so.
        assert_eq!(
            accio_endpoint_recv(ep, msg.as_mut_ptr(), 8, &mut mlen, 5000),
            ACCIO_PEER_GONE
        );
        assert_eq!(accio_endpoint_destroy(ep), ACCIO_OK);
        assert_eq!(accio_listener_destroy(l), ACCIO_OK);
    }
}

#[test]
fn producers_write_one_merged_file_that_reads_back() {
    let dir = std::env::temp_dir();
    let path = dir.join(format!("{}.accio", unique("merge")));
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    let addr = CString::new(format!("shm://{}", unique("merge"))).unwrap();
    const THREADS: u32 = 4;
    const BLOCKS: u64 = 5;
    let opts = accio_merger_options {
        budget: 4 << 20,
        slot_bytes: 64 << 10,
        ..Default::default()
    };
    let mut m: *mut accio_merger = ptr::null_mut();
    // SAFETY: valid arguments throughout; each handle is used by one thread and freed once.
    unsafe {
        assert_eq!(
            accio_merger_create(addr.as_ptr(), cpath.as_ptr(), &opts, &mut m),
            ACCIO_OK,
            "{}",
            last_error()
        );
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let addr = addr.clone();
                std::thread::spawn(move || {
                    let o = accio_producer_options {
                        use_id: 1,
                        id: t,
                        timeout_ms: 5000,
                    };
                    let mut p: *mut accio_producer = ptr::null_mut();
                    assert_eq!(
                        accio_producer_connect(addr.as_ptr(), &o, &mut p),
                        ACCIO_OK,
                        "{}",
                        last_error()
                    );
                    for b in 0..BLOCKS {
                        let (mut data, mut cap) = (ptr::null_mut(), 0usize);
                        assert_eq!(accio_producer_buffer(p, &mut data, &mut cap), ACCIO_OK);
                        assert_eq!(cap, 64 << 10);
                        // Other calls wait for the buffer to be committed.
                        assert_eq!(
                            accio_producer_write(p, b"x".as_ptr(), 1, ptr::null_mut()),
                            ACCIO_INVALID_ARGUMENT
                        );
                        let text = format!("thread {t} block {b}");
                        ptr::copy_nonoverlapping(text.as_ptr(), data, text.len());
                        let mut seq = u64::MAX;
                        assert_eq!(accio_producer_commit(p, text.len(), &mut seq), ACCIO_OK);
                        assert_eq!(seq, 2 * b);
                        assert_eq!(
                            accio_producer_write(p, [t as u8; 100].as_ptr(), 100, &mut seq),
                            ACCIO_OK
                        );
                        assert_eq!(seq, 2 * b + 1);
                    }
                    assert_eq!(
                        accio_producer_commit(p, 1, ptr::null_mut()),
                        ACCIO_INVALID_ARGUMENT
                    );
                    let big = vec![0u8; (64 << 10) + 1];
                    assert_eq!(
                        accio_producer_write(p, big.as_ptr(), big.len(), ptr::null_mut()),
                        ACCIO_TOO_LARGE
                    );
                    let mut s = accio_producer_summary::default();
                    assert_eq!(
                        accio_producer_finish(p, &mut s),
                        ACCIO_OK,
                        "{}",
                        last_error()
                    );
                    assert_eq!(
                        (s.id, s.blocks, s.bytes),
                        (
                            t,
                            2 * BLOCKS,
                            BLOCKS * 100
                                + (0..BLOCKS)
                                    .map(|b| format!("thread {t} block {b}").len() as u64)
                                    .sum::<u64>()
                        )
                    );
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(accio_merger_wait_done(m, THREADS as usize, 5000), ACCIO_OK);
        let mut st = accio_merger_counters::default();
        assert_eq!(accio_merger_stats(m, &mut st), ACCIO_OK);
        assert_eq!(
            (st.active, st.finished, st.lost),
            (0, u64::from(THREADS), 0)
        );
        assert_eq!(st.blocks, u64::from(THREADS) * 2 * BLOCKS);
        let mut s = accio_merge_summary::default();
        assert_eq!(accio_merger_close(m, &mut s), ACCIO_OK, "{}", last_error());
        assert_eq!(s.blocks, u64::from(THREADS) * 2 * BLOCKS);
        assert_eq!(
            (s.producers_finished, s.producers_lost),
            (u64::from(THREADS), 0)
        );

        let mut r: *mut accio_reader = ptr::null_mut();
        assert_eq!(accio_reader_open(cpath.as_ptr(), &mut r), ACCIO_OK);
        let mut v = accio_verification::default();
        assert_eq!(accio_reader_verify(r, &mut v), ACCIO_OK);
        assert_eq!(
            (v.blocks, v.producers, v.problems),
            (s.blocks, u64::from(THREADS), 0)
        );
        let mut count = 0;
        assert_eq!(accio_reader_block_count(r, &mut count), ACCIO_OK);
        let mut seen = 0;
        for i in 0..count {
            let mut info = accio_block_info::default();
            assert_eq!(accio_reader_block(r, i, &mut info), ACCIO_OK);
            let mut buf = vec![0u8; info.len as usize];
            let mut n = 0;
            assert_eq!(
                accio_reader_read(r, i, buf.as_mut_ptr(), buf.len(), &mut n),
                ACCIO_OK
            );
            if info.seq % 2 == 0 {
                assert_eq!(
                    buf,
                    format!("thread {} block {}", info.producer, info.seq / 2).as_bytes()
                );
                seen += 1;
            } else {
                assert_eq!(buf, vec![info.producer as u8; 100]);
            }
        }
        assert_eq!(seen, THREADS as usize * BLOCKS as usize);
        let mut info = accio_block_info::default();
        assert_eq!(
            accio_reader_block(r, count, &mut info),
            ACCIO_INVALID_ARGUMENT
        );
        assert!(
            last_error().contains(&format!("the file has {count} blocks")),
            "{}",
            last_error()
        );
        assert_eq!(accio_reader_destroy(r), ACCIO_OK);
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_panic_becomes_a_status_and_a_message() {
    let s = guard("accio_test_call", || panic!("boom {}", 42));
    assert_eq!(s, ACCIO_PANIC);
    assert_eq!(
        last_error(),
        "accio_test_call: internal error (a bug in accio): boom 42"
    );
    // The message is per thread: another thread's failure does not replace it.
    std::thread::spawn(|| {
        assert_eq!(last_error(), "");
        guard("other", || Err(Failure::invalid("other", "x")))
    })
    .join()
    .unwrap();
    assert!(last_error().starts_with("accio_test_call"));
}

/// The isize::MAX text every refusal of a too-large length carries.
const ISIZE_LIMIT: &str = "isize::MAX = 9223372036854775807";

/// Asserts `status` is `ACCIO_INVALID_ARGUMENT` and this thread's message names the call,
/// the length argument and `limit`.
fn assert_refused(status: accio_status, op: &str, arg: &str, limit: &str) {
    let msg = last_error();
    assert_eq!(status, ACCIO_INVALID_ARGUMENT, "{op}: {msg}");
    assert!(msg.starts_with(&format!("{op}: ")), "{msg}");
    assert!(msg.contains(&format!("{arg} = ")), "{msg}");
    assert!(msg.contains(limit), "{msg}");
}

#[test]
fn lengths_past_isize_max_or_the_address_space_are_refused_not_sliced() {
    let buf = [0u8; 64];
    let at = buf.as_ptr() as usize;
    assert!(check_len("op", "data", "len", at, 64).is_ok());
    let past = (1usize << 57) - at + 1;
    for (len, limit) in [
        (usize::MAX, ISIZE_LIMIT.to_string()),
        (isize::MAX as usize + 1, ISIZE_LIMIT.to_string()),
        (past, format!("{:#x}", 1usize << 57)),
    ] {
        let f = check_len("op", "data", "len", at, len).unwrap_err();
        assert_eq!(f.status, ACCIO_INVALID_ARGUMENT);
        assert!(f.message.contains(&limit), "{}", f.message);
    }
    // A range that would wrap around the end of the address space.
    let f = check_len("op", "data", "len", usize::MAX - 10, 100).unwrap_err();
    assert!(f.message.contains("ends past the end"), "{}", f.message);
}

/// Asserts the status and message of host memory given as device memory: unsupported
/// without a driver or GPU (the message names which), an invalid argument on a GPU machine
/// (the driver does not know the address); the message starts with `prefix`.
#[track_caller]
fn assert_not_device_memory(s: accio_status, prefix: &str) {
    assert!(
        s == ACCIO_UNSUPPORTED || s == ACCIO_INVALID_ARGUMENT,
        "{s:?}: {}",
        last_error()
    );
    let e = last_error();
    assert!(
        e.starts_with(prefix)
            && (e.contains("no CUDA")
                || e.contains("built without")
                || e.contains("not CUDA device memory")),
        "{e}"
    );
}

/// Every entry that takes a pointer and a length, over shm and tcp: SIZE_MAX and huge
/// lengths fail with ACCIO_INVALID_ARGUMENT (before: SIGSEGV in accio_endpoint_send over
/// shm), nothing is sent, and the connection still works afterwards.
#[test]
fn huge_lengths_on_an_endpoint_fail_cleanly_and_send_nothing() {
    for base in [
        format!("shm://{}", unique("len")),
        "tcp://127.0.0.1:0".into(),
    ] {
        let name = CString::new(base.clone()).unwrap();
        let mut l: *mut accio_listener = ptr::null_mut();
        // SAFETY: valid arguments throughout; the lengths lie on purpose, and the API must
        // refuse them before it touches the memory.
        unsafe {
            assert_eq!(accio_listener_create(name.as_ptr(), &mut l), ACCIO_OK);
            let mut addr = [0 as std::ffi::c_char; 128];
            assert_eq!(
                accio_listener_addr(l, addr.as_mut_ptr(), addr.len(), ptr::null_mut()),
                ACCIO_OK
            );
            let lh = Send_(l);
            let server = std::thread::spawn(move || {
                let lh = lh;
                let mut ep: *mut accio_endpoint = ptr::null_mut();
                assert_eq!(accio_listener_accept(lh.0, 5000, &mut ep), ACCIO_OK);
                Send_(ep)
            });
            let mut c: *mut accio_endpoint = ptr::null_mut();
            assert_eq!(
                accio_endpoint_connect(addr.as_ptr(), 5000, &mut c),
                ACCIO_OK,
                "{}",
                last_error()
            );
            let a = server.join().unwrap().0;
            let mut small = [0u8; 64];
            let data = small.as_mut_ptr();
            let end_of_space = format!("{:#x}", 1usize << 57);
            for (len, limit) in [
                (usize::MAX, ISIZE_LIMIT),
                (isize::MAX as usize + 1, ISIZE_LIMIT),
                (1 << 62, end_of_space.as_str()),
            ] {
                let op = "accio_endpoint_send";
                assert_refused(accio_endpoint_send(c, data, len), op, "len", limit);
                let op = "accio_endpoint_vwrite_to";
                let s = accio_endpoint_vwrite_to(c, data, len, 4096, 0);
                assert_refused(s, op, "len", limit);
                let op = "accio_endpoint_vread_from";
                let s = accio_endpoint_vread_from(c, data, len, 4096, 0);
                assert_refused(s, op, "len", limit);
                let mut n = 0usize;
                let op = "accio_endpoint_recv";
                let s = accio_endpoint_recv(a, data, len, &mut n, 0);
                assert_refused(s, op, "cap", limit);
            }
            // Host memory given as device memory: refused with the cause (no driver or
            // GPU here: unsupported; on a GPU machine the driver does not know it).
            for op in [
                "accio_endpoint_vwrite_device",
                "accio_endpoint_vread_device",
            ] {
                let s = if op.contains("write") {
                    accio_endpoint_vwrite_device(c, data as u64, 64, 4096, 0)
                } else {
                    accio_endpoint_vread_device(c, data as u64, 64, 4096, 0)
                };
                assert_not_device_memory(s, &format!("{op}: "));
            }
            let mut off = 0u64;
            let s = accio_window_register_device(c, data as u64, 64, 3, &mut off);
            assert_not_device_memory(s, "accio_window_register_device: ");
            // Nothing was sent: the first message the peer gets is the next real one.
            assert_eq!(accio_endpoint_send(c, b"after".as_ptr(), 5), ACCIO_OK);
            let mut n = 0usize;
            assert_eq!(
                accio_endpoint_recv(a, data, small.len(), &mut n, 5000),
                ACCIO_OK,
                "{base}: {}",
                last_error()
            );
            assert_eq!(&small[..n], b"after", "{base}");
            assert_eq!(accio_endpoint_destroy(c), ACCIO_OK);
            assert_eq!(accio_endpoint_destroy(a), ACCIO_OK);
            assert_eq!(accio_listener_destroy(l), ACCIO_OK);
        }
    }
}

/// `accio_producer_write_record(p, b, SIZE_MAX)` was a panic in the record packing
/// (ACCIO_PANIC and a backtrace on stderr): now an invalid argument; a record one byte too
/// long for the slot is ACCIO_TOO_LARGE; the producer goes on working after both.
#[test]
fn huge_lengths_on_a_producer_and_a_reader_fail_cleanly() {
    let dir = tempfile_dir("len");
    let path = dir.join("out.accio");
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    let addr = CString::new(format!("shm://{}", unique("plen"))).unwrap();
    let opts = accio_merger_options {
        budget: 1 << 20,
        slot_bytes: 64 << 10,
        ..Default::default()
    };
    // SAFETY: valid arguments throughout; the lengths lie on purpose and must be refused
    // before the memory is touched.
    unsafe {
        let mut m: *mut accio_merger = ptr::null_mut();
        assert_eq!(
            accio_merger_create(addr.as_ptr(), cpath.as_ptr(), &opts, &mut m),
            ACCIO_OK,
            "{}",
            last_error()
        );
        let mut p: *mut accio_producer = ptr::null_mut();
        assert_eq!(
            accio_producer_connect(addr.as_ptr(), ptr::null(), &mut p),
            ACCIO_OK
        );
        let b = [7u8; 64];
        for (len, limit) in [
            (usize::MAX, ISIZE_LIMIT),
            (isize::MAX as usize + 1, ISIZE_LIMIT),
        ] {
            let op = "accio_producer_write_record";
            let s = accio_producer_write_record(p, b.as_ptr(), len);
            assert_refused(s, op, "len", limit);
            let op = "accio_producer_write";
            let s = accio_producer_write(p, b.as_ptr(), len, ptr::null_mut());
            assert_refused(s, op, "len", limit);
        }
        // One byte more than a slot holds with the record's 4-byte length.
        let long = vec![1u8; (64 << 10) - 3];
        assert_eq!(
            accio_producer_write_record(p, long.as_ptr(), long.len()),
            ACCIO_TOO_LARGE
        );
        assert_eq!(
            last_error(),
            "record (with its 4-byte length) of 65537 bytes does not fit the 65536-byte buffer"
        );
        assert_eq!(
            accio_producer_write_record(p, long.as_ptr(), long.len() - 1),
            ACCIO_OK,
            "{}",
            last_error()
        );
        assert_eq!(accio_producer_write_record(p, b.as_ptr(), 3), ACCIO_OK);
        // Host memory given as device memory: refused with the cause (no driver or GPU
        // here: unsupported; on a GPU machine the driver does not know the address).
        let s = accio_producer_write_device(p, b.as_ptr() as u64, b.len(), ptr::null_mut());
        assert_not_device_memory(s, "block from device memory: ");
        assert_eq!(accio_producer_finish(p, ptr::null_mut()), ACCIO_OK);
        assert_eq!(accio_merger_close(m, ptr::null_mut()), ACCIO_OK);

        let mut r: *mut accio_reader = ptr::null_mut();
        assert_eq!(accio_reader_open(cpath.as_ptr(), &mut r), ACCIO_OK);
        let mut count = 0;
        assert_eq!(accio_reader_block_count(r, &mut count), ACCIO_OK);
        assert_eq!(count, 2, "the full slot and the last record");
        let mut out = [0u8; 16];
        let mut n = 0;
        let s = accio_reader_read(r, 1, out.as_mut_ptr(), usize::MAX, &mut n);
        assert_refused(s, "accio_reader_read", "cap", ISIZE_LIMIT);
        assert_eq!(
            accio_reader_read(r, 1, out.as_mut_ptr(), out.len(), &mut n),
            ACCIO_OK
        );
        // The last block: one record, its u32 length and 3 bytes.
        assert_eq!(&out[..n], &[3, 0, 0, 0, 7, 7, 7]);
        assert_eq!(accio_reader_destroy(r), ACCIO_OK);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A fresh directory of this test (created, not reused).
fn tempfile_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique(tag));
    std::fs::create_dir(&dir).unwrap();
    dir
}

// ---- the world, try_send/try_recv, register_view -------------------------------------------

/// A world of `nodes.len()` ranks in this process, one handle per rank, built from one
/// table as an allgather would build it (no launcher). `nodes[r]` is rank r's node: the
/// same for ranks that share memory, another host for ranks that must not.
fn in_process_world(nodes: &[&str]) -> Vec<*mut accio_world> {
    use ::accio_world::{listen_all, NodeId, Rules, World};
    let size = nodes.len();
    let mut listeners = Vec::new();
    let mut table = Vec::new();
    for (rank, host) in nodes.iter().enumerate() {
        let mut node = NodeId::current();
        node.host = host.to_string();
        let (l, rec) = listen_all(rank, size, "127.0.0.1", node, Rules::default())
            .expect("listening for an in-process rank");
        listeners.push(l);
        table.push(rec);
    }
    listeners
        .into_iter()
        .enumerate()
        .map(|(rank, l)| {
            let w = World::from_table(rank, table.clone(), l, std::time::Duration::from_secs(5))
                .expect("an in-process world");
            into_handle(crate::world::WorldObj::new(w).expect("the pair choices"))
        })
        .collect()
}

/// A C string the library owns, as text.
fn text(p: *const std::ffi::c_char) -> String {
    assert!(!p.is_null());
    // SAFETY: a NUL-terminated string the world keeps alive while the test uses it.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[test]
fn world_join_outside_a_launch_is_a_bootstrap_failure_naming_the_variable() {
    let launched = [
        "ACCIO_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "PMI_SIZE",
        "PMIX_RANK",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some());
    if launched {
        eprintln!("skipped: this test process was started by a launcher");
        return;
    }
    let mut w: *mut accio_world = ptr::null_mut();
    // SAFETY: a writable out-pointer, then a NULL one.
    unsafe {
        assert_eq!(accio_world_join(&mut w), ACCIO_BOOTSTRAP);
        let e = last_error();
        assert!(
            e.starts_with("accio_world_join: ACCIO_RANK: not set") && e.contains("accio run -n N"),
            "{e}"
        );
        assert!(w.is_null(), "a failed join stores nothing");
        assert_eq!(accio_world_join(ptr::null_mut()), ACCIO_NULL_POINTER);
        assert_eq!(accio_world_destroy(ptr::null_mut()), ACCIO_OK);
        let mut r = 0usize;
        assert_eq!(accio_world_rank(ptr::null(), &mut r), ACCIO_NULL_POINTER);
        assert!(
            last_error().contains("accio_world is NULL"),
            "{}",
            last_error()
        );
        assert_eq!(
            CStr::from_ptr(accio_status_name(ACCIO_BOOTSTRAP as _)).to_str(),
            Ok("ACCIO_BOOTSTRAP")
        );
        assert_eq!(
            CStr::from_ptr(accio_status_name(ACCIO_WOULD_BLOCK as _)).to_str(),
            Ok("ACCIO_WOULD_BLOCK")
        );
    }
}

#[test]
fn world_ranks_nodes_choices_and_bad_peers_named() {
    // Ranks 0 and 1 share a node, rank 2 is on another.
    let w = in_process_world(&["n1", "n1", "n2"]);
    // SAFETY: live world handles, writable out-pointers; destroyed once at the end.
    unsafe {
        let (mut rank, mut size) = (9usize, 0usize);
        assert_eq!(accio_world_rank(w[1], &mut rank), ACCIO_OK);
        assert_eq!(accio_world_size(w[1], &mut size), ACCIO_OK);
        assert_eq!((rank, size), (1, 3));

        let mut ranks = [99usize; 3];
        let mut count = 0usize;
        assert_eq!(
            accio_world_node_ranks(w[0], ranks.as_mut_ptr(), 1, &mut count),
            ACCIO_BUFFER_TOO_SMALL
        );
        assert_eq!((count, ranks[0]), (2, 99), "the count stored, nothing else");
        assert_eq!(
            accio_world_node_ranks(w[0], ranks.as_mut_ptr(), 3, &mut count),
            ACCIO_OK
        );
        assert_eq!(&ranks[..count], &[0, 1]);
        assert_eq!(
            accio_world_node_ranks(w[2], ranks.as_mut_ptr(), 3, &mut count),
            ACCIO_OK
        );
        assert_eq!(&ranks[..count], &[2]);

        let mut name = [0 as std::ffi::c_char; 128];
        let mut len = 0usize;
        assert_eq!(
            accio_world_node(w[0], 2, name.as_mut_ptr(), name.len(), &mut len),
            ACCIO_OK
        );
        let node = text(name.as_ptr());
        assert!(node.starts_with("n2 (boot "), "{node}");
        assert_eq!(len, node.len());
        assert_eq!(
            accio_world_node(w[0], 2, name.as_mut_ptr(), 3, &mut len),
            ACCIO_BUFFER_TOO_SMALL
        );
        assert_eq!(len, node.len(), "the length stored for a second try");
        assert_eq!(
            accio_world_node(w[0], 3, name.as_mut_ptr(), name.len(), &mut len),
            ACCIO_INVALID_ARGUMENT
        );
        assert_eq!(
            last_error(),
            "accio_world_node: rank 3 is outside the world of 3 ranks (0 to 2)"
        );

        // The rule and its reason, as strings the world keeps.
        let (mut scheme, mut reason) = (ptr::null(), ptr::null());
        assert_eq!(
            accio_world_choice(w[0], 1, &mut scheme, &mut reason),
            ACCIO_OK
        );
        assert_eq!(text(scheme), "shm");
        assert!(
            text(reason).starts_with("same node n1 "),
            "{}",
            text(reason)
        );
        assert_eq!(
            accio_world_choice(w[2], 0, &mut scheme, &mut reason),
            ACCIO_OK
        );
        assert_eq!(text(scheme), "tcp");
        assert!(
            text(reason).contains("hosts differ (n1 vs n2)"),
            "{}",
            text(reason)
        );
        assert_eq!(
            accio_world_choice(w[2], 1, &mut scheme, ptr::null_mut()),
            ACCIO_OK
        );

        // A peer outside the world, or this rank: refused by rank, nothing connected.
        let mut ep: *mut accio_endpoint = ptr::null_mut();
        assert_eq!(
            accio_world_endpoint(w[1], 7, &mut ep),
            ACCIO_INVALID_ARGUMENT
        );
        assert_eq!(
            last_error(),
            "accio_world_endpoint: peer rank 7 is outside the world of 3 ranks (0 to 2)"
        );
        assert_eq!(
            accio_world_endpoint(w[1], 1, &mut ep),
            ACCIO_INVALID_ARGUMENT
        );
        assert_eq!(
            last_error(),
            "accio_world_endpoint: peer rank 1 is this rank: a rank has no endpoint to itself"
        );
        assert!(ep.is_null());
        assert_eq!(
            accio_world_choice(w[0], 3, &mut scheme, &mut reason),
            ACCIO_INVALID_ARGUMENT
        );
        assert!(
            last_error().contains("peer rank 3 is outside"),
            "{}",
            last_error()
        );
        assert_eq!(
            accio_world_endpoint(w[1], 0, ptr::null_mut()),
            ACCIO_NULL_POINTER
        );
        // A world handle is not an endpoint handle, and the other way round.
        assert_eq!(
            accio_endpoint_send(w[0] as *const accio_endpoint, ptr::null(), 0),
            ACCIO_INVALID_HANDLE
        );

        for h in w {
            assert_eq!(accio_world_destroy(h), ACCIO_OK);
        }
    }
}

#[test]
fn world_endpoints_are_cached_owned_by_the_world_and_carry_try_send_and_try_recv() {
    // Rank 0 and 1 on one node (shm), rank 2 on another (tcp): both backends.
    let w = in_process_world(&["n1", "n1", "n2"]);
    // SAFETY: live handles throughout; the endpoints are the worlds', freed with them.
    unsafe {
        for peer in [1usize, 2] {
            // The lower rank connects (returns at once), the higher one takes it.
            let (mut a, mut b, mut again) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
            assert_eq!(
                accio_world_endpoint(w[0], peer, &mut a),
                ACCIO_OK,
                "{}",
                last_error()
            );
            assert_eq!(
                accio_world_endpoint(w[peer], 0, &mut b),
                ACCIO_OK,
                "{}",
                last_error()
            );
            assert_eq!(accio_world_endpoint(w[0], peer, &mut again), ACCIO_OK);
            assert_eq!(a, again, "the second call returns the same endpoint");

            // The world owns it: destroy is refused and the endpoint stays usable.
            assert_eq!(accio_endpoint_destroy(a), ACCIO_INVALID_ARGUMENT);
            assert!(
                last_error().contains("accio_world_destroy frees it"),
                "{}",
                last_error()
            );

            // Nothing there yet: a would-block, which leaves the last message alone.
            let mut buf = [0u8; 16];
            let mut len = 0usize;
            assert_eq!(
                accio_endpoint_try_recv(b, buf.as_mut_ptr(), 16, &mut len),
                ACCIO_WOULD_BLOCK
            );
            assert!(
                last_error().contains("accio_world_destroy frees it"),
                "{}",
                last_error()
            );

            assert_eq!(
                accio_endpoint_try_send(a, b"ping".as_ptr(), 4),
                ACCIO_OK,
                "{}",
                last_error()
            );
            assert_eq!(accio_endpoint_send(a, b"second!".as_ptr(), 7), ACCIO_OK);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            let s = loop {
                let s = accio_endpoint_try_recv(b, buf.as_mut_ptr(), 16, &mut len);
                if s != ACCIO_WOULD_BLOCK || std::time::Instant::now() > deadline {
                    break s;
                }
                std::hint::spin_loop();
            };
            assert_eq!(s, ACCIO_OK, "{}", last_error());
            assert_eq!(&buf[..len], b"ping");
            // Too long for the buffer: kept, its length told, returned by the next call.
            let mut small = [0u8; 2];
            assert_eq!(
                accio_endpoint_recv(b, small.as_mut_ptr(), 2, &mut len, 5000),
                ACCIO_BUFFER_TOO_SMALL
            );
            assert_eq!(len, 7);
            assert_eq!(
                accio_endpoint_try_recv(b, small.as_mut_ptr(), 2, &mut len),
                ACCIO_BUFFER_TOO_SMALL
            );
            assert_eq!(
                accio_endpoint_try_recv(b, buf.as_mut_ptr(), 16, &mut len),
                ACCIO_OK
            );
            assert_eq!(&buf[..len], b"second!");
            // try_send takes messages up to the backend's limit only.
            let big = vec![0u8; 1 << 20];
            assert_eq!(
                accio_endpoint_try_send(b, big.as_ptr(), big.len()),
                ACCIO_MESSAGE_TOO_LARGE
            );
            assert!(last_error().contains("1048576"), "{}", last_error());
            assert_eq!(
                accio_endpoint_try_send(b, ptr::null(), 5),
                ACCIO_NULL_POINTER
            );
            assert_eq!(
                accio_endpoint_try_recv(b, buf.as_mut_ptr(), 16, ptr::null_mut()),
                ACCIO_NULL_POINTER
            );
        }
        for h in w {
            assert_eq!(accio_world_destroy(h), ACCIO_OK);
        }
    }
}

#[test]
fn world_barrier_waits_for_every_rank_and_resumes_after_a_timeout() {
    let w = in_process_world(&["n1", "n1", "n1"]);
    // SAFETY: live handles; each rank's thread uses its own world, destroyed after joining.
    unsafe {
        // Rank 2 alone: it times out naming the rank it waited for.
        assert_eq!(accio_world_barrier(w[2], 100), ACCIO_TIMEOUT);
        let e = last_error();
        // (In round 0 rank 2 tells rank 0, whose connection it waits for.)
        assert!(
            e.starts_with("accio_world_barrier: rank 2: no endpoint from rank 0 over shm"),
            "{e}"
        );
        let ranks: Vec<_> = w.iter().map(|&h| Send_(h)).collect();
        let threads: Vec<_> = ranks
            .into_iter()
            .map(|h| {
                std::thread::spawn(move || {
                    let h = h;
                    let mut s = Vec::new();
                    for _ in 0..3 {
                        s.push(accio_world_barrier(h.0, 5000));
                    }
                    (s, last_error())
                })
            })
            .collect();
        for t in threads {
            let (s, e) = t.join().unwrap();
            assert_eq!(s, [ACCIO_OK; 3], "{e}");
        }
        for h in w {
            assert_eq!(accio_world_destroy(h), ACCIO_OK);
        }
    }
}

#[test]
fn register_view_exposes_the_callers_region_on_shm_and_tcp() {
    for base in ["shm://", "tcp://127.0.0.1:0"] {
        let addr = if base == "shm://" {
            format!("shm://{}", unique("view"))
        } else {
            base.to_string()
        };
        let addr = CString::new(addr).unwrap();
        // SAFETY: valid arguments; every handle destroyed once.
        unsafe {
            let mut l = ptr::null_mut();
            assert_eq!(
                accio_listener_create(addr.as_ptr(), &mut l),
                ACCIO_OK,
                "{}",
                last_error()
            );
            let mut bound = [0 as std::ffi::c_char; 128];
            assert_eq!(
                accio_listener_addr(l, bound.as_mut_ptr(), 128, ptr::null_mut()),
                ACCIO_OK
            );
            // The listener accepts in a thread: an shm connect completes with the accept.
            let lh = Send_(l);
            let acceptor = std::thread::spawn(move || {
                let lh = lh;
                let mut b = ptr::null_mut();
                let s = accio_listener_accept(lh.0, 5000, &mut b);
                (s, Send_(b))
            });
            let mut a = ptr::null_mut();
            assert_eq!(
                accio_endpoint_connect(bound.as_ptr(), 5000, &mut a),
                ACCIO_OK,
                "{}",
                last_error()
            );
            let (s, b) = acceptor.join().unwrap();
            assert_eq!(s, ACCIO_OK);
            let b = b.0;

            // Three pages of the caller's, the middle one lent to the peer.
            let mut r = ptr::null_mut();
            assert_eq!(
                accio_region_create(3 * ACCIO_PAGE, &mut r),
                ACCIO_OK,
                "{}",
                last_error()
            );
            let (mut mem, mut n) = (ptr::null_mut(), 0usize);
            assert_eq!(accio_region_memory(r, &mut mem, &mut n), ACCIO_OK);
            assert_eq!(n, 3 * ACCIO_PAGE);
            assert_eq!(mem as usize % ACCIO_PAGE, 0);
            *mem.add(ACCIO_PAGE) = 0xAB;

            let mut win = ptr::null_mut();
            let rw = ACCIO_ACCESS_READ_WRITE;
            assert_eq!(
                accio_window_register_view(b, r, ACCIO_PAGE + 8, 64, rw, &mut win),
                ACCIO_INVALID_ARGUMENT
            );
            let e = last_error();
            assert!(
                e.contains("start = 4104") && e.contains("ACCIO_PAGE = 4096"),
                "{e}"
            );
            assert_eq!(
                accio_window_register_view(b, r, ACCIO_PAGE, 0, rw, &mut win),
                ACCIO_INVALID_ARGUMENT
            );
            assert!(last_error().contains("len = 0"), "{}", last_error());
            assert_eq!(
                accio_window_register_view(b, r, 2 * ACCIO_PAGE, ACCIO_PAGE + 1, rw, &mut win),
                ACCIO_INVALID_ARGUMENT
            );
            assert!(
                last_error().contains("past the end of the 12288-byte region"),
                "{}",
                last_error()
            );
            assert_eq!(
                accio_window_register_view(b, r, 0, 8, 0x40, &mut win),
                ACCIO_INVALID_ARGUMENT
            );
            assert_eq!(
                accio_window_register_view(b, a as *const accio_region, 0, 8, rw, &mut win),
                ACCIO_INVALID_HANDLE
            );
            assert!(
                last_error().contains("not a live accio_region"),
                "{}",
                last_error()
            );
            assert!(win.is_null(), "refusals store nothing");

            assert_eq!(
                accio_window_register_view(b, r, ACCIO_PAGE, ACCIO_PAGE, rw, &mut win),
                ACCIO_OK,
                "{}",
                last_error()
            );
            let mut off = 0u64;
            assert_eq!(accio_window_offset(win, &mut off), ACCIO_OK);
            let (mut wp, mut wl) = (ptr::null_mut(), 0usize);
            assert_eq!(accio_window_memory(win, &mut wp, &mut wl), ACCIO_OK);
            assert_eq!(
                (wp, wl),
                (mem.add(ACCIO_PAGE), ACCIO_PAGE),
                "the window is the region's memory"
            );

            // Announced with a message, as the contract asks (a window is visible to the
            // peer once a message sent after its registration arrived).
            assert_eq!(
                accio_endpoint_send(b, off.to_le_bytes().as_ptr(), 8),
                ACCIO_OK
            );
            let mut m = [0u8; 8];
            let mut mlen = 0usize;
            assert_eq!(
                accio_endpoint_recv(a, m.as_mut_ptr(), 8, &mut mlen, 5000),
                ACCIO_OK
            );
            assert_eq!(u64::from_le_bytes(m), off);
            // The peer reads what the caller wrote, and its write lands in the region.
            let mut got = [0u8; 1];
            assert_eq!(
                accio_endpoint_vread_from(a, got.as_mut_ptr(), 1, off, 0),
                ACCIO_OK,
                "{}",
                last_error()
            );
            assert_eq!(got[0], 0xAB);
            assert_eq!(
                accio_endpoint_vwrite_to(a, b"view".as_ptr(), 4, off + 16, ACCIO_RMA_SYNC),
                ACCIO_OK
            );
            let sig = accio_signal {
                offset: off + 8,
                value: 5,
            };
            assert_eq!(accio_endpoint_fence_signal(a, ptr::null(), &sig), ACCIO_OK);
            assert_eq!(
                accio_window_wait_u64(win, 8, 5, 5000),
                ACCIO_OK,
                "{}",
                last_error()
            );
            assert_eq!(
                std::slice::from_raw_parts(mem.add(ACCIO_PAGE + 16), 4),
                b"view"
            );
            // Outside the view (the third page is the region's, not the window's): refused.
            assert_eq!(
                accio_endpoint_vwrite_to(a, b"x".as_ptr(), 1, off + ACCIO_PAGE as u64, 0),
                ACCIO_OUT_OF_WINDOW
            );

            assert_eq!(accio_region_create(0, &mut r), ACCIO_INVALID_ARGUMENT);
            let mut r2 = ptr::null_mut();
            assert_eq!(
                accio_region_create(usize::MAX / 2, &mut r2),
                ACCIO_OUT_OF_MEMORY
            );
            assert!(r2.is_null());

            assert_eq!(accio_window_destroy(win), ACCIO_OK);
            assert_eq!(accio_region_destroy(r), ACCIO_OK);
            assert_eq!(accio_endpoint_destroy(a), ACCIO_OK);
            assert_eq!(accio_endpoint_destroy(b), ACCIO_OK);
            assert_eq!(accio_listener_destroy(l), ACCIO_OK);
        }
    }
}
