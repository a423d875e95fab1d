//! The copies `accio bench device` measures, and the arithmetic that turns timings into
//! figures beside their ceilings: pure functions, tested without a GPU.
//!
//! Method (NVIDIA `nvbandwidth`'s copy-engine tests): a pass enqueues
//! [`copies_per_pass`] `cuMemcpyAsync` of one size on a stream between two events; its time
//! is the events' elapsed time, its rate the bytes of all its copies over that time; a
//! figure is the median of several passes, after one warm-up pass. Latency is the host's
//! wall time of a small copy followed by a stream synchronize, averaged over a pass.

use accio_results::metric::device as names;
use accio_results::model::{CeilingSource, Figure, Unit};
use accio_results::node::Link;

use crate::{DeviceInfo, Error, Result};

/// The bandwidth tests, as `nvbandwidth` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Copy {
    /// Host memory → device memory (`host_to_device_memcpy_ce`).
    HostToDevice,
    /// Device memory → host memory (`device_to_host_memcpy_ce`).
    DeviceToHost,
    /// Both at once on two streams (`host_to_device_bidirectional_memcpy_ce` and its
    /// reverse); the figure is the bytes of both directions over the pass's time.
    Bidirectional,
    /// Device memory → device memory within one GPU (`device_local_copy`).
    DeviceToDevice,
}

impl Copy {
    /// The metric name its figures are recorded under.
    pub fn metric(self) -> &'static str {
        match self {
            Copy::HostToDevice => names::H2D,
            Copy::DeviceToHost => names::D2H,
            Copy::Bidirectional => names::BIDIR,
            Copy::DeviceToDevice => names::D2D,
        }
    }

    /// Whether host memory takes part (and so its kind matters).
    pub fn uses_host(self) -> bool {
        self != Copy::DeviceToDevice
    }
}

/// The host memory of a host↔device copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostMemory {
    /// Page-locked (`cuMemHostAlloc`): the copy engine reads or writes it directly (DMA).
    Pinned,
    /// Ordinary pageable memory: the driver stages it through its own pinned buffers.
    Pageable,
}

impl HostMemory {
    /// The `memory` parameter of its figures.
    pub fn name(self) -> &'static str {
        match self {
            HostMemory::Pinned => "pinned",
            HostMemory::Pageable => "pageable",
        }
    }
}

/// One bandwidth test: a copy and, for host copies, the host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Test {
    /// Which copy.
    pub copy: Copy,
    /// Host memory kind (`None` for device→device).
    pub host: Option<HostMemory>,
}

impl Test {
    /// Every test of `accio bench device`, in the order run: pinned and pageable each way,
    /// both ways at once (pinned), device→device.
    pub fn all() -> Vec<Test> {
        let t = |copy, host| Test { copy, host };
        vec![
            t(Copy::HostToDevice, Some(HostMemory::Pinned)),
            t(Copy::DeviceToHost, Some(HostMemory::Pinned)),
            t(Copy::HostToDevice, Some(HostMemory::Pageable)),
            t(Copy::DeviceToHost, Some(HostMemory::Pageable)),
            t(Copy::Bidirectional, Some(HostMemory::Pinned)),
            t(Copy::DeviceToDevice, None),
        ]
    }

    /// The `memory` parameter: `pinned`, `pageable`, or `device`.
    pub fn memory(&self) -> &'static str {
        self.host.map_or("device", HostMemory::name)
    }
}

/// Which way a latency figure's small copy goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// Host → device.
    HostToDevice,
    /// Device → host.
    DeviceToHost,
}

impl Way {
    /// The metric name of its latency figure.
    pub fn metric(self) -> &'static str {
        match self {
            Way::HostToDevice => names::LATENCY_H2D,
            Way::DeviceToHost => names::LATENCY_D2H,
        }
    }
}

/// The largest copy `accio bench device` accepts: 1 GiB (two buffers of it on the device
/// and in pinned host memory for the bidirectional test). nvbandwidth's default is 512 MiB.
pub const MAX_SIZE: u64 = 1 << 30;

/// Default sizes: 4 KiB to 512 MiB in x4 steps, 512 MiB as nvbandwidth's buffers.
pub const DEFAULT_SIZES: [u64; 10] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
    256 << 20,
    512 << 20,
];

/// Sizes of the quick variant: a small, a middle and the largest size.
pub const QUICK_SIZES: [u64; 4] = [4 << 10, 1 << 20, 64 << 20, 512 << 20];

