//! `accio bench device`'s window figures: RMA into another process's device window over
//! `shm` and over `tcp` on loopback, the path of `Endpoint::register_device`. A peer
//! process (`accio __device-window-peer`) registers a device window and a host window of
//! the size; this
//! process times, pass by pass and interleaved, `write_to` from its host window into the
//! peer's host window (`window_h2h`, the transport's own rate), from its host window into
//! the peer's device window (`window_h2d`), and from its device window into the peer's
//! device window (`window_d2d`), then has the peer check its device bytes. Ceilings: the
//! same run's device→device rate at that size (`window_d2d`), and the lower of the same
//! run's `window_h2h` and host→device pinned rate (`window_h2d`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use accio::device::DeviceBuffer;
use accio::{Access, DeviceMemory, Endpoint, RmaFlags};
use accio_device::DeviceInfo;
use accio_results::event::Event;
use accio_results::metric::device as names;
use accio_results::model::{CeilingSource, Figure, Recorder, Unit};
use anyhow::{bail, Context as _};

/// The hidden subcommand of the peer process (declared in `main.rs`).
pub(crate) const PEER_SUBCOMMAND: &str = "__device-window-peer";

const TIMEOUT: Duration = Duration::from_secs(30);

/// How the window figures are measured (their `method`).
const METHOD: &str = "another process registers a device window (and a host window) of \
    the size; this process times passes of write_to (SYNC) from its own host or device \
    window into them, the three kinds interleaved pass by pass, median of the passes after \
    a warm-up pass; the peer checks its device bytes after";

/// Arguments of the hidden peer process.
#[derive(clap::Args, Debug)]
pub struct WindowPeerArgs {
    /// Where this process listens.
    #[arg(long)]
    addr: String,
    #[arg(long)]
    gpu: u32,
    #[arg(long)]
    size: usize,
}

/// Byte `i` of the content of stream `seed`.
fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ seed ^ (i >> 11) as u8)
        .collect()
}

fn words(ep: &dyn Endpoint) -> anyhow::Result<Vec<u64>> {
    let mut buf = Vec::new();
    ep.recv_timeout(&mut buf, Some(TIMEOUT))?;
    Ok(buf
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect())
}

fn send(ep: &dyn Endpoint, w: &[u64]) -> anyhow::Result<()> {
    let b: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    Ok(ep.send(&b)?)
}

/// The peer process: connects back, registers its windows, answers checks until told
/// to stop (`[0]`); a check `[1, seed]` answers `[1]` when its device bytes are stream
/// `seed`, else `[0, first wrong byte]`.
pub fn run_peer(a: WindowPeerArgs) -> anyhow::Result<()> {
    let ep = accio::connect(&a.addr, TIMEOUT).context("connecting to the bench")?;
    let dev = Arc::new(DeviceBuffer::alloc(a.gpu, a.size)?);
    let dw = ep.register_device(dev.clone(), Access::READ_WRITE)?;
    let hw = ep.register(a.size, Access::READ_WRITE)?;
    send(&*ep, &[dw.offset(), hw.offset()])?;
    let mut back = vec![0u8; a.size];
    loop {
        match words(&*ep)?.as_slice() {
            [0] => return Ok(()),
            [1, seed] => {
                DeviceMemory::read(&*dev, 0, &mut back)?;
                let want = content(a.size, *seed as u8);
                match back.iter().zip(&want).position(|(x, y)| x != y) {
                    None => send(&*ep, &[1])?,
                    Some(at) => send(&*ep, &[0, at as u64])?,
                }
            }
            other => bail!("the bench sent {other:?}"),
        }
    }
}

/// The window figures of `gpus` at `sizes` over each of [`BACKENDS`], recorded in `rec` beside the run's
/// device figures.
pub(crate) fn run(
    gpus: &[DeviceInfo],
    sizes: &[u64],
    passes: usize,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("finding the accio executable for the peer")?;
    for g in gpus {
        for (&size, backend) in sizes
            .iter()
            .flat_map(|s| BACKENDS.iter().map(move |b| (s, *b)))
        {
            let what = format!(
                "GPU {}'s device window of {} in another process, over {backend}",
                g.ordinal,
                accio_results::size::format_size(size)
            );
            events(Event::Step(&format!(
                "device windows: write_to into {what}"
            )));
            let figs = measure(&exe, g, size as usize, passes, rec, backend)
                .with_context(|| format!("measuring write_to into {what}"))?;
            for f in figs {
                rec.push(f)?;
                if let Some(f) = rec.report().figures.last() {
                    events(Event::Figure(f));
                }
            }
        }
    }
    Ok(())
}

/// The same run's `metric` figure of GPU `g` at `size` in `memory`, its median.
fn same_run(
    rec: &Recorder,
    g: &DeviceInfo,
    metric: &str,
    memory: &str,
    size: usize,
) -> Option<f64> {
    rec.report()
        .figures
        .iter()
        .find(|f| {
            f.bench == names::BENCH
                && f.metric == metric
                && f.param_str("gpu") == g.pci_bus_id
                && f.param_str("memory") == memory
                && f.param_u64("size") == Some(size as u64)
        })
        .map(|f| f.summary.median)
}

