//! `accio bench device`: GPU copy bandwidth and latency (NVIDIA nvbandwidth's copy-engine
//! tests), each figure beside the GPU's PCIe link or its memory's copy rate.
//!
//! Thin: parse flags, build an [`accio_device::bench::DeviceBench`], print progress on
//! stderr and the table on stdout. On a machine with no GPU to use it prints one line that
//! says why (no NVIDIA GPU on PCI, no driver, or a build without the `cuda` feature) and
//! exits 0 with no figures; plain `accio bench` runs it only when a GPU is usable.

use accio_device::bench::{DeviceBench, PeerCommand};
use accio_results::event::Event;
use accio_results::model::Recorder;
use accio_results::node::NodeInfo;
use anyhow::Context as _;

use crate::common::{self, CommonArgs};

/// Arguments of `accio bench device`.
#[derive(clap::Args, Debug)]
pub struct DeviceArgs {
    /// Timed passes per figure, after one warm-up pass; each figure quotes their median,
    /// min and max [default: 5; with --quick: 3].
    #[arg(long = "reps", aliases = ["repetitions", "repeats", "samples"], value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    passes: Option<u32>,
    /// Copy sizes, comma-separated, binary suffixes, at most 1G [default: 4K to 512M in x4
    /// steps; with --quick: 4K,1M,64M,512M].
    #[arg(long, value_parser = common::parse_size_list)]
    sizes: Option<common::SizeList>,
    /// GPU ordinals (the driver's numbering), comma-separated [default: every GPU].
    #[arg(long, value_delimiter = ',')]
    gpus: Option<Vec<u32>>,
    /// Fewer sizes and passes: a rough picture in a fraction of the time.
    #[arg(long)]
    quick: bool,
    #[command(flatten)]
    flags: common::BenchFlags,
    /// What the bench runs with: the flags above and those given before the subcommand.
    #[arg(skip)]
    pub(crate) common: CommonArgs,
}

impl DeviceArgs {
    /// Fills [`Self::common`] from this subcommand's flags and those given before it.
    pub(crate) fn resolve(&mut self, parent: &CommonArgs) {
        self.common = self
            .flags
            .common(None, self.sizes.clone(), self.quick, parent);
    }

    /// The variant run by plain `accio bench`: quick unless `--full`.
    pub fn default_suite(common: &CommonArgs) -> DeviceArgs {
        DeviceArgs {
            passes: None,
            sizes: None,
            gpus: None,
            quick: false,
            flags: Default::default(),
            common: CommonArgs {
                quick: !common.full,
                // The suite's --sizes are memcpy and message sizes, not copy sizes.
                sizes: None,
                ..common.clone()
            },
        }
    }
}

/// Whether an NVIDIA GPU (vendor 0x10de, display class) is on this node's PCI bus.
fn nvidia_on_pci(info: &NodeInfo) -> bool {
    info.pci
        .iter()
        .any(|d| d.is_gpu() && d.vendor_id.eq_ignore_ascii_case("0x10de"))
}

/// `None` when a GPU can be measured here; otherwise the one line that says why not.
pub(crate) fn unavailable(info: &NodeInfo) -> Option<String> {
    let why = match accio_device::available() {
        Ok(()) => return None,
        Err(e) if e.is_unavailable() => e,
        // A driver that loads and then fails is reported by the run itself.
        Err(_) => return None,
    };
    Some(if nvidia_on_pci(info) {
        format!("device: skipped: {why}")
    } else {
        "device: skipped: no NVIDIA GPU on PCI (sysfs lists none), nothing to measure".into()
    })
}

/// Runs the bench on its own (see the module docs).
pub fn run(args: DeviceArgs, rec: &mut Recorder) -> anyhow::Result<()> {
    let common = args.common.clone();
    let info = NodeInfo::detect();
    // The arguments are checked first, also where there is no GPU to measure.
    bench(&args, &info)?;
    if let Some(line) = unavailable(&info) {
        crate::term::eprint_para(&line, "  ");
        return common::finish("device", &common, rec, Ok(()));
    }
    let tables = !common.stdout_taken();
    let r = run_with(
        args,
        &info,
        rec,
        &mut |e| common::print_event("device", e),
        tables,
    );
    common::finish("device", &common, rec, r)
}

/// The library options these arguments stand for.
fn bench(args: &DeviceArgs, info: &NodeInfo) -> anyhow::Result<DeviceBench> {
    let mut b = if args.common.quick {
        DeviceBench::quick()
    } else {
        DeviceBench::new()
    };
    if let Some(s) = &args.common.sizes {
        b = b.sizes(&s.0)?;
    }
    if let Some(n) = args.passes {
        b = b.passes(n as usize);
    }
    if let Some(g) = &args.gpus {
        b = b.gpus(g);
    }
    let peer = std::env::current_exe()
        .context("finding the accio executable to start the IPC peer process")?;
    Ok(b.node(info)
        .ipc_peer(PeerCommand {
            program: peer,
            args: vec![PEER_SUBCOMMAND.into()],
        })
        .stop_when(accio_bench::cancel::interrupted))
}

