//! `accio bench matrix`: one-way latency and streaming bandwidth for every ordered pair of
//! ranks of a world and every backend that can serve the pair, as matrix cells of the
//! result model (the report draws them as heat maps), with the transport rule's choice per
//! pair, its reason, and the figure that supports it.
//!
//! Where both ranks of a pair have a GPU (`--features cuda`, the driver and a device), the
//! pair's GPU memory is an endpoint too: `write_to` from a host or device window into the
//! other rank's device window, and from a device window into its host window, over every
//! backend that serves device windows (`device_bw`, rows and columns `rN … gpu0`).
//!
//! Run as the program of a world: `accio run -n 4 accio bench matrix` or
//! `mpirun -n 4 accio bench matrix` (built with `--features mpi`). Pairs are measured one
//! after another; rank 0 gathers the figures and prints the tables.

use std::sync::Arc;
use std::time::{Duration, Instant};

use accio::{Access, Endpoint, RmaFlags};
use accio_results::metric::matrix as m;
use accio_results::model::{Figure, Recorder, Unit};
use accio_world::World;
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::common::{self, CommonArgs};

/// Arguments of `accio bench matrix`.
#[derive(clap::Args, Debug, Clone)]
pub struct MatrixArgs {
    /// Samples per figure.
    #[arg(long = "reps", aliases = ["repetitions", "repeats", "samples"], value_name = "N", default_value_t = 5)]
    reps: usize,
    /// Writes the measured choice of every pair (bandwidth at the largest size: the backend
    /// whose worse direction is closest to the best in that direction) as a per-pair config
    /// file: point `ACCIO_WORLD_CONFIG` at it
    /// and the world's rule uses the measured choice.
    #[arg(long, value_name = "FILE")]
    write_config: Option<std::path::PathBuf>,
    /// Measures only these backends (comma-separated, e.g. `mpi`); default: every backend
    /// that can serve a pair.
    #[arg(long, alias = "backend", value_delimiter = ',', value_name = "SCHEMES")]
    backends: Vec<String>,
    /// Message sizes, comma-separated, binary suffixes; bandwidth decides at the largest
    /// [default: 8,4K,64K,2M,4M].
    #[arg(long, value_parser = common::parse_size_list)]
    sizes: Option<common::SizeList>,
    #[command(flatten)]
    flags: common::BenchFlags,
    /// What the bench runs with: the flags above and those given before the subcommand
    /// (see [`Self::resolve`]).
    #[arg(skip)]
    pub(crate) common: CommonArgs,
}

impl MatrixArgs {
    /// Fills [`Self::common`] from this subcommand's flags and those given before it
    /// (`accio bench --quick SUBCOMMAND`).
    pub(crate) fn resolve(&mut self, parent: &CommonArgs) {
        self.common = self.flags.common(None, self.sizes.clone(), false, parent);
    }
}

const DEFAULT_SIZES: &[u64] = &[8, 4096, 65536, 2 << 20, 4 << 20];
const TIMEOUT: Duration = Duration::from_secs(60);
/// How long a rank waits for its turn (pairs are measured one after another).
const WAIT: Duration = Duration::from_secs(3600);

/// One figure measured at a pair's sending rank.
#[derive(Debug, Serialize, Deserialize)]
struct Cell {
    src: usize,
    dst: usize,
    /// Which memory of `src` and of `dst`: host (empty) or the GPU (`gpu0`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    src_mem: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    dst_mem: String,
    scheme: String,
    size: u64,
    metric: String,
    samples: Vec<f64>,
}

fn recv(ep: &dyn Endpoint, buf: &mut Vec<u8>) -> anyhow::Result<usize> {
    ep.recv_timeout(buf, Some(TIMEOUT))
        .with_context(|| format!("receiving from {}", ep.peer_addr()))
}