/// The transports measured: shm between processes, tcp on loopback.
const BACKENDS: [&str; 2] = ["shm", "tcp"];

fn measure(
    exe: &std::path::Path,
    g: &DeviceInfo,
    size: usize,
    passes: usize,
    rec: &Recorder,
    backend: &str,
) -> anyhow::Result<Vec<Figure>> {
    let listener = accio::listen(&match backend {
        "shm" => format!(
            "shm://accio-device-windows-{}-{}",
            std::process::id(),
            g.ordinal
        ),
        _ => "tcp://127.0.0.1:0".into(),
    })?;
    let addr = listener.local_addr().to_string();
    let mut child = std::process::Command::new(exe)
        .args([
            PEER_SUBCOMMAND,
            "--addr",
            &addr,
            "--gpu",
            &g.ordinal.to_string(),
        ])
        .args(["--size", &size.to_string()])
        .spawn()
        .with_context(|| format!("starting {}", exe.display()))?;
    let copies = accio_device::copy::copies_per_pass(size as u64).min(64);
    let r = (|| {
        let ep = listener
            .accept(Some(TIMEOUT))
            .context("the peer did not connect")?;
        let [dev_off, host_off] = words(&*ep)?[..] else {
            bail!("the peer announced no windows");
        };
        let src = Arc::new(DeviceBuffer::alloc(g.ordinal, size)?);
        src.write(0, &content(size, 1))?;
        let dw = ep.register_device(src, Access::NONE)?;
        let hw = ep.register(size, Access::NONE)?;
        hw.write_at(0, &content(size, 2))?;
        let kinds = [
            (names::WINDOW_H2H, hw.offset(), host_off),
            (names::WINDOW_H2D, hw.offset(), dev_off),
            (names::WINDOW_D2D, dw.offset(), dev_off),
        ];
        let mut secs = vec![Vec::new(); kinds.len()];
        for pass in 0..=passes {
            for (k, &(_, from, to)) in kinds.iter().enumerate() {
                let t = Instant::now();
                for _ in 0..copies {
                    ep.write_to(from, size, to, RmaFlags::SYNC)?;
                }
                if pass > 0 {
                    secs[k].push(t.elapsed().as_secs_f64());
                }
            }
        }
        // The bytes arrived: the last copy was the device window's (stream 1); one more
        // from the host window (stream 2).
        check(&*ep, 1)?;
        ep.write_to(hw.offset(), size, dev_off, RmaFlags::SYNC)?;
        check(&*ep, 2)?;
        send(&*ep, &[0])?;
        Ok(secs)
    })();
    let status = wait(&mut child);
    let secs = r?;
    status?;
    let bytes = (size as u64 * copies) as f64;
    let rate = |s: &[f64]| {
        s.iter()
            .map(|&t| bytes / t.max(1e-9) / 1e9)
            .collect::<Vec<_>>()
    };
    let fig = |metric: &str, memory: &str, samples: Vec<f64>| {
        Figure::new(names::BENCH, metric, Unit::GBps, samples).map(|f| {
            f.param("gpu", g.pci_bus_id.as_str())
                .param("memory", memory)
                .param("size", size as u64)
                .param("backend", backend)
                .param("gpu_name", g.name.as_str())
                .method(METHOD)
        })
    };
    let h2h = fig(names::WINDOW_H2H, "host", rate(&secs[0])).context("no passes")?;
    let mut h2d = fig(names::WINDOW_H2D, "host", rate(&secs[1])).context("no passes")?;
    let mut d2d = fig(names::WINDOW_D2D, "device", rate(&secs[2])).context("no passes")?;
    let transport = h2h.summary.median;
    let link = same_run(rec, g, names::H2D, "pinned", size);
    let (name, value) = match link {
        Some(l) if l < transport => ("host→device pinned copy, same run", l),
        _ if backend == "shm" => (
            "host window → peer host window over shm, same run",
            transport,
        ),
        _ => (
            "host window → peer host window over tcp, same run",
            transport,
        ),
    };
    h2d = h2d.ceiling(name, value, CeilingSource::Measured);
    if let Some(c) = same_run(rec, g, names::D2D, "device", size) {
        d2d = d2d.ceiling(
            "device→device copy in one process, same run",
            c,
            CeilingSource::Measured,
        );
    }
    Ok(vec![h2h, h2d, d2d])
}

/// Asks the peer whether its device bytes are stream `seed`.
fn check(ep: &dyn Endpoint, seed: u64) -> anyhow::Result<()> {
    send(ep, &[1, seed])?;
    match words(ep)?.as_slice() {
        [1] => Ok(()),
        [0, at] => bail!("byte {at} of the peer's device window is not what was written"),
        other => bail!("the peer answered {other:?}"),
    }
}

/// Waits for the peer, at most [`TIMEOUT`], killing it past that.
fn wait(child: &mut std::process::Child) -> anyhow::Result<()> {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait()? {
            if st.success() {
                return Ok(());
            }
            bail!("the peer process exited with {st} (its error is above)");
        }
        if t.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the peer process did not finish within {} s",
                TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
