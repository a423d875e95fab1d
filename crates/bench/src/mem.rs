//! Memory bandwidth: the ceiling of every in-memory data path.
//!
//! Figures are bytes *copied* per second; the memory traffic is twice that (read + write).
//! Buffers are page-aligned and touched before timing (fresh memory is slow to fault in on
//! VMs, see `MACHINE_NOTES.md`), so the figures are steady-state copy speed.
//!
//! [`memcpy_gbps`] is one thread; [`memcpy_threads_gbps`] runs N threads, each copying
//! between its own source and destination, released together by a barrier, and reports
//! total bytes / (last finish − first start). [`MemBench`] sweeps thread counts and buffer
//! sizes from in-cache (64 KiB) to DRAM (256 MiB) for `accio bench mem`; `bench fs` calls
//! [`memcpy_threads_gbps`] for the ceilings of memory-backed file systems.

use std::io;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use accio::{copy_bytes, Region};

use accio_results::event::Event;
use accio_results::hazard::{Hazard, HazardKind};
use accio_results::model::{Figure, Recorder, Unit};

use crate::emit;
use accio_results::size::format_size;

/// Single-thread copy bandwidth of `size`-byte copies in GB/s (10^9 B/s): `samples` batches,
/// each running for about `batch` of wall time. Uses the same copy routine as accio's data
/// paths, between page-aligned buffers.
pub fn memcpy_gbps(size: usize, samples: usize, batch: Duration) -> Vec<f64> {
    copy_gbps(size, samples, batch, false)
}

/// [`memcpy_gbps`] with the copy's stores of choice: through the cache (`copy_bytes`), or
/// non-temporal (`streaming`: `accio::copy_streaming`, which shm uses for large
/// payloads when the cores are far apart and which can beat a cached copy of the same
/// size: it does not read each destination line first).
pub fn copy_gbps(size: usize, samples: usize, batch: Duration, streaming: bool) -> Vec<f64> {
    let size = size.max(1);
    let src = Region::anonymous(size).expect("mapping a memcpy source buffer");
    let dst = Region::anonymous(size).expect("mapping a memcpy destination buffer");
    // SAFETY: both regions are `size` bytes, distinct mappings.
    let copy = || unsafe {
        if streaming {
            accio::copy_streaming(dst.as_ptr(), src.as_ptr(), size)
        } else {
            copy_bytes(dst.as_ptr(), src.as_ptr(), size)
        }
    };
    // SAFETY: writing a fresh private mapping of `size` bytes.
    unsafe { std::ptr::write_bytes(src.as_ptr(), 0x5a, size) };
    copy();
    // Calibrate the iteration count for one batch.
    let mut iters = 1usize;
    loop {
        let t = Instant::now();
        for _ in 0..iters {
            copy();
        }
        let e = t.elapsed();
        if e >= batch / 4 || iters >= 1 << 24 {
            let scale = batch.as_secs_f64() / e.as_secs_f64().max(1e-9);
            iters = ((iters as f64 * scale) as usize).clamp(1, 1 << 26);
            break;
        }
        iters *= 2;
    }
    (0..samples.max(1))
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                copy();
                std::hint::black_box(&dst);
            }
            (size * iters) as f64 / t.elapsed().as_secs_f64() / 1e9
        })
        .collect()
}

