//! Memory bandwidth: the ceiling of every in-memory data path.
//!
//! Figures are bytes *copied* per second; the memory traffic is twice that (read + write).
//! Buffers are page-aligned and touched before timing (fresh memory is slow to fault in on
//! VMs, see `MACHINE_NOTES.md`), so the figures are steady-state copy speed.

use std::time::{Duration, Instant};

use accio::{copy_bytes, Region};

/// Single-thread copy bandwidth of `size`-byte copies in GB/s (10^9 B/s): `samples` batches,
/// each running for about `batch` of wall time. Uses the same copy routine as accio's data
/// paths, between page-aligned buffers.
pub fn memcpy_gbps(size: usize, samples: usize, batch: Duration) -> Vec<f64> {
    let size = size.max(1);
    let src = Region::anonymous(size).expect("mapping a memcpy source buffer");
    let dst = Region::anonymous(size).expect("mapping a memcpy destination buffer");
    // SAFETY: both regions are `size` bytes, distinct mappings.
    let copy = || unsafe { copy_bytes(dst.as_ptr(), src.as_ptr(), size) };
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
