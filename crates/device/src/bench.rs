//! `accio bench device`: NVIDIA `nvbandwidth`'s copy-engine tests for every GPU (a
//! builder), recorded as figures beside their ceilings.
//!
//! For each GPU, each size and each [`Test`] (host→device and device→host from pinned and
//! pageable memory, both at once, device→device): one warm-up pass, then `passes` timed
//! passes of [`copies_per_pass`] copies (see [`crate::copy`] for the method); then the
//! small-copy latency each way, and the one-way time of a flag handed between host and GPU
//! through mapped pinned memory (the GPU's stream polls it; skipped with the reason where
//! stream memory operations are unsupported). Host↔device figures stand beside the PCIe link's
//! theoretical bandwidth (from sysfs, as `accio info` reads it: give it with
//! [`DeviceBench::node`]); device→device beside the device memory's copy rate.
//!
//! ```no_run
//! use accio_device::bench::DeviceBench;
//! use accio_results::model::Recorder;
//! use accio_results::node::NodeInfo;
//!
//! let mut rec = Recorder::new(None).unwrap();
//! let bench = DeviceBench::quick().node(&NodeInfo::detect());
//! match bench.run(&mut rec, &mut |_event| {}) {
//!     Ok(()) => println!("{} figures", rec.report().figures.len()),
//!     Err(e) if e.is_unavailable() => println!("skipped: {e}"),
//!     Err(e) => eprintln!("error: {e}"),
//! }
//! ```

use std::collections::BTreeMap;

use accio_results::event::Event;
use accio_results::metric::device as copy_names;
use accio_results::model::{Figure, Recorder};
use accio_results::node::NodeInfo;
use accio_results::size::format_size;

use crate::copy::{self, copies_per_pass, LinkCeiling, Test, Way};
use crate::driver::Gpu;
use crate::{DeviceInfo, Error, Result};

/// Small copies per latency pass.
const LATENCY_COPIES: u64 = 200;
/// Flag round trips per pass.
const FLAG_ROUND_TRIPS: u64 = 1000;

/// `accio bench device` (a builder; see the module docs).
#[derive(Clone, Debug)]
pub struct DeviceBench {
    sizes: Vec<u64>,
    passes: usize,
    tests: Vec<Test>,
    latency: bool,
    gpus: Option<Vec<u32>>,
    links: BTreeMap<String, LinkCeiling>,
    stop: Option<fn() -> bool>,
    ipc_peer: Option<PeerCommand>,
}

/// How to start the peer process of the IPC figures: a program and its leading arguments
/// (the hidden subcommand); the peer's own arguments follow ([`IpcPeerArgs::to_args`]).
#[derive(Clone, Debug)]
pub struct PeerCommand {
    /// The executable.
    pub program: std::path::PathBuf,
    /// Leading arguments.
    pub args: Vec<std::ffi::OsString>,
}

/// The smallest size of the IPC figures (a process start each: the small sizes say
/// nothing the device→device figures do not).
pub const IPC_MIN: u64 = 1 << 20;

/// How long a peer process may take before it is killed and its figure skipped.
const PEER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The byte the peer fills its source with, checked in the target afterwards.
const PEER_BYTE: u8 = 0x3c;

/// What the IPC peer process does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpcPeerArgs {
    /// The GPU.
    pub gpu: u32,
    /// The target allocation's CUDA IPC handle, 128 hex digits.
    pub handle: String,
    /// Bytes per copy.
    pub size: usize,
    /// Copies per pass.
    pub copies: u64,
    /// Timed passes.
    pub passes: usize,
}

impl IpcPeerArgs {
    /// The arguments the peer's subcommand parses back.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "--gpu".into(),
            self.gpu.to_string(),
            "--handle".into(),
            self.handle.clone(),
            "--size".into(),
            self.size.to_string(),
            "--copies".into(),
            self.copies.to_string(),
            "--passes".into(),
            self.passes.to_string(),
        ]
    }
}

