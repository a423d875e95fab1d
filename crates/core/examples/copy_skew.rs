//! Copy bandwidth by (dst - src) mod 4096: accio's copy_bytes vs plain memcpy.
use std::time::Instant;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(256 << 10);
    let src = accio_core::Region::anonymous(n + 8192).unwrap();
    let dst = accio_core::Region::anonymous(n + 8192).unwrap();
    // SAFETY: fresh mappings of n + 8192 bytes.
    unsafe { std::ptr::write_bytes(src.as_ptr(), 1, n + 8192) };
    // SAFETY: as above.
    unsafe { std::ptr::write_bytes(dst.as_ptr(), 1, n + 8192) };
    for skew in [0usize, 8, 16, 32, 48, 64, 96, 128, 256, 2048, 4032, 4080] {
        let mut row = format!("skew {skew:>4}:");
        for which in ["memcpy", "accio"] {
            // SAFETY: skew < 8192, inside the mapping.
            let d = unsafe { dst.as_ptr().add(skew) };
            let s = src.as_ptr();
            let iters = (4usize << 30) / n;
            let t = Instant::now();
            for _ in 0..iters {
                // SAFETY: both ranges are inside their mappings and distinct.
                unsafe {
                    if which == "memcpy" {
                        std::ptr::copy_nonoverlapping(s, d, n)
                    } else {
                        accio_core::copy_bytes(d, s, n)
                    }
                }
                std::hint::black_box(d);
            }
            row += &format!(
                "  {which} {:5.1} GB/s",
                (iters * n) as f64 / t.elapsed().as_secs_f64() / 1e9
            );
        }
        println!("{row}");
    }
}
