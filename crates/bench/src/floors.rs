//! Latency floors: the least time a one-way message between two cores can take, measured
//! in the same run as the figures they bound.
//!
//! - [`cacheline_one_way_us`]: one 64-byte line bouncing between two pinned threads (each
//!   waits for the other's value, then writes its own). Half a round trip is the cost of
//!   moving one cache line from one core to the other: no shared-memory message can arrive
//!   sooner, so it is the floor of the `shm` latency figures.
//! - [`loopback_socket_one_way_us`]: 8 bytes back and forth over a loopback TCP connection
//!   with `TCP_NODELAY`, one `write` per hop and non-blocking `read`s polled for up to
//!   50 µs before a blocking one (the waiting policy of accio's tcp endpoints), no framing.
//!   Half a round trip is what the kernel's socket path costs when nobody sleeps that
//!   long (a blocking read adds a wake-up, which a receiver that polls, as accio's and
//!   UCX's do, does not pay): the floor of the `tcp` latency figures.
//!
//! Each sample is the one-way time over about `batch` of wall time (the cache line: the
//! median of slices of 100 round trips; the socket: the median round trip; medians, as the
//! latency figures take);
//! the threads are pinned to the CPUs given (the transport bench's driver and peer CPUs), so
//! the floor sees the same pair of cores as the figure.