/// The bytes of the small copy of the latency figures (a flag's worth, as a doorbell).
pub const LATENCY_BYTES: u64 = 8;

/// Checks `--sizes`: each from 1 byte to [`MAX_SIZE`]; returns them sorted, without
/// duplicates.
pub fn check_sizes(sizes: &[u64]) -> Result<Vec<u64>> {
    if sizes.is_empty() {
        return Err(Error::Argument("--sizes: no size given".into()));
    }
    if let Some(bad) = sizes.iter().find(|&&s| s == 0 || s > MAX_SIZE) {
        return Err(Error::Argument(format!(
            "--sizes: {bad} bytes is outside 1 B ..= {} (the device and pinned host buffers \
             are allocated at the largest size)",
            accio_results::size::format_size(MAX_SIZE)
        )));
    }
    let mut v = sizes.to_vec();
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// Copies enqueued per timed pass: enough that a pass moves about 1 GiB (the events'
/// resolution, about 0.5 us, and the enqueue cost are then small against the pass), at least
/// 4 and at most 1000 (small copies are bounded by the enqueue rate, and more of them
/// change nothing but the run's length).
pub fn copies_per_pass(size: u64) -> u64 {
    ((1u64 << 30) / size.max(1)).clamp(4, 1000)
}

/// `0000:3B:00.0` or `00000000:3b:00.0` (what the driver and `nvidia-smi` print) in sysfs's
/// spelling, `0000:3b:00.0`; `None` when it is not a PCI address.
pub fn normalize_bus_id(id: &str) -> Option<String> {
    let (domain, rest) = id.trim().split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    Some(format!(
        "{:04x}:{:02x}:{:02x}.{:x}",
        hex(domain)?,
        hex(bus)?,
        hex(dev)?,
        hex(func)?
    ))
}

/// The ceiling of host↔device figures: the PCIe link's theoretical bandwidth per direction.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkCeiling {
    /// GB/s per direction.
    pub gbps: f64,
    /// What it is, e.g. `PCIe 5.0 x16 theoretical`.
    pub name: String,
}

/// The link ceiling of a GPU from its link now and the most its link can do (sysfs, as
/// `accio info` reads them). An idle GPU trains its link down to save power (an H100 reads
/// 2.5 GT/s at rest) and back up within microseconds of a copy, so the rate is taken from
/// the maximum link when it is faster; the width is the current one (a slot with fewer lanes
/// than the card keeps the link narrow under load too).
pub fn link_ceiling(current: Option<&Link>, max: Option<&Link>) -> Option<LinkCeiling> {
    let link = match (current, max) {
        (Some(c), Some(m)) if m.speed_gts > c.speed_gts => Link::new(m.speed_gts, c.width),
        (Some(c), _) => c.clone(),
        (None, Some(m)) => m.clone(),
        (None, None) => return None,
    };
    let generation = link
        .generation
        .map_or_else(|| format!("{} GT/s", link.speed_gts), |g| format!("{g}.0"));
    Some(LinkCeiling {
        gbps: link.gbps,
        name: format!("PCIe {generation} x{} theoretical", link.width),
    })
}

/// The device memory's own copy rate in GB/s of bytes copied: its theoretical bandwidth
/// (double data rate: 2 × memory clock × bus width, the driver's
/// `CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE` in kHz and `..._GLOBAL_MEMORY_BUS_WIDTH` in
/// bits) halved, since a copy reads each byte and writes it. An H100 SXM (2619 MHz, 5120
/// bits) gives 3352 GB/s, NVIDIA's published 3.35 TB/s, so 1676 GB/s of copy.
pub fn memory_copy_gbps(clock_khz: u64, bus_bits: u64) -> Option<f64> {
    if clock_khz == 0 || bus_bits == 0 {
        return None;
    }
    let bandwidth = 2.0 * clock_khz as f64 * 1e3 * bus_bits as f64 / 8.0;
    Some(bandwidth / 2.0 / 1e9)
}

/// Whether a device→device copy of `size` bytes is bound by device memory: its source and
/// destination together exceed the GPU's L2 cache (`l2_bytes`, unknown: assume so). Below
/// that the copy can run from the cache, faster than the memory's copy rate (an H200's
/// 60 MB L2 holds both 16 MiB buffers, and 16 MiB copies ran at 107% of it), so the memory's
/// rate is no ceiling there.
pub fn memory_bound(size: u64, l2_bytes: Option<u64>) -> bool {
    l2_bytes.is_none_or(|l2| size.saturating_mul(2) > l2)
}

