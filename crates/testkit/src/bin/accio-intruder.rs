//! A hostile local process, for the shared-node tests (`tests/shared_node.rs`): the test
//! runs it as another user and checks that what it tries fails and that the victim's data
//! is untouched. Each scenario prints one line per attempt (`ATTEMPT: refused (...)` or
//! `ATTEMPT: SUCCEEDED ...`) on stdout, and exits 0 once it has tried everything.
//!
//! - `squat-shm UID NAME`: binds the abstract socket of user UID's `shm://NAME` first (any
//!   user can bind any abstract name), prints `ready`, waits up to 10 s for a victim to
//!   connect and reports every byte and descriptor the victim sent.
//! - `read-only-window NAME`: connects to `shm://NAME` as an admitted other user, receives
//!   the offset of a window it may only read, and tries to write it every way it can:
//!   `vwrite_to`, a store through `map_remote`, a writable `mmap` of the descriptor it was
//!   given, and reopening that descriptor writable through `/proc/self/fd`.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::time::{Duration, Instant};

use accio::RmaFlags;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["squat-shm", uid, name] => squat_shm(uid, name),
        ["read-only-window", name] => read_only_window(name),
        _ => {
            eprintln!("usage: accio-intruder squat-shm UID NAME | read-only-window NAME");
            2
        }
    };
    std::process::exit(code);
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn squat_shm(uid: &str, name: &str) -> i32 {
    let sa = SocketAddr::from_abstract_name(format!("accio.{uid}.{name}")).expect("name");
    let listener = match UnixListener::bind_addr(&sa) {
        Ok(l) => l,
        Err(e) => {
            say(&format!("bind: refused ({e})"));
            return 1;
        }
    };
    listener.set_nonblocking(true).expect("nonblocking");
    say("ready");
    let start = Instant::now();
    let stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if start.elapsed() > Duration::from_secs(10) {
                    say("accept: nobody came");
                    return 1;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => {
                say(&format!("accept: failed ({e})"));
                return 1;
            }
        }
    };
    // Everything the victim sends in the next second: bytes and descriptors.
    let (mut bytes, mut fds) = (0usize, 0usize);
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        let mut p = libc::pollfd {
            fd: stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, 50) } <= 0 {
            continue;
        }
        let (n, got) = recv_with_fds(stream.as_raw_fd(), libc::MSG_CMSG_CLOEXEC);
        if n <= 0 {
            break;
        }
        bytes += n as usize;
        fds += got.len();
    }
    if bytes == 0 && fds == 0 {
        say("intercept: refused (the victim sent nothing)");
    } else {
        say(&format!(
            "intercept: SUCCEEDED ({bytes} bytes and {fds} descriptors received)"
        ));
    }
    0
}

fn read_only_window(name: &str) -> i32 {
    let ep = match accio::connect(&format!("shm://{name}"), Duration::from_secs(10)) {
        Ok(ep) => ep,
        Err(e) => {
            say(&format!("connect: refused ({e})"));
            return 1;
        }
    };
    let mut buf = Vec::new();
    ep.recv(&mut buf).expect("the window's offset");
    let off = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
    let payload = b"intruder";

    // The descriptor the window came with, taken off the control socket the way any
    // process can take what its own sockets hold (a peek installs the descriptors too).
    let mut seen = 0;
    let peeked = peek_descriptors();
    for fd in peeked.iter().map(AsRawFd::as_raw_fd) {
        let path = format!("/proc/self/fd/{fd}");
        let Ok(target) = std::fs::read_link(&path) else {
            continue;
        };
        if !target.to_string_lossy().contains("accio-window") {
            continue;
        }
        seen += 1;
        match try_writable_mmap(fd, payload) {
            Ok(()) => say(&format!("writable mmap of fd {fd}: SUCCEEDED")),
            Err(e) => say(&format!("writable mmap of fd {fd}: refused ({e})")),
        }
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(f) => {
                say(&format!("reopen of fd {fd} for writing: SUCCEEDED"));
                // Only its owner can reopen it; a fresh window's seal still refuses a
                // writable mapping then.
                match try_writable_mmap(f.as_raw_fd(), payload) {
                    Ok(()) => say("writable mmap of the reopened fd: SUCCEEDED"),
                    Err(e) => say(&format!("writable mmap of the reopened fd: refused ({e})")),
                }
            }
            Err(e) => say(&format!("reopen of fd {fd} for writing: refused ({e})")),
        }
    }
    match ep.vwrite_to(payload, off, RmaFlags::SYNC) {
        Ok(()) => say("vwrite_to: SUCCEEDED"),
        Err(e) => say(&format!("vwrite_to: refused ({e})")),
    }
    match ep.map_remote(off, 4096) {
        Ok(m) => match m.write_at(0, payload) {
            Ok(()) => say("map_remote store: SUCCEEDED"),
            Err(e) => say(&format!("map_remote store: refused ({e})")),
        },
        Err(e) => say(&format!("map_remote: failed ({e})")),
    }
    say(&format!("descriptors examined: {seen}"));
    let _ = ep.send(b"done");
    // Wait for the victim to hang up, so it reads our window mappings as they were.
    let _ = ep.recv_timeout(&mut buf, Some(Duration::from_secs(10)));
    0
}

/// Every descriptor queued on this process's Unix sockets, installed here by peeking
/// (`MSG_PEEK` leaves the bytes and descriptors queued for their reader).
fn peek_descriptors() -> Vec<OwnedFd> {
    let mut got = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .flatten()
    {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"));
        let Ok(sock) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if !is_socket {
            continue;
        }
        let flags = libc::MSG_PEEK | libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC;
        got.extend(recv_with_fds(sock, flags).1);
    }
    got
}

/// Maps 4 KiB of `fd` shared and writable and stores `payload` at its start.
fn try_writable_mmap(fd: i32, payload: &[u8]) -> std::io::Result<()> {
    // SAFETY: mmap of a descriptor at a kernel-chosen address; unmapped below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `p` is a fresh 4096-byte writable mapping; payload is shorter.
    unsafe {
        std::ptr::copy_nonoverlapping(payload.as_ptr(), p.cast(), payload.len());
        libc::munmap(p, 4096);
    }
    Ok(())
}

/// One `recvmsg` on `sock` with `flags`: the bytes it returned (or its error, negative)
/// and the descriptors that came with them, owned here.
fn recv_with_fds(sock: i32, flags: libc::c_int) -> (isize, Vec<OwnedFd>) {
    let mut buf = [0u8; 4096];
    let mut cbuf = [0u64; 32];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid; it points at live buffers below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf);
    // SAFETY: `msg` describes live, writable buffers.
    let n = unsafe { libc::recvmsg(sock, &mut msg, flags) };
    let mut fds = Vec::new();
    if n <= 0 {
        return (n, fds);
    }
    // SAFETY: the kernel filled msg_controllen bytes of cbuf with cmsg records; each
    // SCM_RIGHTS descriptor is new in this process and owned by nobody else.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / 4;
                for i in 0..count {
                    let fd = std::ptr::read_unaligned((libc::CMSG_DATA(c) as *const i32).add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    (n, fds)
}
