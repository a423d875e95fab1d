//! What the node is: CPU, cores, NUMA nodes, memory, mounted file systems with their free
//! space, PCIe devices with their link speed, width and theoretical bandwidth, and GPUs.
//!
//! `accio info` prints this and every `accio bench` report carries it, so that each figure
//! can be read against the hardware it was measured on. Everything is read from `/proc`
//! and `/sys` (and `nvidia-smi` when it is installed); a file that is missing or unreadable
//! leaves its field empty instead of failing, because VMs and containers hide much of
//! sysfs (a KVM guest's virtio devices have no PCIe link files at all).
//!
//! # PCIe bandwidth
//!
//! The theoretical bandwidth of a link, per direction, is lanes × transfer rate × encoding
//! efficiency / 8 bits, as seed 000 computes it for the Xeon Phi's Gen2 x16 link:
//! 16 lanes × 5 GT/s × 8/10 = 64 Gbit/s = 8 GB/s. The encoding is 8b/10b for Gen1–2
//! (2.5 and 5 GT/s), 128b/130b for Gen3–5 (8, 16, 32 GT/s). Gen6 and later (64 GT/s and up)
//! have no line code (PAM4 signalling, 1b/1b) but always run in FLIT mode, where 242 of
//! every 256 bytes carry TLP data (the other 14 are the FLIT's CRC and FEC); we count
//! that 242/256 as their "encoding", so a Gen6 x16 link reads 121 GB/s rather than the
//! 128 GB/s of raw signalling. TLP header overhead is left out for every generation: the
//! figure is the ceiling of the link, not of any one transfer size.
//!
//! ```
//! use accio_results::node::{pcie_gbps, Encoding};
//!
//! // Seed 000: the Xeon Phi 5110P's PCIe 2.0 x16 link.
//! assert_eq!(Encoding::for_rate(5.0), Encoding::B8B10);
//! assert_eq!(pcie_gbps(5.0, 16), 8.0);
//! // A PCIe 4.0 x16 GPU: 16 GT/s x 16 lanes x 128/130 / 8 = 31.5 GB/s.
//! assert!((pcie_gbps(16.0, 16) - 31.51).abs() < 0.01);
//!
//! let node = accio_results::node::NodeInfo::detect();
//! assert!(node.cpu.logical_cpus >= 1);
//! ```

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

mod pcie;
pub mod probe;
mod sysfs;
#[cfg(test)]
mod tests;

pub use pcie::{pcie_gbps, pcie_generation, Encoding};
pub use sysfs::{count_cpu_list, parse_link_speed};
use sysfs::{
    cpu_info, gpus, huge_pages, meminfo_kb, mounts, numa_nodes, nvidia_smi, pci_devices, read,
};

/// Where the facts are read from: normally `/proc` and `/sys`; tests point these at
/// fixture trees.
#[derive(Clone, Debug)]
pub struct Roots {
    /// The procfs root (`/proc`).
    pub proc: PathBuf,
    /// The sysfs root (`/sys`).
    pub sys: PathBuf,
    /// Run `nvidia-smi` when it is on `PATH` (default true; fixtures turn it off).
    pub nvidia_smi: bool,
    /// `statvfs` each mount point for its size and free space (default true; fixture
    /// mount tables name paths that do not exist here).
    pub statvfs: bool,
}

impl Default for Roots {
    fn default() -> Self {
        Roots {
            proc: PathBuf::from("/proc"),
            sys: PathBuf::from("/sys"),
            nvidia_smi: true,
            statvfs: true,
        }
    }
}

/// The CPU.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuInfo {
    /// Model name (`/proc/cpuinfo`).
    pub model: String,
    /// Online logical CPUs (hardware threads).
    pub logical_cpus: usize,
    /// Distinct (package, core) pairs among the online CPUs; `None` when sysfs does not say.
    pub physical_cores: Option<usize>,
    /// Distinct packages (sockets); `None` when sysfs does not say.
    pub sockets: Option<usize>,
    /// The caches of the first online CPU, smallest level first (`/sys/.../cache/index*`):
    /// they explain the steps of the memcpy curve.
    pub caches: Vec<Cache>,
    /// Highest clock in MHz (`cpufreq/cpuinfo_max_freq`), else the current one that
    /// `/proc/cpuinfo` reports (VMs often have no cpufreq).
    pub mhz: Option<f64>,
    /// The instruction-set features that decide copy speed, of [`NOTABLE_FLAGS`], in that
    /// order (`avx2`, `avx512f`, `erms`, `fsrm`, ...).
    pub flags: Vec<String>,
}