/// Runs `work` once per sample on one thread per item, all released together by a barrier,
/// and returns per sample the aggregate rate in GB/s: `bytes` copied per sample in all / (last
/// finish − first start), never the sum of per-thread rates.
fn timed_threads<T: Sync>(
    items: &[T],
    samples: usize,
    bytes: f64,
    work: impl Fn(&T) + Sync,
) -> Vec<f64> {
    let barrier = Barrier::new(items.len());
    let spans: Vec<Vec<(Instant, Instant)>> = std::thread::scope(|s| {
        let handles: Vec<_> = items
            .iter()
            .map(|item| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    (0..samples)
                        .map(|_| {
                            barrier.wait();
                            let t0 = Instant::now();
                            work(item);
                            (t0, Instant::now())
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("copy thread panicked"))
            .collect()
    });
    (0..samples)
        .map(|k| {
            let start = spans.iter().map(|v| v[k].0).min().expect("threads >= 1");
            let end = spans.iter().map(|v| v[k].1).max().expect("threads >= 1");
            bytes / end.duration_since(start).as_secs_f64().max(1e-9) / 1e9
        })
        .collect()
}

/// Which way a file-like copy goes, as a file system copies a write or a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Direction {
    /// From a record buffer into the span (a write into the page cache or a tmpfs file).
    Into,
    /// From the span into a record buffer (a read).
    OutOf,
}

/// The copy a file system does for one thread's file, without the system calls: `record`
/// bytes at a time between one reused, page-aligned record buffer and the thread's own
/// `span`-byte region, sequentially across the region, `dir` saying which way. Each of
/// `threads` threads copies its whole span once per sample (the span written beforehand,
/// so every page is present); all start at a barrier; a sample is total bytes / (last
/// finish − first start), in GB/s of bytes copied. This is the memcpy ceiling of the same
/// work as an fs bench figure: the same record size, the same bytes per thread (so the same
/// cache or DRAM regime), the same thread count and direction.
pub fn stream_copy_gbps(
    record: usize,
    span: usize,
    threads: usize,
    dir: Direction,
    samples: usize,
) -> io::Result<Vec<f64>> {
    let record = record.max(1);
    let span = span.max(record) / record * record;
    let (threads, samples) = (threads.max(1), samples.max(1));
    let map = |bytes: usize, what: &str| {
        Region::anonymous(bytes)
            .map_err(|e| io::Error::other(format!("mapping a {bytes}-byte {what}: {e}")))
    };
    let mut bufs = Vec::with_capacity(threads);
    for _ in 0..threads {
        let (rec, big) = (map(record, "record buffer")?, map(span, "copy span")?);
        // SAFETY: fresh private mappings of `record` and `span` bytes that nothing else
        // uses; writing them faults every page in before any timing.
        unsafe {
            std::ptr::write_bytes(rec.as_ptr(), 0x5a, record);
            std::ptr::write_bytes(big.as_ptr(), 0xa5, span);
        }
        bufs.push((rec, big));
    }
    let bytes = (threads * span) as f64;
    Ok(timed_threads(&bufs, samples, bytes, |(rec, big)| {
        for off in (0..span).step_by(record) {
            // SAFETY: `off + record <= span` (span is a multiple of record); both regions
            // belong to this thread alone.
            unsafe {
                let at = big.as_ptr().add(off);
                match dir {
                    Direction::Into => copy_bytes(at, rec.as_ptr(), record),
                    Direction::OutOf => copy_bytes(rec.as_ptr(), at, record),
                }
            }
        }
        std::hint::black_box((rec, big));
    }))
}

/// 1, 2, 4, ... doubling below the number of online CPUs, then that number itself.
pub fn default_threads() -> Vec<usize> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |t| Some(t * 2))
        .take_while(|&t| t < n)
        .collect();
    v.push(n);
    v
}

/// One thread's source and destination, page-aligned, written once so that every page is
/// faulted in before any timing.
struct Pair {
    src: Region,
    dst: Region,
    size: usize,
}

impl Pair {
    fn new(size: usize) -> io::Result<Pair> {
        let map = |what: &str| {
            Region::anonymous(size)
                .map_err(|e| io::Error::other(format!("mapping a {size}-byte memcpy {what}: {e}")))
        };
        let p = Pair {
            src: map("source")?,
            dst: map("destination")?,
            size,
        };
        // SAFETY: writing a fresh private mapping of `size` bytes that nothing else uses.
        unsafe { std::ptr::write_bytes(p.src.as_ptr(), 0x5a, size) };
        p.copy();
        Ok(p)
    }