use std::io::{self, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// A value alone on its cache line.
#[repr(align(128))]
struct Line(AtomicU64);

/// Waits until `line` holds `v`: spins (a hop between two running cores takes well under
/// a thousand turns), then yields, so that two threads that share one core on a loaded
/// machine still make progress.
fn wait_for(line: &Line, v: u64) {
    let mut turns = 0u32;
    while line.0.load(Ordering::Acquire) != v {
        if turns < 1000 {
            turns += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Pins the calling thread to `cpu` (best effort: an unpinned floor is still a floor).
fn pin(cpu: Option<usize>) {
    let Some(cpu) = cpu else {
        return;
    };
    // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET writes inside it;
    // sched_setaffinity reads `size_of` bytes of it for the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Half the round-trip time of one cache line between two threads pinned to `cpus`
/// (driver, peer), in microseconds: `samples` values, each over about `batch`.
pub fn cacheline_one_way_us(
    cpus: Option<(usize, usize)>,
    samples: usize,
    batch: Duration,
) -> Vec<f64> {
    let ping = Line(AtomicU64::new(0));
    let pong = Line(AtomicU64::new(0));
    let start = Barrier::new(2);
    // Rounds per sample, calibrated by the driver and published before each sample;
    // u64::MAX tells the peer to stop.
    let rounds = Line(AtomicU64::new(0));
    std::thread::scope(|s| {
        s.spawn(|| {
            pin(cpus.map(|c| c.1));
            let mut seen = 0u64;
            loop {
                start.wait();
                let n = rounds.0.load(Ordering::Acquire);
                if n == u64::MAX {
                    return;
                }
                for _ in 0..n {
                    seen += 1;
                    wait_for(&ping, seen);
                    pong.0.store(seen, Ordering::Release);
                }
            }
        });
        pin(cpus.map(|c| c.0));
        let mut sent = 0u64;
        // Round trips are timed in slices of SLICE and a sample is the median slice: a
        // mean over the whole batch would carry every preemption of a loaded machine into
        // the floor (the latency figures take medians too), and a clock read per round
        // trip would cost as much as the hop.
        const SLICE: u64 = 100;
        let mut slices = Vec::new();
        let mut run = |n: u64| -> (Duration, f64) {
            let n = n.div_ceil(SLICE) * SLICE;
            rounds.0.store(n, Ordering::Release);
            start.wait();
            slices.clear();
            let t = Instant::now();
            let mut s = t;
            for i in 1..=n {
                sent += 1;
                ping.0.store(sent, Ordering::Release);
                wait_for(&pong, sent);
                if i % SLICE == 0 {
                    let now = Instant::now();
                    slices.push((now - s).as_secs_f64());
                    s = now;
                }
            }
            let total = t.elapsed();
            slices.sort_by(f64::total_cmp);
            (total, slices[slices.len() / 2] / SLICE as f64)
        };
        // Calibrate: rounds that take about `batch`.
        let probe = run(1000).0.max(Duration::from_micros(1));
        let n = ((batch.as_secs_f64() / probe.as_secs_f64()) * 1000.0).clamp(1000.0, 1e8) as u64;
        let out: Vec<f64> = (0..samples.max(1)).map(|_| run(n).1 * 1e6 / 2.0).collect();
        rounds.0.store(u64::MAX, Ordering::Release);
        start.wait();
        out
    })
}

/// True if `s` has bytes to read (or hung up), without waiting.
fn readable_now(s: &TcpStream) -> bool {
    use std::os::fd::AsRawFd as _;
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, 0) != 0 }
}

/// How long [`read_polled`] polls before it sleeps: the spin of accio's tcp endpoints
/// (`TcpOptions::spin`'s default), so that the floor waits as the figures it bounds do.
const SOCKET_SPIN: Duration = Duration::from_micros(50);

/// Reads exactly `buf.len()` bytes from a non-blocking socket: polls for
/// [`SOCKET_SPIN`], then sleeps in a blocking read (on a loaded machine a pure spinner
/// loses its core for whole time slices, a sleeper is woken first).
fn read_polled(s: &mut TcpStream, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    let mut since: Option<Instant> = None;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let t = *since.get_or_insert_with(Instant::now);
                if t.elapsed() < SOCKET_SPIN {
                    // Wait for bytes with poll(0), as accio does: a read takes the socket's
                    // lock, and one spinning on reads makes the kernel queue the arriving
                    // segment on the socket's backlog instead of delivering it.
                    while !readable_now(s) && t.elapsed() < SOCKET_SPIN {
                        std::hint::spin_loop();
                    }
                } else {
                    s.set_nonblocking(false)?;
                    let r = s.read(&mut buf[got..]);
                    s.set_nonblocking(true)?;
                    match r? {
                        0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                        n => got += n,
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Half the round-trip time of 8 bytes over a loopback TCP connection (`TCP_NODELAY`, one
/// write and polled non-blocking reads per hop) between two threads pinned to `cpus`, in
/// microseconds: `samples` values, each the median round trip of about `batch`.
pub fn loopback_socket_one_way_us(
    cpus: Option<(usize, usize)>,
    samples: usize,
    batch: Duration,
) -> io::Result<Vec<f64>> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let mut a = TcpStream::connect(addr)?;
    let (mut b, _) = listener.accept()?;
    a.set_nodelay(true)?;
    b.set_nodelay(true)?;
    // 8 bytes always fit in an idle socket's send buffer, so writes never see WouldBlock.
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    std::thread::scope(|s| -> io::Result<Vec<f64>> {
        let echo = s.spawn(move || -> io::Result<()> {
            pin(cpus.map(|c| c.1));
            let mut buf = [0u8; 8];
            loop {
                match read_polled(&mut b, &mut buf) {
                    Ok(()) => b.write_all(&buf)?,
                    // The driver closed its end: done.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
        });
        pin(cpus.map(|c| c.0));
        let mut buf = [7u8; 8];
        // Each round trip timed alone and a batch's median kept, as the latency figures
        // do: a mean would carry every preemption of a loaded machine into the floor.
        let mut rtts = Vec::new();
        let mut run = |n: u64| -> io::Result<(Duration, f64)> {
            rtts.clear();
            let t = Instant::now();
            for _ in 0..n {
                let r = Instant::now();
                a.write_all(&buf)?;
                read_polled(&mut a, &mut buf)?;
                rtts.push(r.elapsed().as_secs_f64());
            }
            let total = t.elapsed();
            rtts.sort_by(f64::total_cmp);
            Ok((total, rtts[rtts.len() / 2]))
        };
        let probe = run(200)?.0.max(Duration::from_micros(1));
        let n = ((batch.as_secs_f64() / probe.as_secs_f64()) * 200.0).clamp(200.0, 1e6) as u64;
        let mut out = Vec::with_capacity(samples);
        for _ in 0..samples.max(1) {
            out.push(run(n)?.1 * 1e6 / 2.0);
        }
        a.shutdown(std::net::Shutdown::Both)?;
        echo.join().expect("the echo thread does not panic")?;
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_line_hop_takes_some_nanoseconds() {
        let v = cacheline_one_way_us(None, 3, Duration::from_millis(5));
        assert_eq!(v.len(), 3);
        // More than a nanosecond, less than 0.1 s, whatever the machine and its load.
        assert!(v.iter().all(|&us| us > 0.001 && us < 100_000.0), "{v:?}");
    }

    #[test]
    fn a_loopback_socket_hop_takes_microseconds() {
        let v = loopback_socket_one_way_us(None, 3, Duration::from_millis(5)).unwrap();
        assert_eq!(v.len(), 3);
        assert!(v.iter().all(|&us| us > 0.05 && us < 100_000.0), "{v:?}");
    }
}