/// CPU flags worth naming beside a copy bandwidth: vector widths (SSE4.2, AVX, AVX2,
/// AVX-512, SVE, NEON), the fast-string features that make `rep movsb` the best copy
/// (ERMS, FSRM), and the crypto and move instructions some data paths use.
pub const NOTABLE_FLAGS: &[&str] = &[
    "sse4_2",
    "avx",
    "avx2",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "erms",
    "fsrm",
    "movdir64b",
    "amx_tile",
    "aes",
    "sha_ni",
    "asimd",
    "sve",
    "sve2",
];

/// One CPU cache.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cache {
    /// Level (1, 2, 3).
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`.
    pub kind: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// How many logical CPUs share it.
    pub shared_by: usize,
}

/// Huge pages: the explicit pool and transparent huge pages.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HugePages {
    /// Default huge page size in bytes (`Hugepagesize`), when the kernel has them.
    pub size_bytes: Option<u64>,
    /// Pages in the explicit pool (`HugePages_Total`).
    pub total: u64,
    /// Free pages of the pool (`HugePages_Free`).
    pub free: u64,
    /// The transparent huge page mode in force (`always`, `madvise`, `never`), when known.
    pub transparent: Option<String>,
}

/// One NUMA node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NumaNode {
    /// Node number.
    pub id: u32,
    /// Its CPUs as the kernel lists them (`0-15,32-47`).
    pub cpus: String,
    /// Its memory in bytes, when known.
    pub memory_bytes: Option<u64>,
}

/// One mounted file system that can hold data (pseudo file systems are left out).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Mount {
    /// Where it is mounted.
    pub mount_point: String,
    /// File system type (`ext4`, `tmpfs`, `nfs4`, ...).
    pub fs_type: String,
    /// Mount source (device, `server:/export`, a name).
    pub source: String,
    /// What holds its data: `memory`, `block`, `network` or `unknown`.
    pub backing: String,
    /// Total size in bytes; `None` when the file system reports none (ramfs) or it could
    /// not be examined.
    pub size_bytes: Option<u64>,
    /// Bytes available to unprivileged users.
    pub free_bytes: Option<u64>,
    /// Mounted read-only.
    pub read_only: bool,
}

/// A PCIe link state: speed, width, and what they allow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Transfer rate per lane, GT/s.
    pub speed_gts: f64,
    /// Lanes.
    pub width: u32,
    /// PCIe generation of the rate, when it is a standard one.
    pub generation: Option<u8>,
    /// Line code at this rate.
    pub encoding: Encoding,
    /// Theoretical bandwidth per direction, GB/s ([`pcie_gbps`]).
    pub gbps: f64,
}

impl Link {
    /// A link of `width` lanes at `speed_gts`.
    pub fn new(speed_gts: f64, width: u32) -> Link {
        Link {
            speed_gts,
            width,
            generation: pcie_generation(speed_gts),
            encoding: Encoding::for_rate(speed_gts),
            gbps: pcie_gbps(speed_gts, width),
        }
    }
}

/// One PCI device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PciDevice {
    /// Bus address, `0000:3b:00.0`.
    pub address: String,
    /// Vendor id, `0x10de`.
    pub vendor_id: String,
    /// Device id, `0x2330`.
    pub device_id: String,
    /// Class code, `0x030200`.
    pub class: String,
    /// What the class means (`3D controller`, `NVMe`, ...), when known.
    pub class_name: String,
    /// Vendor name, when known (built-in table, or `pci.ids` when installed).
    pub vendor: Option<String>,
    /// Device name, from `pci.ids` when installed.
    pub device: Option<String>,
    /// Bound kernel driver.
    pub driver: Option<String>,
    /// NUMA node the device is attached to (`None`: unknown or no NUMA).
    pub numa_node: Option<i32>,
    /// The link as it runs now (it may train down to save power when idle).
    pub current_link: Option<Link>,
    /// The most the device and its slot can do.
    pub max_link: Option<Link>,
}

impl PciDevice {
    /// A display class 0x03xxxx: VGA, 3D or display controller.
    pub fn is_gpu(&self) -> bool {
        self.class.starts_with("0x03")
    }

    /// `vendor device` or the ids.
    pub fn name(&self) -> String {
        match (&self.vendor, &self.device) {
            (Some(v), Some(d)) => format!("{v} {d}"),
            (Some(v), None) => format!("{v} {}", self.device_id),
            _ => format!("{}:{}", self.vendor_id, self.device_id),
        }
    }
}

/// A GPU, from PCI (class 0x03xx) and `nvidia-smi` when it is installed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Gpu {
    /// Bus address (`0000:3b:00.0`).
    pub address: String,
    /// Product name (`nvidia-smi`), else the PCI name.
    pub name: String,
    /// Device memory in bytes (`nvidia-smi`).
    pub memory_bytes: Option<u64>,
    /// Driver version (`nvidia-smi`), else the bound kernel driver.
    pub driver: Option<String>,
    /// The PCIe link as it runs now.
    pub current_link: Option<Link>,
    /// The most the link can do.
    pub max_link: Option<Link>,
    /// The NUMA node it is attached to (sysfs; `None`: unknown or no NUMA): host memory on
    /// that node is the near side of its copies.
    pub numa_node: Option<i32>,
}

/// Everything `accio info` reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeInfo {
    /// Host name.
    pub hostname: String,
    /// Kernel release.
    pub kernel: String,
    /// The CPU.
    pub cpu: CpuInfo,
    /// Total memory in bytes (`MemTotal`).
    pub memory_bytes: u64,
    /// Huge pages.
    pub huge_pages: HugePages,
    /// NUMA nodes (empty when sysfs has no node directory).
    pub numa: Vec<NumaNode>,
    /// File systems that can hold data.
    pub mounts: Vec<Mount>,
    /// Every PCI device (bridges included: their links bound what sits behind them).
    pub pci: Vec<PciDevice>,
    /// GPUs.
    pub gpus: Vec<Gpu>,
    /// What could not be read, in words (e.g. `no PCIe link information in sysfs`).
    pub notes: Vec<String>,
}

impl NodeInfo {
    /// The facts of this node, from `/proc`, `/sys` and `nvidia-smi`.
    pub fn detect() -> NodeInfo {
        NodeInfo::from_roots(&Roots::default())
    }

    /// The facts as read under `roots` (tests use fixture trees).
    pub fn from_roots(roots: &Roots) -> NodeInfo {
        let mut info = NodeInfo {
            hostname: read(&roots.proc.join("sys/kernel/hostname")).unwrap_or_default(),
            kernel: read(&roots.proc.join("sys/kernel/osrelease")).unwrap_or_default(),
            cpu: cpu_info(roots),
            memory_bytes: meminfo_kb(&read(&roots.proc.join("meminfo")).unwrap_or_default())
                .map_or(0, |kb| kb * 1024),
            huge_pages: huge_pages(roots),
            numa: numa_nodes(&roots.sys),
            mounts: mounts(roots),
            pci: pci_devices(&roots.sys),
            ..NodeInfo::default()
        };
        if info.pci.is_empty() {
            info.notes
                .push(format!("no PCI devices under {}", roots.sys.display()));
        } else if info.pci.iter().all(|d| d.current_link.is_none()) {
            info.notes.push(
                "no PCIe link speed or width in sysfs (usual in VMs: virtual devices have no \
                 physical link)"
                    .into(),
            );
        }
        let smi = if roots.nvidia_smi {
            nvidia_smi()
        } else {
            Vec::new()
        };
        info.gpus = gpus(&info.pci, smi);
        info
    }

    /// Theoretical PCIe bandwidth of the GPUs' current links, in the order listed: the
    /// ceilings of host↔device figures.
    pub fn gpu_links(&self) -> impl Iterator<Item = (&Gpu, &Link)> {
        self.gpus
            .iter()
            .filter_map(|g| g.current_link.as_ref().map(|l| (g, l)))
    }
}