    fn copy(&self) {
        // SAFETY: both regions are `size` bytes and distinct mappings owned by this pair.
        unsafe { copy_bytes(self.dst.as_ptr(), self.src.as_ptr(), self.size) };
        std::hint::black_box(&self.dst);
    }
}

/// Copies per batch so that one thread spends about `batch` copying `pair`.
fn calibrate(pair: &Pair, batch: Duration) -> usize {
    let mut iters = 1usize;
    loop {
        let t = Instant::now();
        for _ in 0..iters {
            pair.copy();
        }
        let e = t.elapsed();
        if e >= batch / 4 || iters >= 1 << 24 {
            let scale = batch.as_secs_f64() / e.as_secs_f64().max(1e-9);
            return ((iters as f64 * scale) as usize).clamp(1, 1 << 26);
        }
        iters *= 2;
    }
}

/// Aggregate copy bandwidth of `threads` threads in GB/s (10^9 bytes copied per second),
/// `samples` times. Each thread copies `size` bytes between its own page-aligned,
/// pre-faulted buffers the same number of times (calibrated so one thread takes about
/// `batch`); all start at a barrier, and a sample is total bytes / (last finish − first
/// start), never the sum of per-thread rates. With one thread this measures what
/// [`memcpy_gbps`] measures.
pub fn memcpy_threads_gbps(
    size: usize,
    threads: usize,
    samples: usize,
    batch: Duration,
) -> io::Result<Vec<f64>> {
    let (size, threads, samples) = (size.max(1), threads.max(1), samples.max(1));
    let pairs = (0..threads)
        .map(|_| Pair::new(size))
        .collect::<io::Result<Vec<_>>>()?;
    let iters = calibrate(&pairs[0], batch);
    let bytes = (threads * iters * size) as f64;
    Ok(timed_threads(&pairs, samples, bytes, |p| {
        for _ in 0..iters {
            p.copy();
        }
    }))
}

/// Default buffer sizes of `accio bench mem`: 64 KiB (in L2) to 256 MiB (DRAM), x4 steps.
pub const DEFAULT_SIZES: [u64; 7] = [
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
    256 << 20,
];
/// Sizes of the quick variant.
pub const QUICK_SIZES: [u64; 4] = [64 << 10, 1 << 20, 16 << 20, 256 << 20];

/// `accio bench mem`: memcpy bandwidth by thread count and buffer size (a builder).
#[derive(Clone, Debug)]
pub struct MemBench {
    threads: Vec<usize>,
    sizes: Vec<u64>,
    samples: usize,
    batch: Duration,
}

impl Default for MemBench {
    fn default() -> Self {
        MemBench::new()
    }
}

impl MemBench {
    /// Defaults: [`default_threads`], [`DEFAULT_SIZES`], 5 samples of 50 ms.
    pub fn new() -> MemBench {
        MemBench {
            threads: default_threads(),
            sizes: DEFAULT_SIZES.to_vec(),
            samples: 5,
            batch: Duration::from_millis(50),
        }
    }

    /// The quick variant: [`QUICK_SIZES`], 3 samples of 20 ms.
    pub fn quick() -> MemBench {
        MemBench {
            sizes: QUICK_SIZES.to_vec(),
            samples: 3,
            batch: Duration::from_millis(20),
            ..MemBench::new()
        }
    }

    /// Thread counts (default [`default_threads`]).
    pub fn threads(mut self, threads: &[usize]) -> MemBench {
        let mut t: Vec<usize> = threads.iter().copied().filter(|&t| t > 0).collect();
        t.sort_unstable();
        t.dedup();
        self.threads = t;
        self
    }

    /// Bytes per copy (default [`DEFAULT_SIZES`]).
    pub fn sizes(mut self, sizes: &[u64]) -> MemBench {
        self.sizes = sizes.to_vec();
        self
    }

