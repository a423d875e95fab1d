//! Copy bandwidth by size, page-aligned buffers: accio's copy_bytes vs one plain memcpy.
//! The median of 7 batches of ~0.8 GB each, per size and routine.
use std::time::Instant;

fn gbps(bytes: usize, mut copy: impl FnMut()) -> f64 {
    let iters = ((800usize << 20) / bytes).max(4);
    for _ in 0..iters / 10 + 2 {
        copy();
    }
    let mut rates: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                copy();
            }
            (bytes * iters) as f64 / t.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    rates[3]
}

fn main() {
    for n in [
        256usize << 10,
        512 << 10,
        1 << 20,
        2 << 20,
        4 << 20,
        8 << 20,
        32 << 20,
    ] {
        let src = accio_core::Region::anonymous(n).unwrap();
        let dst = accio_core::Region::anonymous(n).unwrap();
        // SAFETY: a fresh mapping of n bytes.
        unsafe { std::ptr::write_bytes(src.as_ptr(), 1, n) };
        let (s, d) = (src.as_ptr(), dst.as_ptr());
        let memcpy = gbps(n, || {
            // SAFETY: two distinct mappings of n bytes.
            unsafe { std::ptr::copy_nonoverlapping(s, d, n) }
        });
        let accio = gbps(n, || {
            // SAFETY: as above.
            unsafe { accio_core::copy_bytes(d, s, n) }
        });
        println!(
            "{:>6} KiB:  memcpy {memcpy:5.1} GB/s  accio {accio:5.1} GB/s",
            n >> 10
        );
    }
}