/// Waits for a message without taking a core: polls `try_recv` between 1 ms sleeps. For the
/// waits between figures (a rank whose peer is still busy with another pair, the gather at
/// rank 0): four ranks share two cores on the CI machine, and a rank spinning in `recv`
/// there took CPU time from the pair being measured.
fn recv_idle(ep: &dyn Endpoint, buf: &mut Vec<u8>, timeout: Duration) -> anyhow::Result<usize> {
    let t0 = Instant::now();
    loop {
        if let accio::Progress::Ready(n) = ep
            .try_recv(buf)
            .with_context(|| format!("receiving from {}", ep.peer_addr()))?
        {
            return Ok(n);
        }
        if t0.elapsed() > timeout {
            bail!("nothing from {} within {timeout:?}", ep.peer_addr());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Ping-pong: `src` measures, `dst` echoes. One sample = half the median round trip.
fn latency(ep: &dyn Endpoint, src: bool, size: usize, reps: usize) -> anyhow::Result<Vec<f64>> {
    let msg = vec![0x5au8; size];
    let mut buf = Vec::with_capacity(size);
    let rounds = if size <= 65536 { 200 } else { 10 };
    let mut samples = Vec::new();
    for _ in 0..reps {
        let mut rtts = Vec::with_capacity(rounds);
        for _ in 0..rounds + 10 {
            if src {
                let t = Instant::now();
                ep.send(&msg)?;
                recv(ep, &mut buf)?;
                rtts.push(t.elapsed().as_secs_f64());
            } else {
                recv(ep, &mut buf)?;
                ep.send(&msg)?;
            }
        }
        if src {
            // The first rounds warm caches and connections.
            let mut r = rtts.split_off(10);
            r.sort_by(f64::total_cmp);
            samples.push(r[r.len() / 2] / 2.0 * 1e6);
        }
    }
    Ok(samples)
}

/// Streaming: `src` sends bursts, `dst` acknowledges the last message of each; GB/s per
/// burst. With `warm`, one untimed burst goes first (fresh buffers, connection setup).
fn bandwidth(
    ep: &dyn Endpoint,
    src: bool,
    size: usize,
    reps: usize,
    warm: bool,
) -> anyhow::Result<Vec<f64>> {
    let msg = vec![0xa5u8; size];
    let mut buf = Vec::with_capacity(size);
    // 256 MiB a sample (at most 4000 messages): a 64 MiB burst of 2 MiB messages lasted
    // 6-10 ms on one node, shorter than one scheduler slice of a loaded machine, and its
    // figures spread 3-12 GB/s.
    let count = ((256usize << 20) / size.max(1)).clamp(16, 4000);
    let mut samples = Vec::new();
    for rep in usize::from(!warm)..=reps {
        if src {
            let t = Instant::now();
            for _ in 0..count {
                ep.send(&msg)?;
            }
            recv(ep, &mut buf)?;
            let s = t.elapsed().as_secs_f64();
            if rep > 0 {
                samples.push((count * size) as f64 / s / 1e9);
            }
        } else {
            for _ in 0..count {
                recv(ep, &mut buf)?;
            }
            ep.send(b"k")?;
        }
    }
    Ok(samples)
}

/// Measures one pair over every backend in `eps`, interleaved: each round takes one sample
/// of every figure (backend, direction, size), so a slow phase of the machine (another
/// process, the host moving the vCPUs; `../shared/MACHINE_NOTES.md` items 5 and 7) lowers
/// the figures of every backend alike instead of deciding the choice. The first round also
/// warms every figure up, untimed.
fn measure_pair(
    eps: &[(String, Box<dyn Endpoint>)],
    (x, y): (usize, usize),
    me: usize,
    sizes: &[u64],
    reps: usize,
    out: &mut Vec<Cell>,
) -> anyhow::Result<()> {
    let first = out.len();
    // The pair's two ranks measure on different CPUs (restored after): ranks share a node's
    // CPUs unpinned under `netns-world.sh`, and two busy ranks that the scheduler put on one
    // CPU made latency samples bimodal (0.1 and 57 us over three repetitions).
    let _pinned = accio_bench::transport::pick_cpus().and_then(|(a, b)| {
        accio_bench::transport::AffinityGuard::pin(if me == x { a } else { b }).ok()
    });
    // The lower rank connects without the higher one's attention and may be early: it waits
    // idle until the higher rank, done with its earlier pairs, says go.
    if let Some((_, ep)) = eps.first() {
        if me == y {
            ep.send(b"go")?;
        } else {
            recv_idle(&**ep, &mut Vec::new(), WAIT)?;
        }
    }
    for round in 0..reps {
        for (scheme, ep) in eps {
            for (src, dst) in [(x, y), (y, x)] {
                let sending = me == src;
                for &size in sizes {
                    let lat = latency(&**ep, sending, size as usize, 1)
                        .with_context(|| format!("latency {src}->{dst} over {scheme}"))?;
                    let bw = bandwidth(&**ep, sending, size as usize, 1, round == 0)
                        .with_context(|| format!("bandwidth {src}->{dst} over {scheme}"))?;
                    if !sending {
                        continue;
                    }
                    for (metric, samples) in [(m::LATENCY, lat), (m::STREAM_BW, bw)] {
                        let cell = out[first..].iter_mut().find(|c| {
                            c.src == src
                                && c.dst == dst
                                && c.scheme == *scheme
                                && c.size == size
                                && c.metric == metric
                        });
                        match cell {
                            Some(c) => c.samples.extend(samples),
                            None => out.push(Cell {
                                src,
                                dst,
                                src_mem: String::new(),
                                dst_mem: String::new(),
                                scheme: scheme.clone(),
                                size,
                                metric: metric.into(),
                                samples,
                            }),
                        }
                    }
                }
            }
        }
    }
    gpu_pairs(eps, (x, y), me, sizes, reps, out)
}

/// The GPU every rank measures (the driver's first).
const GPU: u32 = 0;

/// The pair's GPU figures (see the module docs) over every backend in `eps` that serves
/// device windows, at the largest size: each side first says whether it has a GPU, then
/// per backend whether it registered its windows, so that both go on or skip together.
fn gpu_pairs(
    eps: &[(String, Box<dyn Endpoint>)],
    (x, y): (usize, usize),
    me: usize,
    sizes: &[u64],
    reps: usize,
    out: &mut Vec<Cell>,
) -> anyhow::Result<()> {
    let Some((_, first)) = eps.first() else {
        return Ok(());
    };
    let size = sizes.iter().copied().max().unwrap_or(0) as usize;
    let mine = size > 0 && accio_device::available().is_ok();
    if !agree(&**first, mine)? {
        return Ok(());
    }
    for (scheme, ep) in eps {
        let windows = (|| -> accio::Result<_> {
            let dev = Arc::new(accio_device::DeviceBuffer::zeroed(GPU, size).map_err(|e| {
                accio::Error::io(
                    "cuMemAlloc",
                    "the matrix's GPU window",
                    std::io::Error::other(e.to_string()),
                )
            })?);
            let dw = ep.register_device(dev, Access::READ_WRITE)?;
            let hw = ep.register(size, Access::READ_WRITE)?;
            Ok((dw, hw))
        })();
        if let Err(e) = &windows {
            eprintln!("matrix: rank {me}: no GPU window over {scheme}: {e}");
        }
        if !agree(&**ep, windows.is_ok())? {
            continue;
        }
        let (dw, hw) = windows.expect("agreed: registered");
        ep.send(&[dw.offset(), hw.offset()].map(u64::to_le_bytes).concat())?;
        let mut buf = Vec::new();
        recv(&**ep, &mut buf)?;
        let [peer_dev, peer_host] = [0, 8].map(|i| {
            buf.get(i..i + 8)
                .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        });
        // (from, to, local window, peer window): host → GPU, GPU → GPU, GPU → host.
        let kinds = [
            ("", "gpu0", hw.offset(), peer_dev),
            ("gpu0", "gpu0", dw.offset(), peer_dev),
            ("gpu0", "", dw.offset(), peer_host),
        ];
        // As many as `accio bench device`'s window figures time per pass.
        let copies = accio_device::copy::copies_per_pass(size as u64).min(64) as usize;
        for (src, dst) in [(x, y), (y, x)] {
            let sending = me == src;
            for &(src_mem, dst_mem, from, to) in &kinds {
                let mut samples = Vec::new();
                for rep in 0..=reps {
                    if sending {
                        let t = Instant::now();
                        for _ in 0..copies {
                            ep.write_to(from, size, to, RmaFlags::SYNC)
                                .with_context(|| {
                                    format!("{src}{src_mem} -> {dst}{dst_mem} over {scheme}")
                                })?;
                        }
                        let s = t.elapsed().as_secs_f64();
                        if rep > 0 {
                            samples.push((copies * size) as f64 / s / 1e9);
                        }
                        ep.send(b"k")?;
                    } else {
                        recv_idle(&**ep, &mut buf, TIMEOUT)?;
                    }
                }
                if sending {
                    out.push(Cell {
                        src,
                        dst,
                        src_mem: src_mem.into(),
                        dst_mem: dst_mem.into(),
                        scheme: scheme.clone(),
                        size: size as u64,
                        metric: m::DEVICE_BW.into(),
                        samples,
                    });
                }
            }
        }
        // The peer's last write into these windows came before its last "k".
        ep.unregister(dw.offset())?;
        ep.unregister(hw.offset())?;
    }
    Ok(())
}

/// Tells the peer `mine` and learns its answer: whether both say yes.
fn agree(ep: &dyn Endpoint, mine: bool) -> anyhow::Result<bool> {
    ep.send(&[u8::from(mine)])?;
    let mut buf = Vec::new();
    recv(ep, &mut buf)?;
    Ok(mine && buf.first() == Some(&1))
}

fn label(w: &World, r: usize) -> String {
    let t = &w.table()[r];
    format!("r{r} {} [{}]", t.node.host, t.cpus)
}

/// The label of memory `mem` (host: empty) of rank `r`.
fn mem_label(w: &World, r: usize, mem: &str) -> String {
    if mem.is_empty() {
        label(w, r)
    } else {
        format!("{} {mem}", label(w, r))
    }
}

/// Runs the bench as one rank of the world.
pub fn run(args: MatrixArgs, rec: &mut Recorder) -> anyhow::Result<()> {
    let mut w = World::from_env().context("accio bench matrix: joining the world")?;
    // Pairs are measured one after another: a rank may wait for its peer a long time.
    w.set_timeout(Duration::from_secs(3600));
    let me = w.rank();
    let sizes: Vec<u64> = args
        .common
        .sizes
        .as_ref()
        .map_or(DEFAULT_SIZES.to_vec(), |s| s.0.clone());
    if args.reps == 0 {
        bail!("--reps 0: at least one sample per figure");
    }
    let mut mine: Vec<Cell> = Vec::new();
    for x in 0..w.size() {
        for y in x + 1..w.size() {
            if me != x && me != y {
                continue;
            }
            let peer = if me == x { y } else { x };
            let schemes = w.usable(peer)?.into_iter();
            let schemes = schemes.filter(|s| args.backends.is_empty() || args.backends.contains(s));
            let mut eps = Vec::new();
            for scheme in schemes {
                let ep = w.endpoint_via(peer, &scheme)?;
                eps.push((scheme, ep));
            }
            measure_pair(&eps, (x, y), me, &sizes, args.reps, &mut mine)?;
            if me == x {
                let names: Vec<&str> = eps.iter().map(|(s, _)| s.as_str()).collect();
                eprintln!(
                    "matrix: ranks {x} and {y} over {} measured",
                    names.join(", ")
                );
            }
        }
    }
    // Gather at rank 0 over the chosen backends.
    if me != 0 {
        let ep = w.endpoint(0)?;
        ep.send(&serde_json::to_vec(&mine)?)?;
        let mut buf = Vec::new();
        recv_idle(&*ep, &mut buf, WAIT)?;
        return Ok(());
    }
    let mut cells = mine;
    let mut eps = Vec::new();
    for r in 1..w.size() {
        let ep = w.endpoint(r)?;
        let mut buf = Vec::new();
        recv_idle(&*ep, &mut buf, WAIT)?;
        let theirs: Vec<Cell> =
            serde_json::from_slice(&buf).with_context(|| format!("figures of rank {r}"))?;
        cells.extend(theirs);
        eps.push(ep);
    }
    for ep in &eps {
        ep.send(b"done")?;
    }
    for c in &cells {
        let unit = if c.metric == m::LATENCY {
            Unit::Micros
        } else {
            Unit::GBps
        };
        if let Some(f) = Figure::new(m::BENCH, &c.metric, unit, c.samples.clone()) {
            let method = if c.metric == m::DEVICE_BW {
                "write_to (SYNC) between registered windows, host or GPU memory (CUDA IPC over shm, pinned staging over tcp), one pair at a time"
            } else {
                "ping-pong (latency: half the median round trip) and bursts acknowledged by the receiver (bandwidth), one pair at a time"
            };
            rec.push(
                f.param("src", mem_label(&w, c.src, &c.src_mem))
                    .param("dst", mem_label(&w, c.dst, &c.dst_mem))
                    .param("backend", c.scheme.as_str())
                    .param("size", c.size)
                    .method(method),
            )?;
        }
    }
    print_choices(&w, &cells, &sizes);
    if let Some(path) = &args.write_config {
        let text = measured_config(w.size(), &cells, &sizes);
        std::fs::write(path, text)
            .with_context(|| format!("writing the measured choices to {}", path.display()))?;
        eprintln!(
            "matrix: measured choices written to {} (use ACCIO_WORLD_CONFIG={0})",
            path.display()
        );
    }
    if !args.common.stdout_taken() {
        print!("\n{}", accio_report::markdown(rec.report()));
    }
    Ok(())
}

/// One backend's standing for an unordered pair (see [`ranked`]).
struct Standing {
    scheme: String,
    /// Its stream bandwidth (median) in each direction, `a -> b` then `b -> a`.
    bw: [f64; 2],
    /// Its worse direction's bandwidth relative to the best backend in that direction.
    worst: f64,
}

/// Every backend measured in both directions of the unordered pair `a`, `b` at `big` bytes,
/// the pair's choice first. Both directions of a pair share one endpoint (the world gives
/// a pair one connection, and request-reply traffic needs both ways on it), so a pair gets
/// one backend: the one whose worse direction comes closest to the best backend measured
/// in that direction; ties go to the larger sum of both directions.
fn ranked(cells: &[Cell], a: usize, b: usize, big: u64) -> Vec<Standing> {
    let bw = |s: &str, src: usize, dst: usize| cell_median(cells, src, dst, s, big, m::STREAM_BW);
    let mut out: Vec<Standing> = Vec::new();
    for c in cells.iter().filter(|c| c.src == a && c.dst == b) {
        if out.iter().any(|x| x.scheme == c.scheme) {
            continue;
        }
        if let (Some(x), Some(y)) = (bw(&c.scheme, a, b), bw(&c.scheme, b, a)) {
            out.push(Standing {
                scheme: c.scheme.clone(),
                bw: [x, y],
                worst: 0.0,
            });
        }
    }
    let best = |i: usize| out.iter().map(|x| x.bw[i]).fold(0.0, f64::max);
    let (b0, b1) = (best(0), best(1));
    for x in &mut out {
        let r = |v: f64, b: f64| if b > 0.0 { v / b } else { 1.0 };
        x.worst = r(x.bw[0], b0).min(r(x.bw[1], b1));
    }
    out.sort_by(|x, y| {
        y.worst
            .total_cmp(&x.worst)
            .then((y.bw[0] + y.bw[1]).total_cmp(&(x.bw[0] + x.bw[1])))
    });
    out
}

/// Per-pair config lines naming each pair's measured choice at the largest size.
fn measured_config(size: usize, cells: &[Cell], sizes: &[u64]) -> String {
    let big = sizes.iter().copied().max().unwrap_or(0);
    let mut out = format!(
        "# accio bench matrix: per pair the backend whose worse direction is closest to the best measured in that direction, stream bandwidth at {big} B\n"
    );
    for a in 0..size {
        for b in a + 1..size {
            if let Some(x) = ranked(cells, a, b, big).first() {
                out.push_str(&format!(
                    "{a} {b} {} # {a}->{b} {:.3} GB/s, {b}->{a} {:.3} GB/s, worse direction {:.2}x of the best\n",
                    x.scheme, x.bw[0], x.bw[1], x.worst
                ));
            }
        }
    }
    out
}

/// The median of the cell measuring `metric` at `size` bytes from `src` to `dst` over
/// `scheme`, if there is one.
fn cell_median(
    cells: &[Cell],
    src: usize,
    dst: usize,
    scheme: &str,
    size: u64,
    metric: &str,
) -> Option<f64> {
    cells
        .iter()
        .find(|c| {
            c.src == src
                && c.dst == dst
                && c.scheme == scheme
                && c.size == size
                && c.metric == metric
        })
        .map(|c| median(&c.samples))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The rule's choice per ordered pair with its reason, and the bandwidth at the largest
/// size of the chosen backend against the best one measured.
fn print_choices(w: &World, cells: &[Cell], sizes: &[u64]) {
    let big = sizes.iter().copied().max().unwrap_or(0);
    let small = sizes.iter().copied().min().unwrap_or(0);
    println!("\nTransport choice per pair (one backend per pair, serving both directions: the one whose worse direction comes closest to the best measured in that direction, unless the pair is set by ACCIO_WORLD_CONFIG or ACCIO_TRANSPORT; bandwidth at {big} B, latency at {small} B; `--write-config` makes the world use these choices):\n");
    println!(
        "| pair | chosen | reason | chosen GB/s | best GB/s (backend) | chosen/best | chosen us |"
    );
    println!("|---|---|---|---|---|---|---|");
    let me = w.rank();
    for a in 0..w.size() {
        for b in 0..w.size() {
            if a == b {
                continue;
            }
            // The choice is symmetric; rank 0 knows its own pairs' choices, and every other
            // pair's by the same rule (the records of both ranks are in the table).
            let choice = if a == me {
                w.choice(b).ok().cloned()
            } else if b == me {
                w.choice(a).ok().cloned()
            } else {
                w.table()[0]
                    .rules
                    .choose(
                        a.min(b),
                        a.max(b),
                        &w.table()[a.min(b)].node,
                        &w.table()[a.max(b)].node,
                    )
                    .ok()
            };
            let Some(rule) = choice else { continue };
            // The rule's last step is "the fastest measured": here it was measured, so unless
            // the user set the pair (config line, ACCIO_TRANSPORT), the measured choice wins.
            let rules = &w.table()[0].rules;
            let set = rules.forced.is_some() || rules.pairs.lookup(a, b).is_some();
            let fastest = ranked(cells, a.min(b), a.max(b), big);
            let choice = match fastest.first() {
                Some(x) if !set => {
                    let others: Vec<String> = fastest[1..]
                        .iter()
                        .map(|o| format!("{} {:.2}x", o.scheme, o.worst))
                        .collect();
                    let without = if x.scheme == rule.scheme {
                        String::new()
                    } else {
                        format!("; without measurements: {}", rule.scheme)
                    };
                    let (lo, hi) = (a.min(b), a.max(b));
                    accio_world::Choice {
                        scheme: x.scheme.clone(),
                        reason: format!(
                            "measured: {} {:.2}x of the best in its worse direction \
                             ({lo}->{hi} {:.2}, {hi}->{lo} {:.2} GB/s; one backend serves both \
                             directions){}{} ({}){without}",
                            x.scheme,
                            x.worst,
                            x.bw[0],
                            x.bw[1],
                            if others.is_empty() { "" } else { " vs " },
                            others.join(", "),
                            rule.reason
                        ),
                    }
                }
                _ => rule,
            };
            let bw = |s: &str| cell_median(cells, a, b, s, big, m::STREAM_BW);
            let lat = cell_median(cells, a, b, &choice.scheme, small, m::LATENCY);
            let mut best: Option<(String, f64)> = None;
            for c in cells
                .iter()
                .filter(|c| c.src == a && c.dst == b && c.size == big && c.metric == m::STREAM_BW)
            {
                let v = median(&c.samples);
                if best.as_ref().is_none_or(|(_, b)| v > *b) {
                    best = Some((c.scheme.clone(), v));
                }
            }
            let chosen = bw(&choice.scheme);
            let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
            let ratio = match (chosen, &best) {
                (Some(c), Some((_, b))) if *b > 0.0 => format!("{:.2}", c / b),
                _ => "-".into(),
            };
            println!(
                "| {a} -> {b} | {} | {} | {} | {} ({}) | {ratio} | {} |",
                choice.scheme,
                choice.reason,
                f(chosen),
                f(best.as_ref().map(|b| b.1)),
                best.as_ref().map_or("-", |b| b.0.as_str()),
                f(lat)
            );
        }
    }
}

/// The bench run from main: recorder, then the common exports.
pub fn run_cmd(args: MatrixArgs, rec: &mut Recorder) -> anyhow::Result<()> {
    let common = args.common.clone();
    let r = run(args, rec);
    common::finish("matrix", &common, rec, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(src: usize, dst: usize, scheme: &str, gbps: f64) -> Cell {
        Cell {
            src,
            dst,
            src_mem: String::new(),
            dst_mem: String::new(),
            scheme: scheme.into(),
            size: 1 << 21,
            metric: m::STREAM_BW.into(),
            samples: vec![gbps],
        }
    }

    /// GPU figures stand beside the host ones and never decide a pair's backend; host
    /// cells travel without memory fields, as before GPUs were endpoints.
    #[test]
    fn gpu_cells_do_not_decide_the_choice_and_host_cells_keep_their_form() {
        let gpu = |src, dst, scheme: &str, gbps| Cell {
            src_mem: "gpu0".into(),
            dst_mem: "gpu0".into(),
            metric: m::DEVICE_BW.into(),
            ..cell(src, dst, scheme, gbps)
        };
        let cells = [
            cell(0, 1, "shm", 4.0),
            cell(1, 0, "shm", 4.0),
            cell(0, 1, "tcp", 2.0),
            cell(1, 0, "tcp", 2.0),
            gpu(0, 1, "tcp", 900.0),
            gpu(1, 0, "tcp", 900.0),
        ];
        let r = ranked(&cells, 0, 1, 1 << 21);
        assert_eq!(r[0].scheme, "shm");
        assert_eq!(r[0].bw, [4.0, 4.0]);
        let host = serde_json::to_string(&cells[0]).unwrap();
        assert!(!host.contains("_mem"), "{host}");
        let back: Cell = serde_json::from_str(&host).unwrap();
        assert!(back.src_mem.is_empty() && back.dst_mem.is_empty());
        let g: Cell = serde_json::from_str(&serde_json::to_string(&cells[4]).unwrap()).unwrap();
        assert_eq!(
            (g.src_mem.as_str(), g.metric.as_str()),
            ("gpu0", m::DEVICE_BW)
        );
    }

    #[test]
    fn a_pair_gets_the_backend_whose_worse_direction_is_best_not_the_largest_sum() {
        // mpi: fastest 0 -> 1 and the largest sum (11.5 against 8.5), but 1 -> 0 at 0.375x
        // of tcp's; tcp's worse direction is 0 -> 1 at 0.45x of mpi's.
        let cells = [
            cell(0, 1, "mpi", 10.0),
            cell(1, 0, "mpi", 1.5),
            cell(0, 1, "tcp", 4.5),
            cell(1, 0, "tcp", 4.0),
        ];
        let r = ranked(&cells, 0, 1, 1 << 21);
        assert_eq!(r[0].scheme, "tcp");
        assert_eq!(r[0].bw, [4.5, 4.0]);
        assert!((r[0].worst - 0.45).abs() < 1e-9, "{}", r[0].worst);
        assert!((r[1].worst - 0.375).abs() < 1e-9, "{}", r[1].worst);
    }
}
