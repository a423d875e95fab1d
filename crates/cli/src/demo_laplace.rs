//! `accio demo laplace`: seed 001's distributed Jacobi/Laplacian over a rank world, with
//! its compute / synchronize / communicate breakdown per rank, the halo rate beside the pair
//! bandwidth of the same path, and the kernel's rate beside an in-place sweep of as many
//! bytes.
//!
//! Run inside a world (`accio run -n N`, or mpirun where the world supports it), every rank
//! computes its part and sends a summary to rank 0, which prints the tables and records the
//! figures. Run outside one, it starts itself under `accio run -n RANKS`.

use std::path::PathBuf;
use std::time::Duration;

use accio_grid::laplace::{self, LaplaceOptions, RankRun, StepTimes};
use accio_grid::{
    parse_shape, ArrayMemory, BoxError, Decomposition, ExchangeOptions, HaloExchange, Path,
};
use accio_results::metric::laplace as m;
use accio_results::model::{CeilingSource, Figure, Recorder, Unit};
use accio_world::World;
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

/// Arguments of `accio demo laplace`.
#[derive(clap::Args, Debug)]
pub struct LaplaceArgs {
    /// The global grid, `NYxNX` or `NZxNYxNX`, last axis contiguous in memory.
    #[arg(long, default_value = "4096x4096", value_parser = parse_grid)]
    grid: Shape,
    /// Iterations.
    #[arg(long, default_value_t = 100)]
    iters: usize,
    /// Ranks: started with `accio run` when not already in a world (default 2); inside a
    /// world it must equal the world's size.
    #[arg(long)]
    ranks: Option<usize>,
    /// Ranks per axis, e.g. `2x1` (default: the split that moves the fewest halo cells,
    /// preferring contiguous faces). `1x2` on a 2D grid makes every face strided.
    #[arg(long, value_parser = parse_dims)]
    dims: Option<Shape>,
    /// Wrap every axis around (no fixed borders).
    #[arg(long)]
    periodic: bool,
    /// Ghost layer thickness.
    #[arg(long, default_value_t = 1)]
    halo: usize,
    /// Use this backend for every pair instead of the world's choice (shm, tcp, ...).
    #[arg(long)]
    backend: Option<String>,
    /// How halos travel: `rma` (written into the neighbour's ghosts, then signalled) or
    /// `messages` (packed, sent, unpacked).
    #[arg(long, default_value = "rma")]
    path: Path,
    /// RMA path: how faces are stored into the neighbours: `streaming` (non-temporal
    /// stores, past the caches), `cached`, or `auto` (streaming when a rank's array is 8
    /// MiB or more, which its sweep evicts from the caches anyway).
    #[arg(long, default_value = "auto", value_parser = ["auto", "streaming", "cached"])]
    stores: String,
    /// Where each rank's array lives: `shared` (memory the neighbours map: faces land
    /// straight in the ghosts), `private` (on huge pages: faces land in a staging area and
    /// are copied into the ghosts), or `auto` (private for arrays of 8 MiB or more where
    /// the host gives huge pages to private memory and not to shared memory).
    #[arg(long, default_value = "auto")]
    array: ArrayMemory,
    /// Carry each cell's owner and global coordinates and verify every ghost: a halo sent
    /// to the wrong rank or region becomes a clear error; slower.
    #[arg(long)]
    checked: bool,
    /// After the run, compute the same grid on one rank and check that the result is the
    /// same bit for bit.
    #[arg(long)]
    verify: bool,
    /// Ping-pongs per pair measuring the pair bandwidth.
    #[arg(long, default_value_t = 50)]
    probe_reps: usize,
    /// Every N iterations, time one face crossing each pair right after the sweep, in the
    /// run's own cache state (the `comm/in-run` column); those iterations are left out of
    /// the phase times. 0: never.
    #[arg(long, default_value_t = 10)]
    probe_every: usize,
    /// Pin each rank to a core of its own (`core`, as `mpirun --bind-to core` does for up to
    /// one rank per core) or let them float (`none`). Ranks that would share cores are never
    /// pinned; they also yield their core while they wait instead of spinning.
    #[arg(long, default_value = "core", value_parser = ["core", "none"])]
    bind: String,
    /// Seconds a rank waits for a neighbour before failing.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Write the figures as JSON to FILE (rank 0).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// Extents per axis (a newtype so clap takes `4096x4096` as one value).
#[derive(Clone, Debug)]
struct Shape(Vec<usize>);

fn parse_grid(s: &str) -> Result<Shape, String> {
    parse_shape(s).map(Shape)
}

fn parse_dims(s: &str) -> Result<Shape, String> {
    let v: Result<Vec<usize>, _> = s.split(['x', 'X']).map(|p| p.trim().parse()).collect();
    v.map(Shape)
        .map_err(|_| format!("{s:?} is not a list of ranks per axis such as 2x1"))
}

/// A timed pair: (side, peer, face bytes, one-way us).
type PairTime = (String, usize, u64, f64);

/// What each rank reports to rank 0.
#[derive(Serialize, Deserialize, Debug, Clone)]
struct RankSummary {
    rank: usize,
    node: String,
    backends: Vec<String>,
    cells: usize,
    updated: usize,
    halo_bytes: u64,
    /// Where its array lives: `shared` or `private`.
    array: String,
    /// Faces as (side, peer, backend, elements, runs).
    faces: Vec<(String, usize, String, usize, usize)>,
    /// Per iteration, ms.
    compute: Vec<f64>,
    sync: Vec<f64>,
    communicate: Vec<f64>,
    /// Pairs this rank timed: (side, peer, face bytes, one-way us).
    probes: Vec<PairTime>,
    /// The same after a sweep of both ranks' arrays ([`HaloExchange::probe_after_sweep`]).
    swept: Vec<PairTime>,
    /// The same during the run, right after its sweeps ([`HaloExchange::probe_in_run`]):
    /// the median of each pair's in-run probes.
    in_run: Vec<PairTime>,
    /// This rank's put time while the neighbour put its face at the same moment, in the run
    /// (`InRunProbe::both`): every round, in order (the neighbour's rounds are the same
    /// rounds, in the same order).
    both: Vec<PairTime>,
    /// An in-place sweep of as many bytes as this rank's grid, GB/s, every rank at once.
    sweep_gbps: f64,
    digest: u64,
}

/// Runs the demo: in a world, this rank's part; outside one, starts the world.
pub fn run(a: LaplaceArgs) -> anyhow::Result<()> {
    if crate::common::launched_rank().is_none() {
        return launch(&a);
    }
    let w = World::from_env().context("joining the world")?;
    rank_main(&a, &w)
}

/// Starts `accio run -n RANKS` with this same command line.
fn launch(a: &LaplaceArgs) -> anyhow::Result<()> {
    let n = a.ranks.unwrap_or(2);
    if n == 0 {
        bail!("--ranks 0: the grid needs at least one rank");
    }
    // The cap of `accio run`, checked before it starts (ACCIO_OVERSUBSCRIBE=1 lifts it).
    crate::world_cmd::check_ranks(n, false).context("--ranks")?;
    let exe = std::env::current_exe().context("finding the accio binary")?;
    // `accio run` pins the ranks where each has a core (`--bind core`), as `place` did.
    let bind_to = if a.bind == "core" { "auto" } else { "none" };
    let status = std::process::Command::new(&exe)
        .arg("run")
        .arg("-n")
        .arg(n.to_string())
        .arg("--bind-to")
        .arg(bind_to)
        .arg("--")
        .arg(&exe)
        .args(std::env::args_os().skip(1))
        .status()
        .with_context(|| format!("starting {} run", exe.display()))?;
    if !status.success() {
        bail!("the ranks failed ({status})");
    }
    Ok(())
}

fn rank_main(a: &LaplaceArgs, w: &World) -> anyhow::Result<()> {
    let (rank, size) = (w.rank(), w.size());
    if let Some(n) = a.ranks.filter(|&n| n != size) {
        bail!("--ranks {n}, but the world has {size} ranks");
    }
    if !(a.timeout.is_finite() && a.timeout > 0.0) {
        bail!(
            "--timeout {}: must be a positive number of seconds",
            a.timeout
        );
    }
    let periodic = vec![a.periodic; a.grid.0.len()];
    let decomp = Decomposition::new(
        &a.grid.0,
        size,
        a.dims.as_ref().map(|d| d.0.as_slice()),
        &periodic,
        a.halo,
    )?;
    let own_core = place(w, a.bind == "core")?;
    let opts = ExchangeOptions {
        path: a.path,
        checked: a.checked,
        timeout: Duration::from_secs_f64(a.timeout),
        // With a core each, spin like an MPI library; on a shared core, hand it over at
        // every look, as MPI libraries do when oversubscribed (4 ranks on 2 vCPUs, 4096x4096:
        // total 4.77-4.83 ms per iteration against 4.83-5.01 after 100 us of spinning, 5
        // interleaved runs).
        spin: if own_core {
            Duration::MAX
        } else {
            Duration::ZERO
        },
        streaming: match a.stores.as_str() {
            "streaming" => Some(true),
            "cached" => Some(false),
            _ => None,
        },
        array: a.array,
    };
    let mut connect = |p: usize| -> Result<Box<dyn accio::Endpoint>, BoxError> {
        let ep = match &a.backend {
            Some(b) => w.endpoint_via(p, b),
            None => w.endpoint(p),
        };
        ep.map_err(BoxError::from)
    };
    let mut ex = HaloExchange::<f64>::new(&decomp, rank, opts, &mut connect)
        .with_context(|| format!("rank {rank}: setting up the grid"))?;
    let probes = ex
        .probe(a.probe_reps)
        .with_context(|| format!("rank {rank}: measuring the pair bandwidth"))?;
    let swept = ex
        .probe_after_sweep((a.probe_reps / 5).max(5))
        .with_context(|| format!("rank {rank}: measuring the pair bandwidth after a sweep"))?;
    let lopts = LaplaceOptions {
        iters: a.iters,
        probe_every: a.probe_every,
        ..Default::default()
    };
    let run = laplace::run(&mut ex, &lopts).with_context(|| format!("rank {rank}: the run"))?;
    let grid_bytes = run.cells * 8;
    let sweep = laplace::sweep_gbps(grid_bytes, 5);
    // The backend of each neighbour: the one asked for, or the world's choice for the pair.
    let mut pair_backends: Vec<(usize, String)> = Vec::new();
    for s in ex.sides() {
        if s.peer != rank && !pair_backends.iter().any(|(p, _)| *p == s.peer) {
            let b = match &a.backend {
                Some(b) => b.clone(),
                None => w.choice(s.peer)?.scheme.clone(),
            };
            pair_backends.push((s.peer, b));
        }
    }
    let summary = summarize(&ex, &run, w, [probes, swept], sweep, &pair_backends)?;
    drop(ex);

    let text = serde_json::to_vec(&summary)?;
    if rank != 0 {
        let ep = w
            .endpoint(0)
            .context("connecting to rank 0 for the summary")?;
        ep.send(&text)
            .with_context(|| format!("rank {rank}: sending the summary"))?;
        let mut ack = Vec::new();
        ep.recv_timeout(&mut ack, Some(opts_timeout(a)))
            .with_context(|| format!("rank {rank}: waiting for rank 0"))?;
        return Ok(());
    }
    let mut all = vec![summary];
    let mut eps = Vec::new();
    for p in 1..size {
        let ep = w
            .endpoint(p)
            .with_context(|| format!("connecting to rank {p}"))?;
        let mut buf = Vec::new();
        ep.recv_timeout(&mut buf, Some(opts_timeout(a)))
            .with_context(|| format!("receiving rank {p}'s summary"))?;
        all.push(serde_json::from_slice(&buf).with_context(|| format!("rank {p}'s summary"))?);
        eps.push(ep);
    }
    for ep in &eps {
        ep.send(b"done")?;
    }
    let verified = if a.verify {
        Some(one_rank_digest(&a.grid.0, &periodic, a.halo, &lopts)?)
    } else {
        None
    };
    report(a, &decomp, &all, verified)
}

/// Whether every rank of this node has a core of its own (the world is not
/// [oversubscribed](World::oversubscribed)); if so and `bind`, pins this rank to the core
/// of its place among the node's ranks. Ranks a launcher already pinned (`accio run`,
/// `mpirun --bind-to core`: each record names one CPU, no two the same) stay where they
/// are.
fn place(w: &World, bind: bool) -> anyhow::Result<bool> {
    let own_core = !w.oversubscribed();
    let node = w.node_ranks();
    let mut pinned: Vec<usize> = node
        .iter()
        .filter_map(|&r| crate::cpus::single(&w.table()[r].cpus))
        .collect();
    pinned.sort_unstable();
    pinned.dedup();
    if !own_core || !bind || pinned.len() == node.len() {
        return Ok(own_core);
    }
    let cpus = crate::cpus::allowed().context("reading this rank's CPUs")?;
    let k = node.iter().position(|&r| r == w.rank()).unwrap_or(0);
    // The ranks' CPUs together are enough; this rank's own may be fewer.
    if let Some(&cpu) = cpus.get(k) {
        crate::cpus::pin(cpu).with_context(|| format!("pinning rank {} to CPU {cpu}", w.rank()))?;
    }
    Ok(own_core)
}

fn opts_timeout(a: &LaplaceArgs) -> Duration {
    Duration::from_secs_f64(a.timeout)
}

fn summarize(
    ex: &HaloExchange<f64>,
    run: &RankRun,
    w: &World,
    [probes, swept]: [Vec<(accio_grid::SideInfo, Duration)>; 2],
    sweep_gbps: f64,
    pair_backends: &[(usize, String)],
) -> anyhow::Result<RankSummary> {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    // A phase's time in every iteration the in-run probe left alone, ms.
    let phase = |time: fn(&StepTimes) -> Duration| -> Vec<f64> {
        run.steps
            .iter()
            .filter(|s| !s.probed)
            .map(|s| ms(time(s)))
            .collect()
    };
    let backend_of = |peer: usize| {
        pair_backends
            .iter()
            .find(|(p, _)| *p == peer)
            .map_or_else(|| "self".to_string(), |(_, b)| b.clone())
    };
    let mut backends: Vec<String> = pair_backends.iter().map(|(_, b)| b.clone()).collect();
    backends.sort();
    backends.dedup();
    Ok(RankSummary {
        rank: run.rank,
        node: w.node(run.rank)?.to_string(),
        backends,
        cells: run.cells,
        updated: run.updated,
        halo_bytes: run.halo_bytes,
        array: ex.array_memory().name().to_string(),
        faces: ex
            .sides()
            .into_iter()
            .map(|s| {
                (
                    s.dir.to_string(),
                    s.peer,
                    backend_of(s.peer),
                    s.elems,
                    s.runs,
                )
            })
            .collect(),
        compute: phase(|s| s.compute),
        sync: phase(|s| s.sync),
        communicate: phase(|s| s.communicate),
        probes: pair_times(&probes),
        swept: pair_times(&swept),
        in_run: median_per_side(&pair_times(&run.probes.one_way)),
        both: pair_times(&run.probes.both),
        sweep_gbps,
        digest: run.digest,
    })
}

/// The median time of each side among `probes` (several samples per side).
fn median_per_side(probes: &[PairTime]) -> Vec<PairTime> {
    let mut out: Vec<(PairTime, Vec<f64>)> = Vec::new();
    for p in probes {
        match out.iter_mut().find(|(s, _)| s.0 == p.0 && s.1 == p.1) {
            Some((_, v)) => v.push(p.3),
            None => out.push((p.clone(), vec![p.3])),
        }
    }
    out.into_iter()
        .map(|((side, peer, bytes, _), v)| (side, peer, bytes, median(v)))
        .collect()
}

/// Probe results as (side, peer, face bytes, one-way us).
fn pair_times(probes: &[(accio_grid::SideInfo, Duration)]) -> Vec<PairTime> {
    probes
        .iter()
        .map(|(s, t)| {
            (
                s.dir.to_string(),
                s.peer,
                (s.elems * 8) as u64,
                t.as_secs_f64() * 1e6,
            )
        })
        .collect()
}

/// The digest of the same run on one rank, in this process (no endpoints).
fn one_rank_digest(
    grid: &[usize],
    periodic: &[bool],
    halo: usize,
    lopts: &LaplaceOptions,
) -> anyhow::Result<u64> {
    let d = Decomposition::new(grid, 1, None, periodic, halo)?;
    let mut ex = HaloExchange::<f64>::new(&d, 0, ExchangeOptions::default(), &mut |p| {
        Err(format!("a 1-rank grid has no neighbour {p}").into())
    })?;
    Ok(laplace::run(&mut ex, lopts)?.digest)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn stats(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let mut all: Vec<f64> = v.collect();
    all.sort_by(f64::total_cmp);
    let max = all.last().copied().unwrap_or(0.0);
    (median(all), max)
}

/// The one-way time of one face across each of `s`'s sides with another rank, from the
/// probes of whichever rank timed that pair; where both timed their own side, as in a
/// both-at-once probe, the median over rounds of the slower of the two puts (a round, like
/// an exchange, ends when both faces have crossed). The slowest side bounds an exchange
/// whose sides move at once.
fn slowest_side_us(
    s: &RankSummary,
    all: &[RankSummary],
    times: fn(&RankSummary) -> &[PairTime],
) -> Option<f64> {
    let side = |o: &RankSummary, dir: &str, peer: usize| -> Vec<f64> {
        times(o)
            .iter()
            .filter(|p| p.0 == dir && p.1 == peer)
            .map(|p| p.3)
            .collect()
    };
    let mut worst: Option<f64> = None;
    for (dir, peer, ..) in s.faces.iter().filter(|f| f.1 != s.rank) {
        let opposite = if let Some(rest) = dir.strip_prefix('+') {
            format!("-{rest}")
        } else {
            format!("+{}", &dir[1..])
        };
        let mine = side(s, dir, *peer);
        let theirs = all
            .iter()
            .find(|o| o.rank == *peer)
            .map_or_else(Vec::new, |o| side(o, &opposite, s.rank));
        let rounds: Vec<f64> = if mine.is_empty() || theirs.is_empty() {
            mine.into_iter().chain(theirs).collect()
        } else {
            mine.iter().zip(&theirs).map(|(a, b)| a.max(*b)).collect()
        };
        if !rounds.is_empty() {
            let t = median(rounds);
            worst = Some(worst.map_or(t, |w: f64| w.max(t)));
        }
    }
    worst
}

/// Where the ranks' arrays live: `shared`, `private`, or both with their counts.
fn arrays(all: &[RankSummary]) -> String {
    let private = all.iter().filter(|s| s.array == "private").count();
    match private {
        0 => "shared".to_string(),
        p if p == all.len() => "private".to_string(),
        p => format!("private on {p} rank(s), shared on {}", all.len() - p),
    }
}

fn report(
    a: &LaplaceArgs,
    decomp: &Decomposition,
    all: &[RankSummary],
    verified: Option<u64>,
) -> anyhow::Result<()> {
    let n = all.len();
    let dims = accio_grid::shape_name(&decomp.dims()[3 - decomp.ndim()..]);
    let mut backends: Vec<String> = all.iter().flat_map(|s| s.backends.clone()).collect();
    backends.sort();
    backends.dedup();
    let backend = if backends.is_empty() {
        "none".to_string()
    } else {
        backends.join("+")
    };
    // Off a terminal the lines below are whole (scripts/compare-laplace.sh reads them); on
    // a terminal narrower than a table, its rows are stacked and long lines wrapped.
    let width = crate::term::stdout_width();
    crate::term::print_para(
        &format!(
            "accio demo laplace: grid {} f64, {n} rank(s) as {dims}, halo {}, path {}, backend \
             {backend}, arrays {}, {} iterations{}",
            decomp.grid_name(),
            a.halo,
            a.path.name(),
            arrays(all),
            a.iters,
            if a.checked { ", checked" } else { "" }
        ),
        "  ",
    );
    let (cm, cx) = stats(all.iter().flat_map(|s| s.compute.clone()));
    let (sm, sx) = stats(all.iter().flat_map(|s| s.sync.clone()));
    let (mm, mx) = stats(all.iter().flat_map(|s| s.communicate.clone()));
    let total = |s: &RankSummary| -> Vec<f64> {
        (0..s.compute.len())
            .map(|i| s.compute[i] + s.sync[i] + s.communicate[i])
            .collect()
    };
    let (tm, tx) = stats(all.iter().flat_map(total));
    println!();
    let counted = all.first().map_or(0, |s| s.compute.len());
    let probed = if counted < a.iters {
        format!(
            " ({} more with an in-run probe, not counted)",
            a.iters - counted
        )
    } else {
        String::new()
    };
    let head = "time per iteration (ms)   median        max";
    let over = format!("over {n} rank(s) x {counted} iterations{probed}");
    if head.len() + 3 + over.chars().count() <= width {
        println!("{head}   {over}");
    } else {
        // The column heads stay above their columns; what they are over follows.
        println!("{head}");
        crate::term::print_para(&format!("  ({over})"), "   ");
    }
    for (name, med, max) in [
        ("compute", cm, cx),
        ("synchronize", sm, sx),
        ("communicate", mm, mx),
        ("total", tm, tx),
    ] {
        println!("  {name:<22} {med:>9.4} {max:>10.4}");
    }
    println!();
    const RANK_HEADERS: [&str; 12] = [
        "rank",
        "node",
        "cells",
        "compute",
        "sync",
        "comm",
        "comm/1-way",
        "comm/swept",
        "comm/in-run",
        "comm/both",
        "sweep/ceiling GB/s",
        "faces (side peer backend elems runs)",
    ];
    let rank_line = |c: &[String]| {
        format!(
            "{:<5} {:<36} {:>10} {:>9} {:>9} {:>9} {:>15} {:>15} {:>15} {:>15} {:>22}  {}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11]
        )
    };
    let mut rank_rows: Vec<Vec<String>> = Vec::new();
    let mut rec = Recorder::new(a.json.as_deref()).with_context(|| {
        format!(
            "creating {}",
            a.json
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        )
    })?;
    for s in all {
        let comm_med = median(s.communicate.clone());
        let one_way = slowest_side_us(s, all, |s| &s.probes);
        let pair = one_way.map(|us| s.halo_bytes as f64 / (us * 1e-6) / 1e9);
        let vs = |one_way: Option<f64>| match one_way {
            Some(us) if s.halo_bytes > 0 => format!("{:.2}x {:>5.1}us", comm_med * 1e3 / us, us),
            _ => "no halo".into(),
        };
        let (vs_one_way, vs_swept) = (vs(one_way), vs(slowest_side_us(s, all, |s| &s.swept)));
        let in_run = |times: fn(&RankSummary) -> &[PairTime]| {
            if all.iter().all(|s| times(s).is_empty()) {
                "not probed".to_string()
            } else {
                vs(slowest_side_us(s, all, times))
            }
        };
        let (vs_in_run, vs_both) = (in_run(|s| &s.in_run), in_run(|s| &s.both));
        let sweep_med = (s.updated * 8) as f64 / (median(s.compute.clone()) * 1e-3) / 1e9;
        let faces: Vec<String> = s
            .faces
            .iter()
            .map(|f| format!("{} {} {} {} {}", f.0, f.1, f.2, f.3, f.4))
            .collect();
        rank_rows.push(vec![
            s.rank.to_string(),
            truncate(&s.node, 36),
            s.cells.to_string(),
            format!("{:.4}", median(s.compute.clone())),
            format!("{:.4}", median(s.sync.clone())),
            format!("{comm_med:.4}"),
            vs_one_way,
            vs_swept,
            vs_in_run,
            vs_both,
            format!(
                "{:.2}/{:.2} = {:.0}%",
                sweep_med,
                s.sweep_gbps,
                100.0 * sweep_med / s.sweep_gbps
            ),
            faces.join(", "),
        ]);
        record_rank(&mut rec, a, decomp, &backend, s, pair)?;
    }
    let header: Vec<String> = RANK_HEADERS.iter().map(|h| h.to_string()).collect();
    print_table(&RANK_HEADERS, &header, &rank_rows, &rank_line, width);
    print_halo_rates(all, width);
    let digest = all.iter().fold(0u64, |acc, s| acc.wrapping_add(s.digest));
    println!();
    match verified {
        Some(one) if one == digest => crate::term::print_para(
            &format!(
                "verified: the final grid equals a 1-rank run bit for bit (digest {digest:#018x})"
            ),
            "  ",
        ),
        Some(one) => bail!(
            "verification failed: the {n}-rank grid (digest {digest:#018x}) differs from the 1-rank grid ({one:#018x})"
        ),
        None => crate::term::print_para(
            &format!(
                "digest of the final grid: {digest:#018x} (--verify compares it with a 1-rank run)"
            ),
            "  ",
        ),
    }
    if let Some(p) = &a.json {
        println!("figures written to {}", p.display());
    }
    Ok(())
}

/// A per-rank table: each row as `line` makes it (the fixed columns that scripts read) when
/// every line fits `width`; else [`render_fit`](accio_report::text::table::render_fit)'s
/// stacked rows, each under `rank N`.
fn print_table(
    headers: &[&str],
    header: &[String],
    rows: &[Vec<String>],
    line: &dyn Fn(&[String]) -> String,
    width: usize,
) {
    let lines: Vec<String> = std::iter::once(header)
        .chain(rows.iter().map(Vec::as_slice))
        .map(line)
        .collect();
    if lines.iter().all(|l| l.chars().count() <= width) {
        for l in lines {
            println!("{l}");
        }
        return;
    }
    let stacked: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r[0] = format!("rank {}", r[0]);
            r
        })
        .collect();
    print!(
        "{}",
        accio_report::text::table::render_fit(headers, &stacked, width)
    );
}