/// The hidden subcommand of the IPC figures' peer process (declared in `main.rs`).
const PEER_SUBCOMMAND: &str = "__device-ipc-peer";

/// Arguments of the hidden IPC peer process (written by
/// [`accio_device::bench::IpcPeerArgs::to_args`]).
#[derive(clap::Args, Debug)]
pub struct IpcPeerArgs {
    #[arg(long)]
    gpu: u32,
    #[arg(long)]
    handle: String,
    #[arg(long)]
    size: usize,
    #[arg(long)]
    copies: u64,
    #[arg(long)]
    passes: usize,
}

/// Runs the IPC peer process: prints `secs S1 S2 ...`.
pub fn run_ipc_peer(a: IpcPeerArgs) -> anyhow::Result<()> {
    let args = accio_device::bench::IpcPeerArgs {
        gpu: a.gpu,
        handle: a.handle,
        size: a.size,
        copies: a.copies,
        passes: a.passes,
    };
    let secs = accio_device::bench::ipc_peer_main(&args).context("the IPC peer of bench device")?;
    let s: Vec<String> = secs.iter().map(|x| format!("{x:e}")).collect();
    println!("secs {}", s.join(" "));
    Ok(())
}

/// Runs the bench with its events going to `events` and, with `tables`, its table on
/// stdout.
pub(crate) fn run_with(
    args: DeviceArgs,
    info: &NodeInfo,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    tables: bool,
) -> anyhow::Result<()> {
    if args.common.backend.is_some() {
        events(Event::Note("bench device ignores --backend"));
    }
    let bench = bench(&args, info)?;
    let mut result = bench.run(rec, events).context("measuring GPU copies");
    if result.is_ok() {
        result = window_figures(&args, rec, events);
    }
    if tables {
        let t =
            accio_report::text::device::device_table_fit(rec.report(), crate::term::stdout_width());
        if !t.is_empty() {
            println!("{t}");
        }
    }
    result
}

/// The device-window figures ([`crate::bench_device_windows`]) of the GPUs asked for, at
/// the sizes asked for from 1 MiB up (default 64 MiB).
fn window_figures(
    args: &DeviceArgs,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
) -> anyhow::Result<()> {
    let gpus: Vec<_> = accio_device::devices()?
        .into_iter()
        .filter(|g| args.gpus.as_ref().is_none_or(|w| w.contains(&g.ordinal)))
        .collect();
    let sizes: Vec<u64> = match &args.common.sizes {
        Some(s) => s.0.iter().copied().filter(|&n| n >= 1 << 20).collect(),
        None => vec![64 << 20],
    };
    let passes = args
        .passes
        .map_or(if args.common.quick { 3 } else { 5 }, |n| n as usize);
    crate::bench_device_windows::run(&gpus, &sizes, passes, rec, events)
        .context("measuring device windows")
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::node::PciDevice;

    fn parse(argv: &[&str]) -> Result<DeviceArgs, clap::Error> {
        use clap::Parser;
        match crate::Cli::try_parse_from(argv)?.command {
            crate::Command::Bench(crate::BenchArgs {
                which: Some(crate::BenchCommand::Device(a)),
                ..
            }) => Ok(a),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn flags_parse_and_bad_sizes_are_refused_before_any_gpu_call() {
        let mut a = parse(&[
            "accio", "bench", "device", "--reps", "2", "--sizes", "4K,1M",
        ])
        .unwrap();
        a.resolve(&CommonArgs::default());
        assert_eq!(a.passes, Some(2));
        assert!(bench(&a, &NodeInfo::default()).is_ok());
        let mut a = parse(&["accio", "bench", "device", "--sizes", "2G"]).unwrap();
        a.resolve(&CommonArgs::default());
        let e = bench(&a, &NodeInfo::default()).unwrap_err().to_string();
        assert!(e.contains("--sizes"), "{e}");
        assert!(parse(&["accio", "bench", "device", "--reps", "0"]).is_err());
    }

    #[test]
    fn without_a_gpu_the_skip_line_names_the_cause() {
        let mut info = NodeInfo::default();
        match unavailable(&info) {
            None => eprintln!("skipped: a CUDA device is usable here"),
            Some(line) => {
                assert!(line.contains("no NVIDIA GPU on PCI"), "{line}");
                assert_eq!(line.lines().count(), 1);
                // With an NVIDIA GPU on PCI the line says what else is missing.
                info.pci.push(PciDevice {
                    vendor_id: "0x10de".into(),
                    class: "0x030200".into(),
                    ..PciDevice::default()
                });
                let line = unavailable(&info).unwrap();
                let cause = if cfg!(feature = "cuda") {
                    "no CUDA"
                } else {
                    "built without the cuda feature"
                };
                assert!(line.contains(cause), "{line}");
            }
        }
    }
}