/// The figure of one bandwidth test at one size: `pass_secs` are the passes' event times,
/// each moving `copies` copies of `size` bytes (both directions counted for
/// [`Copy::Bidirectional`]). The ceiling: the link for host copies (twice it both ways at
/// once), the memory's copy rate for device→device. `None` without passes.
pub fn bandwidth_figure(
    gpu: &DeviceInfo,
    test: Test,
    size: u64,
    copies: u64,
    pass_secs: &[f64],
    link: Option<&LinkCeiling>,
    memory_copy: Option<f64>,
) -> Option<Figure> {
    let ways = if test.copy == Copy::Bidirectional {
        2.0
    } else {
        1.0
    };
    let bytes = (size * copies) as f64 * ways;
    let samples = pass_secs
        .iter()
        .map(|&s| bytes / s.max(1e-9) / 1e9)
        .collect();
    let fig = Figure::new(names::BENCH, test.copy.metric(), Unit::GBps, samples)?
        .param("gpu", gpu.pci_bus_id.as_str())
        .param("memory", test.memory())
        .param("size", size)
        .param("gpu_name", gpu.name.as_str())
        .method(format!(
            "nvbandwidth's copy-engine method: {copies} cuMemcpyAsync of {} per pass on one \
             stream{} between two events, median of the passes after a warm-up pass{}",
            accio_results::size::format_size(size),
            if test.copy == Copy::Bidirectional {
                " per direction (two streams, started together); bytes of both directions"
            } else {
                ""
            },
            match test.host {
                Some(HostMemory::Pinned) => "; host memory from cuMemHostAlloc",
                Some(HostMemory::Pageable) => "; pageable host memory (driver-staged)",
                None => "",
            }
        ));
    Some(match test.copy {
        Copy::DeviceToDevice => match memory_copy {
            Some(g) => fig.ceiling(
                "device memory copy rate (theoretical bandwidth / 2)",
                g,
                CeilingSource::Theoretical,
            ),
            None => fig,
        },
        Copy::Bidirectional => match link {
            Some(l) => fig.ceiling(
                format!("{}, both directions", l.name),
                2.0 * l.gbps,
                CeilingSource::Theoretical,
            ),
            None => fig,
        },
        Copy::HostToDevice | Copy::DeviceToHost => match link {
            Some(l) => fig.ceiling(l.name.clone(), l.gbps, CeilingSource::Theoretical),
            None => fig,
        },
    })
}

/// How the IPC figures are measured (their `method`).
pub const IPC_FIGURE_METHOD: &str = "another process opens this process's device buffer \
    through CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle) and times cuMemcpyDtoDAsync \
    from a buffer of its own into it, nvbandwidth's way (copies per pass between two events, \
    median of the passes after a warm-up pass); the target's bytes are checked after";

/// The figure of a copy into another process's device memory through CUDA IPC: `pass_secs`
/// of `copies` copies of `size` bytes each, beside `d2d`, the same GPU's device→device
/// rate at that size in the same run (a measured ceiling: the copy is the same work, the
/// target only mapped from elsewhere). `None` without passes.
pub fn ipc_figure(
    gpu: &DeviceInfo,
    size: u64,
    copies: u64,
    pass_secs: &[f64],
    d2d: Option<f64>,
) -> Option<Figure> {
    let bytes = (size * copies) as f64;
    let samples = pass_secs
        .iter()
        .map(|&s| bytes / s.max(1e-9) / 1e9)
        .collect();
    let fig = Figure::new(names::BENCH, names::D2D_IPC, Unit::GBps, samples)?
        .param("gpu", gpu.pci_bus_id.as_str())
        .param("memory", "device")
        .param("size", size)
        .param("gpu_name", gpu.name.as_str())
        .method(IPC_FIGURE_METHOD);
    Some(match d2d {
        Some(c) => fig.ceiling(
            "device→device copy in one process, same run",
            c,
            CeilingSource::Measured,
        ),
        None => fig,
    })
}

/// The figure of a latency pass set: each pass ran `copies` small copies, each followed by
/// a stream synchronize, in `pass_secs` of host wall time; the figure is microseconds per
/// copy. `None` without passes.
pub fn latency_figure(
    gpu: &DeviceInfo,
    way: Way,
    copies: u64,
    pass_secs: &[f64],
) -> Option<Figure> {
    let samples = pass_secs
        .iter()
        .map(|&s| s / copies.max(1) as f64 * 1e6)
        .collect();
    Some(
        Figure::new(names::BENCH, way.metric(), Unit::Micros, samples)?
            .param("gpu", gpu.pci_bus_id.as_str())
            .param("memory", "pinned")
            .param("size", LATENCY_BYTES)
            .param("gpu_name", gpu.name.as_str())
            .method(format!(
                "{copies} cuMemcpyAsync of {LATENCY_BYTES} B from/to pinned host memory, each \
                 followed by cuStreamSynchronize, host wall time per copy; median of the passes"
            )),
    )
}