/// The halo rates per rank: the bytes each rank sends per iteration over its median
/// communicate time, beside the pair bandwidth of the same path from each probe (its
/// largest face over the one-way time of its slowest side).
fn print_halo_rates(all: &[RankSummary], width: usize) {
    if all.iter().all(|s| s.halo_bytes == 0) {
        return;
    }
    println!();
    crate::term::print_para(
        "halo per iteration, GB/s: the bytes each rank sends over its median communicate, \
         beside the pair bandwidth of the same path (its largest face one way)",
        "  ",
    );
    const HALO_HEADERS: [&str; 7] = [
        "rank",
        "bytes",
        "achieved",
        "pair: prepared",
        "after sweep",
        "in run",
        "both at once",
    ];
    let halo_line = |c: &[String]| {
        format!(
            "{:<5} {:>10} {:>9} {:>15} {:>15} {:>15} {:>15}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6]
        )
    };
    let mut rows: Vec<Vec<String>> = Vec::new();
    let gbps = |bytes: u64, us: Option<f64>| match us {
        Some(us) if us > 0.0 => format!("{:.3}", bytes as f64 / (us * 1e-6) / 1e9),
        _ => "-".to_string(),
    };
    for s in all {
        let comm_us = median(s.communicate.clone()) * 1e3;
        let face = s
            .faces
            .iter()
            .filter(|f| f.1 != s.rank)
            .map(|f| (f.3 * 8) as u64)
            .max()
            .unwrap_or(0);
        rows.push(vec![
            s.rank.to_string(),
            s.halo_bytes.to_string(),
            gbps(s.halo_bytes, Some(comm_us)),
            gbps(face, slowest_side_us(s, all, |s| &s.probes)),
            gbps(face, slowest_side_us(s, all, |s| &s.swept)),
            gbps(face, slowest_side_us(s, all, |s| &s.in_run)),
            gbps(face, slowest_side_us(s, all, |s| &s.both)),
        ]);
    }
    let header: Vec<String> = HALO_HEADERS.iter().map(|h| h.to_string()).collect();
    print_table(&HALO_HEADERS, &header, &rows, &halo_line, width);
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let t: String = s.chars().take(n - 1).collect();
        format!("{t}~")
    }
}