/// The peer process's body: opens the target through its IPC handle, fills a buffer of
/// its own with a known byte, times the copies into the target; returns each pass's
/// seconds (the subcommand prints them on one line: `secs S1 S2 ...`).
pub fn ipc_peer_main(a: &IpcPeerArgs) -> Result<Vec<f64>> {
    let handle = decode_handle(&a.handle)?;
    let target = crate::PeerMemory::open(a.gpu, &handle, 0, a.size)?;
    let src = crate::DeviceBuffer::alloc(a.gpu, a.size)?;
    src.write(0, &vec![PEER_BYTE; a.size])?;
    let dst = target
        .range()
        .sub(0, a.size)
        .expect("opened with at least size bytes");
    crate::memory::timed_copies(&dst, &src.range(), a.copies, a.passes.max(1))
}

/// 128 hex digits as the 64 bytes of an IPC handle.
fn decode_handle(hex: &str) -> Result<[u8; 64]> {
    let bad = || Error::Argument(format!("--handle: {} is not 128 hex digits", hex.len()));
    if hex.len() != 128 || !hex.is_ascii() {
        return Err(bad());
    }
    let mut h = [0u8; 64];
    for (i, b) in h.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(h)
}

fn encode_handle(h: &[u8; 64]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

/// One IPC figure: a target buffer here, the peer process writing into it, its output
/// parsed, the target's bytes checked.
fn ipc_figure(
    peer: &PeerCommand,
    g: &DeviceInfo,
    size: u64,
    passes: usize,
    d2d: Option<f64>,
) -> Result<Figure> {
    use std::io::Read as _;
    let target = crate::DeviceBuffer::alloc(g.ordinal, size as usize)?;
    target.write(0, &vec![0u8; size as usize])?;
    let copies = copies_per_pass(size);
    let args = IpcPeerArgs {
        gpu: g.ordinal,
        handle: encode_handle(&target.ipc_handle()?),
        size: size as usize,
        copies,
        passes,
    };
    let io = |what: &str, e: std::io::Error| Error::Argument(format!("{what}: {e}"));
    let mut child = std::process::Command::new(&peer.program)
        .args(&peer.args)
        .args(args.to_args())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| io(&format!("starting {}", peer.program.display()), e))?;
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child
            .try_wait()
            .map_err(|e| io("waiting for the peer", e))?
        {
            break st;
        }
        if t.elapsed() > PEER_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Argument(format!(
                "the peer process did not finish within {} s",
                PEER_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if !status.success() {
        return Err(Error::Argument(format!(
            "the peer process exited with {status} (its error is above)"
        )));
    }
    let secs: Vec<f64> = out
        .trim()
        .strip_prefix("secs ")
        .map(|s| {
            s.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    if secs.len() != passes.max(1) {
        return Err(Error::Argument(format!(
            "the peer process said {:?}",
            out.trim()
        )));
    }
    // The peer's bytes arrived, all of them.
    let mut back = vec![0u8; size as usize];
    target.read(0, &mut back)?;
    if let Some(at) = back.iter().position(|&b| b != PEER_BYTE) {
        return Err(Error::Argument(format!(
            "byte {at} of the target is {:#x}, not the peer's {PEER_BYTE:#x}",
            back[at]
        )));
    }
    copy::ipc_figure(g, size, copies, &secs, d2d).ok_or_else(|| Error::Argument("no passes".into()))
}

impl Default for DeviceBench {
    fn default() -> Self {
        DeviceBench::new()
    }
}

impl DeviceBench {
    /// Defaults: [`copy::DEFAULT_SIZES`] (4 KiB to 512 MiB), 5 passes, every test and the
    /// latencies, every GPU, no link ceilings.
    pub fn new() -> DeviceBench {
        DeviceBench {
            sizes: copy::DEFAULT_SIZES.to_vec(),
            passes: 5,
            tests: Test::all(),
            latency: true,
            gpus: None,
            links: BTreeMap::new(),
            stop: None,
            ipc_peer: None,
        }
    }

    /// The quick variant: [`copy::QUICK_SIZES`], 3 passes.
    pub fn quick() -> DeviceBench {
        DeviceBench {
            sizes: copy::QUICK_SIZES.to_vec(),
            passes: 3,
            ..DeviceBench::new()
        }
    }

    /// Copy sizes (default [`copy::DEFAULT_SIZES`]), checked by [`copy::check_sizes`].
    pub fn sizes(mut self, sizes: &[u64]) -> Result<DeviceBench> {
        self.sizes = copy::check_sizes(sizes)?;
        Ok(self)
    }

    /// Timed passes per figure, after the warm-up pass (default 5; at least 1).
    pub fn passes(mut self, n: usize) -> DeviceBench {
        self.passes = n.max(1);
        self
    }

    /// The bandwidth tests to run (default [`Test::all`]).
    pub fn tests(mut self, tests: &[Test]) -> DeviceBench {
        self.tests = tests.to_vec();
        self
    }

    /// Whether to measure the small-copy latencies (default yes).
    pub fn latency(mut self, on: bool) -> DeviceBench {
        self.latency = on;
        self
    }

    /// Only these GPU ordinals (default every GPU the driver sees).
    pub fn gpus(mut self, ordinals: &[u32]) -> DeviceBench {
        self.gpus = Some(ordinals.to_vec());
        self
    }

    /// The link ceilings of the GPUs in `info` (sysfs, as `accio info` reads it), found by
    /// PCI address (default: none, host↔device figures without a ceiling).
    pub fn node(mut self, info: &NodeInfo) -> DeviceBench {
        for g in &info.gpus {
            let (Some(addr), Some(c)) = (
                copy::normalize_bus_id(&g.address),
                copy::link_ceiling(g.current_link.as_ref(), g.max_link.as_ref()),
            ) else {
                continue;
            };
            self.links.insert(addr, c);
        }
        self
    }

    /// A check run between two figures: when it answers true the bench ends with
    /// [`Error::Interrupted`] (default: none). The CLI passes its Ctrl-C flag.
    pub fn stop_when(mut self, stop: fn() -> bool) -> DeviceBench {
        self.stop = Some(stop);
        self
    }

    /// The figures one GPU gives: a figure per test and size, the IPC figures (sizes of
    /// at least [`IPC_MIN`], with a peer command), and three latencies.
    pub fn figures_per_gpu(&self) -> usize {
        let ipc = match self.ipc_peer {
            Some(_) => self.sizes.iter().filter(|&&s| s >= IPC_MIN).count(),
            None => 0,
        };
        self.tests.len() * self.sizes.len() + ipc + if self.latency { 3 } else { 0 }
    }

    /// Also measures copies from another process into device memory of this one, opened
    /// through CUDA IPC (the path of device windows between processes of a node), at each
    /// size of at least [`IPC_MIN`]: `peer` starts that process (`accio __device-ipc-peer`,
    /// which calls [`ipc_peer_main`]). Each figure stands beside the same GPU's
    /// device→device rate at that size, measured in the same run (default: not measured).
    pub fn ipc_peer(mut self, peer: PeerCommand) -> DeviceBench {
        self.ipc_peer = Some(peer);
        self
    }

    /// Measures every GPU, recording each figure as it comes and reporting through
    /// `events` (one unit of work per figure).
    ///
    /// # Errors
    ///
    /// [`Error::is_unavailable`] errors before anything is measured when there is no GPU
    /// to use; a failed driver call, [`Error::Interrupted`], or a results file that could
    /// not be written end the run with what was recorded kept.
    pub fn run(&self, rec: &mut Recorder, events: &mut dyn FnMut(Event<'_>)) -> Result<()> {
        let all = crate::devices()?;
        let gpus: Vec<DeviceInfo> = match &self.gpus {
            None => all,
            Some(want) => {
                if let Some(bad) = want.iter().find(|o| !all.iter().any(|g| g.ordinal == **o)) {
                    return Err(Error::Argument(format!(
                        "--gpus: no GPU {bad} (the driver sees {})",
                        all.len()
                    )));
                }
                all.into_iter()
                    .filter(|g| want.contains(&g.ordinal))
                    .collect()
            }
        };
        events(Event::Started {
            bench: copy_names::BENCH,
            total: (gpus.len() * self.figures_per_gpu()) as u64,
        });
        for g in &gpus {
            self.run_gpu(g, rec, events)?;
        }
        events(Event::Done);
        Ok(())
    }

    fn check_stop(&self) -> Result<()> {
        match self.stop {
            Some(f) if f() => Err(Error::Interrupted),
            _ => Ok(()),
        }
    }

    fn run_gpu(
        &self,
        g: &DeviceInfo,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<()> {
        let max = self
            .sizes
            .iter()
            .copied()
            .max()
            .unwrap_or(copy::LATENCY_BYTES);
        events(Event::Step(&format!(
            "GPU {} {} ({}): buffers of {}",
            g.ordinal,
            g.name,
            g.pci_bus_id,
            format_size(max)
        )));
        let mut gpu = Gpu::open(g.ordinal, max as usize)?;
        let link = self.links.get(&g.pci_bus_id);
        if link.is_none() {
            events(Event::Note(
                "no PCIe link in sysfs for this GPU: host-device figures without a ceiling",
            ));
        }
        let memory_copy = gpu.memory_copy_gbps();
        let l2 = gpu.l2_bytes();
        // Device→device medians by size: the ceilings of the IPC figures.
        let mut d2d = BTreeMap::new();
        if let Some(l2) = l2.filter(|_| {
            self.tests
                .iter()
                .any(|t| t.copy == copy::Copy::DeviceToDevice)
                && self.sizes.iter().any(|&s| !copy::memory_bound(s, l2))
        }) {
            events(Event::Note(&format!(
                "device→device copies whose two buffers fit the GPU's L2 cache ({}) stand \
                 without the memory's copy rate as ceiling: the cache serves them faster",
                format_size(l2)
            )));
        }
        for &test in &self.tests {
            for &size in &self.sizes {
                self.check_stop()?;
                let in_l2 =
                    test.copy == copy::Copy::DeviceToDevice && !copy::memory_bound(size, l2);
                let memory_copy = memory_copy.filter(|_| !in_l2);
                let copies = copies_per_pass(size);
                gpu.pass(test, size as usize, copies)?;
                let secs = (0..self.passes)
                    .map(|_| gpu.pass(test, size as usize, copies))
                    .collect::<Result<Vec<f64>>>()?;
                if let Some(f) =
                    copy::bandwidth_figure(g, test, size, copies, &secs, link, memory_copy)
                {
                    if test.copy == copy::Copy::DeviceToDevice {
                        d2d.insert(size, f.summary.median);
                    }
                    record(
                        rec,
                        events,
                        if in_l2 { f.param("fits_l2", true) } else { f },
                    )?;
                }
                events(Event::Advanced(1));
            }
        }
        if self.latency {
            for way in [Way::HostToDevice, Way::DeviceToHost] {
                self.check_stop()?;
                gpu.latency_pass(way, LATENCY_COPIES / 4)?;
                let secs = (0..self.passes)
                    .map(|_| gpu.latency_pass(way, LATENCY_COPIES))
                    .collect::<Result<Vec<f64>>>()?;
                if let Some(f) = copy::latency_figure(g, way, LATENCY_COPIES, &secs) {
                    record(rec, events, f)?;
                }
                events(Event::Advanced(1));
            }
            self.check_stop()?;
            // Stream memory operations may be unsupported (old drivers, some
            // virtualized GPUs): then this one figure is skipped, with the reason.
            let flag = gpu.flag_pass(FLAG_ROUND_TRIPS / 4).and_then(|_| {
                (0..self.passes)
                    .map(|_| gpu.flag_pass(FLAG_ROUND_TRIPS))
                    .collect::<Result<Vec<f64>>>()
            });
            match flag {
                Ok(secs) => {
                    if let Some(f) = copy::flag_latency_figure(g, FLAG_ROUND_TRIPS, &secs) {
                        record(rec, events, f)?;
                    }
                }
                Err(e @ (Error::Driver { .. } | Error::Argument(_))) => {
                    events(Event::Skipped(&format!(
                        "GPU {}: flag latency through mapped pinned memory: {e}",
                        g.ordinal
                    )));
                }
                Err(e) => return Err(e),
            }
            events(Event::Advanced(1));
        }
        if let Some(peer) = &self.ipc_peer {
            // Last, and with this process's buffers freed first: the IPC buffers at the
            // largest size need as much device memory again, and every figure above is
            // measured before another process has had a context on the GPU. (Without the
            // cuda feature `Gpu` is never made and has no Drop.)
            #[allow(clippy::drop_non_drop)]
            drop(gpu);
            for &size in self.sizes.iter().filter(|&&s| s >= IPC_MIN) {
                self.check_stop()?;
                let ceiling = d2d.get(&size).copied();
                match ipc_figure(peer, g, size, self.passes, ceiling) {
                    Ok(f) => record(rec, events, f)?,
                    Err(e @ Error::Interrupted) => return Err(e),
                    Err(e) => events(Event::Skipped(&format!(
                        "GPU {}: device→device into another process (CUDA IPC), {}: {e}",
                        g.ordinal,
                        format_size(size)
                    ))),
                }
                events(Event::Advanced(1));
            }
        }
        Ok(())
    }
}

/// Records `fig` and reports it as [`Event::Figure`], in that order.
fn record(rec: &mut Recorder, events: &mut dyn FnMut(Event<'_>), fig: Figure) -> Result<()> {
    rec.push(fig)?;
    if let Some(f) = rec.report().figures.last() {
        events(Event::Figure(f));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::node::{Gpu as NodeGpu, Link};

    #[test]
    fn bad_sizes_are_refused_before_any_gpu_call() {
        assert!(DeviceBench::new().sizes(&[0]).is_err());
        let b = DeviceBench::quick().sizes(&[4096, 1 << 20]).unwrap();
        assert_eq!(b.figures_per_gpu(), 6 * 2 + 3);
        assert_eq!(b.latency(false).figures_per_gpu(), 12);
    }

    #[test]
    fn ipc_handles_travel_as_hex_and_bad_ones_are_refused() {
        let h: [u8; 64] = std::array::from_fn(|i| (i * 37) as u8);
        let hex = encode_handle(&h);
        assert_eq!(hex.len(), 128);
        assert_eq!(decode_handle(&hex).unwrap(), h);
        for bad in [
            "",
            "00",
            &"zz".repeat(64),
            &"é".repeat(64),
            &"0".repeat(130),
        ] {
            assert!(decode_handle(bad).is_err(), "{bad:?}");
        }
        let a = IpcPeerArgs {
            gpu: 1,
            handle: hex,
            size: 1 << 20,
            copies: 9,
            passes: 4,
        };
        assert_eq!(a.to_args().len(), 10);
        let b = DeviceBench::quick().ipc_peer(PeerCommand {
            program: "accio".into(),
            args: vec![],
        });
        // Quick sizes 4K, 1M, 64M, 512M: three of at least IPC_MIN.
        assert_eq!(b.figures_per_gpu(), 6 * 4 + 3 + 3);
    }

    #[test]
    fn link_ceilings_are_found_by_pci_address() {
        let info = NodeInfo {
            gpus: vec![NodeGpu {
                address: "0000:3B:00.0".into(),
                current_link: Some(Link::new(2.5, 16)),
                max_link: Some(Link::new(16.0, 16)),
                ..NodeGpu::default()
            }],
            ..NodeInfo::default()
        };
        let b = DeviceBench::new().node(&info);
        let c = b.links.get("0000:3b:00.0").unwrap();
        assert_eq!(c.name, "PCIe 4.0 x16 theoretical");
    }

    /// Runs on a GPU machine; elsewhere the run is refused with the cause, records
    /// nothing, and the test says it skipped.
    #[test]
    fn a_run_without_a_device_records_nothing_and_names_the_cause() {
        let mut rec = Recorder::new(None).unwrap();
        let bench = DeviceBench::new()
            .sizes(&[4096, 1 << 20])
            .unwrap()
            .passes(2);
        let mut started = false;
        match bench.run(&mut rec, &mut |e| {
            started |= matches!(e, Event::Started { .. })
        }) {
            Err(e) if e.is_unavailable() => {
                assert!(rec.report().figures.is_empty());
                assert!(!started);
                eprintln!("skipped: no CUDA device ({e})");
            }
            Err(e) => panic!("{e}"),
            Ok(()) => {
                let n = crate::devices().unwrap().len();
                let figs = &rec.report().figures;
                assert_eq!(figs.len(), n * bench.figures_per_gpu());
                assert!(figs.iter().all(|f| f.summary.median > 0.0), "{figs:?}");
            }
        }
    }
}
