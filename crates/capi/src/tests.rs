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