fn record_rank(
    rec: &mut Recorder,
    a: &LaplaceArgs,
    decomp: &Decomposition,
    backend: &str,
    s: &RankSummary,
    pair_gbps: Option<f64>,
) -> anyhow::Result<()> {
    let base = |metric: &str, unit: Unit, samples: Vec<f64>| {
        Figure::new(m::BENCH, metric, unit, samples).map(|f| {
            f.param("grid", decomp.grid_name())
                .param("ranks", all_ranks(decomp))
                .param("rank", s.rank as u64)
                .param("node", s.node.clone())
                .param("path", a.path.name())
                .param("backend", backend)
                .param("checked", a.checked)
                .param("halo_bytes", s.halo_bytes)
        })
    };
    for (metric, v) in [
        (m::COMPUTE, &s.compute),
        (m::SYNC, &s.sync),
        (m::COMMUNICATE, &s.communicate),
    ] {
        if let Some(f) = base(metric, Unit::Millis, v.clone()) {
            rec.push(f.method("wall time of the phase in each iteration"))?;
        }
    }
    if s.halo_bytes > 0 {
        let bw: Vec<f64> = s
            .communicate
            .iter()
            .map(|ms| s.halo_bytes as f64 / (ms * 1e-3) / 1e9)
            .collect();
        if let Some(mut f) = base(m::HALO_BW, Unit::GBps, bw) {
            f = f.method("halo bytes sent per iteration / communicate time");
            if let Some(p) = pair_gbps {
                f = f.param("pair_gbps", p);
            }
            rec.push(f)?;
        }
    }
    let sweep: Vec<f64> = s
        .compute
        .iter()
        .map(|ms| (s.updated * 8) as f64 / (ms * 1e-3) / 1e9)
        .collect();
    if let Some(f) = base(m::COMPUTE_BW, Unit::GBps, sweep) {
        rec.push(
            f.method("updated cells x 8 B / compute time (each read once, written once)")
                .ceiling(
                    "in-place sweep of as many bytes, every rank at once",
                    s.sweep_gbps,
                    CeilingSource::Measured,
                ),
        )?;
    }
    let probes = [
        (
            &s.probes,
            None,
            "median one-way time of one face, ping-pong by the run's path",
        ),
        (
            &s.swept,
            Some("after a sweep"),
            "median one-way time of one face, ping-pong by the run's path, \
             both arrays rewritten before each round",
        ),
        (
            &s.in_run,
            Some("in the run"),
            "median one-way time of one face, one ping-pong by the run's path right after \
             the run's sweep, every --probe-every iterations",
        ),
        (
            &median_per_side(&s.both),
            Some("in the run, both faces at once"),
            "median time of this rank's put while its neighbour puts at the same moment, \
             right after the run's sweep, every --probe-every iterations",
        ),
    ];
    for (times, cache, method) in probes {
        for (side, peer, bytes, us) in times {
            let Some(f) = base(
                m::PAIR_BW,
                Unit::GBps,
                vec![*bytes as f64 / (us * 1e-6) / 1e9],
            ) else {
                continue;
            };
            let f = f.param("side", side.clone()).param("peer", *peer as u64);
            let f = match cache {
                Some(c) => f.param("cache", c),
                None => f,
            };
            rec.push(f.method(method))?;
        }
    }
    Ok(())
}

fn all_ranks(decomp: &Decomposition) -> u64 {
    decomp.size() as u64
}