    /// Samples per figure (default 5).
    pub fn samples(mut self, n: usize) -> MemBench {
        self.samples = n.max(1);
        self
    }

    /// Approximate length of one sample (default 50 ms).
    pub fn batch(mut self, d: Duration) -> MemBench {
        self.batch = d;
        self
    }

    /// Measures every size and thread count, recording one `mem`/`memcpy` figure each and
    /// reporting through `events` (one unit of work per size and thread count).
    /// Combinations whose buffers (2 x size x threads) would take more than half of
    /// `MemAvailable` are skipped with a warning.
    pub fn run(&self, rec: &mut Recorder, events: &mut dyn FnMut(Event<'_>)) -> io::Result<()> {
        events(Event::Started {
            bench: "mem",
            total: (self.sizes.len() * self.threads.len()) as u64,
        });
        let avail = accio_results::node::probe::mem_available();
        for &size in &self.sizes {
            for &n in &self.threads {
                // Ctrl-C ends the run between two figures (each a few batches long).
                if crate::cancel::interrupted() {
                    return Err(io::Error::new(io::ErrorKind::Interrupted, "interrupted"));
                }
                self.measure(size, n, avail, rec, events)?;
                events(Event::Advanced(1));
            }
        }
        events(Event::Done);
        Ok(())
    }

    fn measure(
        &self,
        size: u64,
        n: usize,
        avail: Option<u64>,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> io::Result<()> {
        let need = 2 * size * n as u64;
        if avail.is_some_and(|a| need > a / 2) {
            let w = format!(
                "mem: skipped {} x {n} threads: {} of buffers is more than half of the available \
                 memory",
                format_size(size),
                accio_results::size::human_bytes(need)
            );
            return emit::hazard(rec, events, Hazard::new(HazardKind::NotMeasured, "mem", w));
        }
        let samples = memcpy_threads_gbps(size as usize, n, self.samples, self.batch)?;
        let Some(fig) = Figure::new("mem", "memcpy", Unit::GBps, samples) else {
            return Ok(());
        };
        let fig = fig.param("size", size).param("threads", n).method(
            "accio::copy_bytes between page-aligned pre-faulted buffers, one pair per thread, \
             barrier start; bytes copied per second (memory traffic is twice that)",
        );
        let noisy = (fig.summary.spread() > 0.25).then(|| {
            Hazard::new(
                HazardKind::Noisy,
                "mem",
                format!(
                    "mem {} x {n}: noisy, min-max spread {:.0}% of the median",
                    format_size(size),
                    fig.summary.spread() * 100.0
                ),
            )
            .about([&fig])
        });
        emit::figure(rec, events, fig)?;
        if let Some(h) = noisy {
            emit::hazard(rec, events, h)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_copies_both_ways_give_a_positive_rate_per_sample() {
        for dir in [Direction::Into, Direction::OutOf] {
            let v = stream_copy_gbps(64 << 10, 1 << 20, 2, dir, 3).unwrap();
            assert_eq!(v.len(), 3);
            assert!(v.iter().all(|&g| g > 0.0 && g.is_finite()), "{v:?}");
        }
    }

    #[test]
    fn default_threads_double_up_to_the_cpu_count() {
        let t = default_threads();
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(t[0], 1);
        assert_eq!(*t.last().unwrap(), n);
        assert!(t.windows(2).all(|w| w[1] > w[0] && w[1] <= 2 * w[0]));
    }

    #[test]
    fn threaded_memcpy_gives_positive_samples() {
        let v = memcpy_threads_gbps(64 << 10, 2, 3, Duration::from_millis(2)).unwrap();
        assert_eq!(v.len(), 3);
        // Any positive rate: a thread descheduled for a few ms makes a tiny sample slow.
        assert!(v.iter().all(|&g| g > 0.0 && g.is_finite()), "{v:?}");
    }
}