/// The figure of flag round trips: each pass ran `round_trips` host→GPU→host hand-offs
/// through mapped pinned memory in `pass_secs`; the figure is the one-way time, half a
/// round trip, in microseconds. `None` without passes.
pub fn flag_latency_figure(
    gpu: &DeviceInfo,
    round_trips: u64,
    pass_secs: &[f64],
) -> Option<Figure> {
    let samples = pass_secs
        .iter()
        .map(|&s| s / round_trips.max(1) as f64 / 2.0 * 1e6)
        .collect();
    Some(
        Figure::new(names::BENCH, names::LATENCY_FLAG, Unit::Micros, samples)?
            .param("gpu", gpu.pci_bus_id.as_str())
            .param("memory", "mapped")
            .param("size", 4u64)
            .param("gpu_name", gpu.name.as_str())
            .method(format!(
                "{round_trips} round trips per pass: the host writes a 4-byte flag in mapped \
                 pinned memory, the GPU's stream, waiting on it (cuStreamWaitValue32), writes \
                 another one back (cuStreamWriteValue32) that the host spins on; half a round \
                 trip, median of the passes"
            )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu() -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            memory_bytes: 141 << 30,
            pci_bus_id: "0000:3b:00.0".into(),
        }
    }

    #[test]
    fn sizes_are_checked_sorted_and_deduplicated() {
        assert_eq!(
            check_sizes(&[1 << 20, 4096, 4096]).unwrap(),
            vec![4096, 1 << 20]
        );
        assert_eq!(check_sizes(&[MAX_SIZE]).unwrap(), vec![MAX_SIZE]);
        for bad in [vec![], vec![0], vec![4096, MAX_SIZE + 1]] {
            let e = check_sizes(&bad).unwrap_err().to_string();
            assert!(e.starts_with("--sizes:"), "{e}");
        }
        assert!(DEFAULT_SIZES.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(DEFAULT_SIZES[0], 4 << 10);
        assert_eq!(*DEFAULT_SIZES.last().unwrap(), 512 << 20);
    }

    #[test]
    fn a_pass_moves_about_a_gibibyte_within_bounds() {
        assert_eq!(copies_per_pass(512 << 20), 4);
        assert_eq!(copies_per_pass(1 << 20), 1000);
        assert_eq!(copies_per_pass(64 << 20), 16);
        assert_eq!(copies_per_pass(0), 1000);
    }

    #[test]
    fn bus_ids_take_sysfs_spelling() {
        assert_eq!(normalize_bus_id("0000:3B:00.0").unwrap(), "0000:3b:00.0");
        assert_eq!(
            normalize_bus_id("00000000:3B:00.0").unwrap(),
            "0000:3b:00.0"
        );
        assert_eq!(normalize_bus_id(" 0001:c1:1f.7\n").unwrap(), "0001:c1:1f.7");
        assert_eq!(normalize_bus_id("3b:00.0"), None);
        assert_eq!(normalize_bus_id("zz:3b:00.0"), None);
    }

    #[test]
    fn an_idle_link_is_read_at_its_maximum_rate_and_current_width() {
        let idle = Link::new(2.5, 16);
        let max = Link::new(32.0, 16);
        let c = link_ceiling(Some(&idle), Some(&max)).unwrap();
        assert!((c.gbps - 63.015).abs() < 0.01, "{c:?}");
        assert_eq!(c.name, "PCIe 5.0 x16 theoretical");
        // A card in an x8 slot stays x8.
        let narrow = Link::new(32.0, 8);
        let c = link_ceiling(Some(&narrow), Some(&max)).unwrap();
        assert!((c.gbps - 31.5).abs() < 0.01, "{c:?}");
        assert_eq!(link_ceiling(None, None), None);
        assert_eq!(
            link_ceiling(None, Some(&max)).unwrap().name,
            "PCIe 5.0 x16 theoretical"
        );
    }

    #[test]
    fn the_memory_copy_rate_of_an_h100_is_half_its_published_bandwidth() {
        let g = memory_copy_gbps(2_619_000, 5120).unwrap();
        assert!((g - 1676.16).abs() < 0.01, "{g}");
        assert_eq!(memory_copy_gbps(0, 5120), None);
    }

    #[test]
    fn small_device_copies_that_fit_the_l2_cache_have_no_memory_ceiling() {
        let h200_l2 = Some(60 << 20);
        assert!(!memory_bound(16 << 20, h200_l2));
        assert!(!memory_bound(30 << 20, h200_l2));
        assert!(memory_bound((30 << 20) + 1, h200_l2));
        assert!(memory_bound(64 << 20, h200_l2));
        assert!(memory_bound(4096, None));
        assert!(memory_bound(u64::MAX, Some(1)));
    }

    #[test]
    fn bandwidth_figures_count_bytes_over_event_time_beside_the_link() {
        let link = LinkCeiling {
            gbps: 50.0,
            name: "PCIe 5.0 x16 theoretical".into(),
        };
        let t = Test {
            copy: Copy::HostToDevice,
            host: Some(HostMemory::Pinned),
        };
        // 4 copies of 512 MiB in 0.05 s, 0.04 s, 0.045 s.
        let size = 512u64 << 20;
        let f =
            bandwidth_figure(&gpu(), t, size, 4, &[0.05, 0.04, 0.045], Some(&link), None).unwrap();
        let bytes = (4 * size) as f64;
        assert_eq!(f.bench, "device");
        assert_eq!(f.metric, "h2d");
        assert!((f.summary.median - bytes / 0.045 / 1e9).abs() < 1e-9);
        assert!((f.summary.max - bytes / 0.04 / 1e9).abs() < 1e-9);
        let c = f.ceiling.as_ref().unwrap();
        assert_eq!(c.value, 50.0);
        assert_eq!(c.source, CeilingSource::Theoretical);
        assert!((c.ratio.unwrap() - f.summary.median / 50.0).abs() < 1e-12);
        assert_eq!(f.param_str("memory"), "pinned");
        assert_eq!(f.param_str("gpu"), "0000:3b:00.0");
        assert_eq!(f.param_u64("size"), Some(size));
        // Both directions: twice the bytes, twice the link.
        let b = Test {
            copy: Copy::Bidirectional,
            host: Some(HostMemory::Pinned),
        };
        let f = bandwidth_figure(&gpu(), b, size, 4, &[0.1], Some(&link), None).unwrap();
        assert!((f.summary.median - 2.0 * bytes / 0.1 / 1e9).abs() < 1e-9);
        assert_eq!(f.ceiling.unwrap().value, 100.0);
        // Device to device: the memory's copy rate, not the link.
        let d = Test {
            copy: Copy::DeviceToDevice,
            host: None,
        };
        let f = bandwidth_figure(&gpu(), d, size, 4, &[0.002], Some(&link), Some(1676.0)).unwrap();
        assert_eq!(f.param_str("memory"), "device");
        assert_eq!(f.ceiling.unwrap().value, 1676.0);
        // No link known: no ceiling, the figure still stands.
        let f = bandwidth_figure(&gpu(), t, size, 4, &[0.05], None, None).unwrap();
        assert!(f.ceiling.is_none());
        assert!(bandwidth_figure(&gpu(), t, size, 4, &[], None, None).is_none());
    }

    #[test]
    fn latency_figures_are_microseconds_per_copy() {
        let f = latency_figure(&gpu(), Way::DeviceToHost, 200, &[0.002, 0.0024]).unwrap();
        assert_eq!(f.metric, "latency_d2h");
        assert_eq!(f.unit, Unit::Micros);
        assert!((f.summary.min - 10.0).abs() < 1e-9);
        assert_eq!(f.param_u64("size"), Some(LATENCY_BYTES));
    }

    #[test]
    fn flag_latency_is_half_a_round_trip() {
        let f = flag_latency_figure(&gpu(), 1000, &[0.004, 0.005]).unwrap();
        assert_eq!(f.metric, "latency_flag");
        assert!((f.summary.min - 2.0).abs() < 1e-9, "{:?}", f.summary);
        assert_eq!(f.param_str("memory"), "mapped");
    }

    #[test]
    fn every_test_has_its_own_key() {
        let keys: std::collections::BTreeSet<String> = Test::all()
            .into_iter()
            .filter_map(|t| bandwidth_figure(&gpu(), t, 4096, 4, &[1.0], None, None))
            .map(|f| f.key())
            .collect();
        assert_eq!(keys.len(), Test::all().len());
    }
}
