//! Times the Laplacian kernel alone on one rank, without exchanges: the figure to compare
//! with `benches/peers/laplace_mpi.c` run on one rank, and with the in-place sweep ceiling.
//!
//! `cargo run --release -p accio-grid --example kernel -- [NYxNX|NZxNYxNX] [STEPS]`
//! prints the minimum and the median time per step over STEPS steps (default 4096x4096, 100).

use std::time::Instant;

use accio_grid::laplace::{self, Kernel, LaplaceOptions};
use accio_grid::{parse_shape, Decomposition, ExchangeOptions, HaloExchange};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let shape = parse_shape(&args.next().unwrap_or_else(|| "4096x4096".into()))?;
    let steps: usize = args.next().map_or(Ok(100), |s| s.parse())?;
    let d = Decomposition::new(&shape, 1, None, &vec![false; shape.len()], 1)?;
    let mut ex = HaloExchange::<f64>::new(&d, 0, ExchangeOptions::default(), &mut |_| {
        unreachable!("one rank has no peers")
    })?;
    laplace::init(&mut ex, 1);
    let coef = laplace::coef(&d, &LaplaceOptions::default());
    let mut kernel = Kernel::new(&d, ex.layout());
    let mut times: Vec<f64> = (0..steps.max(1))
        .map(|_| {
            let t = Instant::now();
            kernel.step(ex.field_mut(), coef);
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let sweep = laplace::sweep_gbps(ex.layout().elems() * 8, 10);
    let best = (kernel.updated() * 8) as f64 / (times[0] * 1e-3) / 1e9;
    println!(
        "kernel {}: min {:.3} ms, median {:.3} ms per step ({best:.1} GB/s of cells at the min, \
         {:.0}% of the in-place sweep's {sweep:.1}); digest {:#018x}",
        d.grid_name(),
        times[0],
        times[times.len() / 2],
        100.0 * best / sweep,
        laplace::digest(&ex)
    );
    Ok(())
}
