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

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

pub mod probe;

use probe::Backing;

/// A PCIe line code and its efficiency (payload bits per transferred bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Encoding {
    /// 8b/10b: PCIe 1.x and 2.x (2.5 and 5 GT/s).
    #[serde(rename = "8b/10b")]
    B8B10,
    /// 128b/130b: PCIe 3.0 to 5.0 (8, 16, 32 GT/s).
    #[serde(rename = "128b/130b")]
    B128B130,
    /// FLIT mode, 242 data bytes per 256-byte FLIT: PCIe 6.0 and later (64 GT/s and up).
    #[serde(rename = "flit 242/256")]
    Flit,
}

impl Encoding {
    /// The encoding a link running at `gts` GT/s uses.
    pub fn for_rate(gts: f64) -> Encoding {
        if gts <= 5.0 {
            Encoding::B8B10
        } else if gts < 64.0 {
            Encoding::B128B130
        } else {
            Encoding::Flit
        }
    }

    /// Payload bits per transferred bit.
    pub fn efficiency(self) -> f64 {
        match self {
            Encoding::B8B10 => 8.0 / 10.0,
            Encoding::B128B130 => 128.0 / 130.0,
            Encoding::Flit => 242.0 / 256.0,
        }
    }

    /// The name in tables (`8b/10b`).
    pub fn name(self) -> &'static str {
        match self {
            Encoding::B8B10 => "8b/10b",
            Encoding::B128B130 => "128b/130b",
            Encoding::Flit => "flit 242/256",
        }
    }
}

/// Theoretical bandwidth of a PCIe link per direction, in GB/s (10^9 B/s): lanes × GT/s ×
/// encoding efficiency / 8 (see the module docs).
pub fn pcie_gbps(gts: f64, lanes: u32) -> f64 {
    f64::from(lanes) * gts * Encoding::for_rate(gts).efficiency() / 8.0
}

/// PCIe generation of a transfer rate (1 for 2.5 GT/s ... 6 for 64 GT/s).
pub fn pcie_generation(gts: f64) -> Option<u8> {
    const RATES: [(f64, u8); 7] = [
        (2.5, 1),
        (5.0, 2),
        (8.0, 3),
        (16.0, 4),
        (32.0, 5),
        (64.0, 6),
        (128.0, 7),
    ];
    RATES
        .iter()
        .find(|(r, _)| (gts - r).abs() < 0.01)
        .map(|&(_, g)| g)
}

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

/// File systems that hold no user data: skipped in [`NodeInfo::mounts`].
const PSEUDO_FS: &[&str] = &[
    "proc",
    "sysfs",
    "devtmpfs",
    "devpts",
    "cgroup",
    "cgroup2",
    "mqueue",
    "debugfs",
    "tracefs",
    "securityfs",
    "pstore",
    "bpf",
    "configfs",
    "fusectl",
    "autofs",
    "binfmt_misc",
    "efivarfs",
    "rpc_pipefs",
    "nsfs",
    "hugetlbfs",
    "selinuxfs",
    "nfsd",
];

/// PCI vendor names for the ids most often met on compute nodes (a full table is
/// `pci.ids`, read when installed).
const VENDORS: &[(&str, &str)] = &[
    ("0x10de", "NVIDIA"),
    ("0x1002", "AMD"),
    ("0x1022", "AMD"),
    ("0x8086", "Intel"),
    ("0x15b3", "Mellanox"),
    ("0x14e4", "Broadcom"),
    ("0x1af4", "Red Hat (virtio)"),
    ("0x1b36", "Red Hat (QEMU)"),
    ("0x1d0f", "Amazon"),
    ("0x144d", "Samsung"),
    ("0x1e0f", "KIOXIA"),
    ("0x1c5c", "SK hynix"),
    ("0x1000", "Broadcom / LSI"),
    ("0x1077", "QLogic"),
    ("0x1924", "Solarflare"),
    ("0x1dd8", "AMD Pensando"),
    ("0x1e52", "Tenstorrent"),
    ("0x1da3", "Habana Labs"),
    ("0x1ae0", "Google"),
];

/// Names of PCI classes (class and subclass, the top 16 bits of the 24-bit code; the
/// class alone where the subclass is not listed).
fn class_name(code: u32) -> &'static str {
    match code >> 8 {
        0x0106 => return "SATA controller",
        0x0107 => return "SAS controller",
        0x0108 => return "NVMe controller",
        0x0200 => return "Ethernet controller",
        0x0207 => return "InfiniBand controller",
        0x0208 => return "fabric controller",
        0x0300 => return "VGA controller",
        0x0302 => return "3D controller",
        0x0600 => return "host bridge",
        0x0604 => return "PCI bridge",
        0x0c03 => return "USB controller",
        _ => {}
    }
    match code >> 16 {
        0x01 => "storage controller",
        0x02 => "network controller",
        0x03 => "display controller",
        0x06 => "bridge",
        0x08 => "system peripheral",
        0x0b => "processor",
        0x0c => "serial bus controller",
        0x11 => "signal processing controller",
        0x12 => "processing accelerator",
        0xff => "unassigned class",
        _ => "other",
    }
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Parses a sysfs link speed: `8.0 GT/s PCIe`, `5 GT/s`, `2.5 GT/s`. `Unknown` (and the
/// `Unknown speed` of some drivers) is `None`.
pub fn parse_link_speed(text: &str) -> Option<f64> {
    let first = text.split_whitespace().next()?;
    let v: f64 = first.parse().ok()?;
    (v > 0.0).then_some(v)
}

/// Counts the CPUs in a kernel CPU list (`0-3,8,10-11` → 7).
pub fn count_cpu_list(list: &str) -> usize {
    list.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.trim().split_once('-') {
            Some((a, b)) => match (a.parse::<usize>(), b.parse::<usize>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 0,
            },
            None => usize::from(p.trim().parse::<usize>().is_ok()),
        })
        .sum()
}

/// Expands a kernel CPU list (`0-2,5` → `[0, 1, 2, 5]`).
fn expand_cpu_list(list: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for p in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    v.extend(a..=b);
                }
            }
            None => v.extend(p.parse::<usize>().ok()),
        }
    }
    v
}

/// `name` and `device name` for `vendor`/`device` from a `pci.ids` text (the format of
/// <https://pci-ids.ucw.cz>: vendors at column 0, their devices indented by one tab).
fn lookup_pci_ids(text: &str, vendor: &str, device: &str) -> (Option<String>, Option<String>) {
    let (v, d) = (
        vendor.trim_start_matches("0x").to_ascii_lowercase(),
        device.trim_start_matches("0x").to_ascii_lowercase(),
    );
    let mut vendor_name = None;
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if vendor_name.is_none() {
            if let Some(rest) = line.strip_prefix(&v) {
                if rest.starts_with("  ") {
                    vendor_name = Some(rest.trim().to_string());
                }
            }
            continue;
        }
        if !line.starts_with('\t') {
            break; // the next vendor: the device is not listed
        }
        if let Some(rest) = line.strip_prefix('\t').and_then(|l| l.strip_prefix(&d)) {
            if rest.starts_with("  ") {
                return (vendor_name, Some(rest.trim().to_string()));
            }
        }
    }
    (vendor_name, None)
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

fn meminfo_kb(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
}

fn cpu_info(roots: &Roots) -> CpuInfo {
    let cpuinfo = read(&roots.proc.join("cpuinfo")).unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            // x86 says "model name"; arm64 kernels have no model name, some say "Model".
            matches!(k.trim(), "model name" | "Model" | "cpu model").then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    let cpu_dir = roots.sys.join("devices/system/cpu");
    let online = read(&cpu_dir.join("online"))
        .map(|l| expand_cpu_list(&l))
        .unwrap_or_default();
    let logical_cpus = if online.is_empty() {
        cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count()
    } else {
        online.len()
    };
    let mut cores = std::collections::BTreeSet::new();
    let mut packages = std::collections::BTreeSet::new();
    for cpu in &online {
        let topo = cpu_dir.join(format!("cpu{cpu}/topology"));
        let (Some(pkg), Some(core)) = (
            read(&topo.join("physical_package_id")),
            read(&topo.join("core_id")),
        ) else {
            continue;
        };
        packages.insert(pkg.clone());
        cores.insert((pkg, core));
    }
    CpuInfo {
        model,
        logical_cpus: logical_cpus.max(1),
        physical_cores: (!cores.is_empty()).then_some(cores.len()),
        sockets: (!packages.is_empty()).then_some(packages.len()),
    }
}

fn numa_nodes(sys: &Path) -> Vec<NumaNode> {
    let dir = sys.join("devices/system/node");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut nodes: Vec<NumaNode> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let id: u32 = name.strip_prefix("node")?.parse().ok()?;
            let meminfo = read(&e.path().join("meminfo")).unwrap_or_default();
            // "Node 0 MemTotal:       24684096 kB"
            let memory_bytes = meminfo.lines().find_map(|l| {
                let (_, rest) = l.split_once("MemTotal:")?;
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .map(|kb| kb * 1024)
            });
            Some(NumaNode {
                id,
                cpus: read(&e.path().join("cpulist")).unwrap_or_default(),
                memory_bytes,
            })
        })
        .collect();
    nodes.sort_by_key(|n| n.id);
    nodes
}

fn mounts(roots: &Roots) -> Vec<Mount> {
    let text = read(&roots.proc.join("self/mountinfo")).unwrap_or_default();
    let entries = probe::parse_mountinfo(&text);
    let mut out: Vec<Mount> = Vec::new();
    for e in &entries {
        // Kernel interfaces, and tmpfs mounted inside them (/sys/fs/cgroup), hold no data.
        if PSEUDO_FS.contains(&e.fs_type.as_str())
            || e.mount_point.starts_with("/sys")
            || e.mount_point.starts_with("/proc")
        {
            continue;
        }
        let mount_point = e.mount_point.display().to_string();
        // A mount stacked on the same point hides the earlier one: keep the last.
        out.retain(|m| m.mount_point != mount_point);
        let read_only = e.mount_options.split(',').any(|o| o == "ro");
        let mut m = Mount {
            mount_point,
            fs_type: e.fs_type.clone(),
            source: e.source.clone(),
            backing: probe::backing_of(&e.fs_type).name().to_string(),
            size_bytes: None,
            free_bytes: None,
            read_only,
        };
        if roots.statvfs {
            match probe::probe(&e.mount_point) {
                Ok(p) => {
                    m.size_bytes = p.capacity;
                    m.free_bytes = p.free;
                    m.read_only |= p.read_only;
                    // Tiny tmpfs mounts (a few KiB, used to mask paths in sandboxes) and
                    // file bind mounts hold no data worth listing.
                    if p.capacity.is_some_and(|c| c < 1 << 20) && p.backing == Backing::Memory {
                        continue;
                    }
                }
                Err(_) => continue, // a file bind mount or an unreachable mount point
            }
        }
        out.push(m);
    }
    out
}

fn pci_devices(sys: &Path) -> Vec<PciDevice> {
    let dir = sys.join("bus/pci/devices");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let ids = ["/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok());
    let mut devs: Vec<PciDevice> = entries
        .flatten()
        .map(|e| {
            let p = e.path();
            let get = |f: &str| read(&p.join(f));
            let vendor_id = get("vendor").unwrap_or_default();
            let device_id = get("device").unwrap_or_default();
            let class = get("class").unwrap_or_default();
            let class_code = u32::from_str_radix(class.trim_start_matches("0x"), 16).ok();
            let (mut vendor, device) = ids
                .as_deref()
                .map_or((None, None), |t| lookup_pci_ids(t, &vendor_id, &device_id));
            if vendor.is_none() {
                vendor = VENDORS
                    .iter()
                    .find(|(id, _)| *id == vendor_id)
                    .map(|(_, n)| n.to_string());
            }
            let link = |speed: &str, width: &str| {
                let s = parse_link_speed(&get(speed)?)?;
                let w: u32 = get(width)?.parse().ok()?;
                (w > 0).then(|| Link::new(s, w))
            };
            PciDevice {
                address: e.file_name().to_string_lossy().into_owned(),
                class_name: class_code.map_or("", class_name).to_string(),
                vendor_id,
                device_id,
                class,
                vendor,
                device,
                driver: std::fs::read_link(p.join("driver"))
                    .ok()
                    .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned())),
                numa_node: get("numa_node")
                    .and_then(|n| n.parse().ok())
                    .filter(|&n: &i32| n >= 0),
                current_link: link("current_link_speed", "current_link_width"),
                max_link: link("max_link_speed", "max_link_width"),
            }
        })
        .collect();
    devs.sort_by(|a, b| a.address.cmp(&b.address));
    devs
}

/// One GPU as `nvidia-smi` describes it.
#[derive(Clone, Debug, Default, PartialEq)]
struct SmiGpu {
    address: String,
    name: String,
    memory_mib: Option<u64>,
    driver: String,
}

/// Runs `nvidia-smi` if it is installed; nothing otherwise.
fn nvidia_smi() -> Vec<SmiGpu> {
    let out = Command::new("nvidia-smi")
        .args([
            "--query-gpu=pci.bus_id,name,memory.total,driver_version",
            "--format=csv,noheader,nounits",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => parse_nvidia_smi(&String::from_utf8_lossy(&o.stdout)),
        _ => Vec::new(),
    }
}

/// Parses `nvidia-smi --query-gpu=pci.bus_id,name,memory.total,driver_version
/// --format=csv,noheader,nounits` output. Bus ids come with an 8-digit domain
/// (`00000000:3B:00.0`); sysfs uses 4 lower-case digits.
fn parse_nvidia_smi(text: &str) -> Vec<SmiGpu> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            if f.len() < 4 {
                return None;
            }
            let bus = f[0].to_ascii_lowercase();
            let address = match bus.split_once(':') {
                Some((dom, rest)) if dom.len() > 4 => format!("{}:{rest}", &dom[dom.len() - 4..]),
                _ => bus,
            };
            Some(SmiGpu {
                address,
                name: f[1].to_string(),
                memory_mib: f[2].parse().ok(),
                driver: f[3].to_string(),
            })
        })
        .collect()
}

fn gpus(pci: &[PciDevice], smi: Vec<SmiGpu>) -> Vec<Gpu> {
    let mut out: Vec<Gpu> = pci
        .iter()
        .filter(|d| d.is_gpu())
        .map(|d| Gpu {
            address: d.address.clone(),
            name: d.name(),
            memory_bytes: None,
            driver: d.driver.clone(),
            current_link: d.current_link.clone(),
            max_link: d.max_link.clone(),
        })
        .collect();
    for s in smi {
        let memory_bytes = s.memory_mib.map(|m| m << 20);
        match out.iter_mut().find(|g| g.address == s.address) {
            Some(g) => {
                g.name = s.name;
                g.memory_bytes = memory_bytes;
                g.driver = Some(s.driver);
            }
            // A GPU that nvidia-smi sees but sysfs does not list (some containers).
            None => out.push(Gpu {
                address: s.address,
                name: s.name,
                memory_bytes,
                driver: Some(s.driver),
                current_link: None,
                max_link: None,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture tree: files written under a fresh temporary directory.
    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str) -> Tree {
            let d = std::env::temp_dir().join(format!("accio-info-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Tree(d)
        }
        fn file(&self, rel: &str, text: &str) -> &Tree {
            let p = self.0.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
            self
        }
        fn roots(&self) -> Roots {
            Roots {
                proc: self.0.join("proc"),
                sys: self.0.join("sys"),
                nvidia_smi: false,
                statvfs: false,
            }
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn seed_000_gen2_x16_is_8_gb_per_s() {
        // 16 lanes * 5 GT/s * 8b/10b = 64 Gbit/s = 8 GB/s (seed 000).
        assert_eq!(pcie_gbps(5.0, 16), 8.0);
        assert_eq!(Encoding::for_rate(2.5), Encoding::B8B10);
        assert_eq!(pcie_gbps(2.5, 1), 0.25);
    }

    #[test]
    fn gen3_to_gen5_use_128b_130b_and_gen6_flit() {
        assert_eq!(Encoding::for_rate(8.0), Encoding::B128B130);
        assert!((pcie_gbps(8.0, 16) - 15.754).abs() < 0.001);
        assert!((pcie_gbps(32.0, 16) - 63.015).abs() < 0.001);
        assert_eq!(Encoding::for_rate(64.0), Encoding::Flit);
        assert_eq!(pcie_gbps(64.0, 16), 121.0);
        assert_eq!(pcie_generation(16.0), Some(4));
        assert_eq!(pcie_generation(3.0), None);
    }

    #[test]
    fn link_speed_strings_of_old_and_new_kernels() {
        assert_eq!(parse_link_speed("8.0 GT/s PCIe"), Some(8.0));
        assert_eq!(parse_link_speed("5 GT/s"), Some(5.0));
        assert_eq!(parse_link_speed("2.5 GT/s PCIe"), Some(2.5));
        assert_eq!(parse_link_speed("Unknown"), None);
        assert_eq!(parse_link_speed("Unknown speed"), None);
        assert_eq!(parse_link_speed(""), None);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(count_cpu_list("0-3,8,10-11"), 7);
        assert_eq!(count_cpu_list(""), 0);
        assert_eq!(expand_cpu_list("0-2,5"), vec![0, 1, 2, 5]);
    }

    #[test]
    fn fixture_node_with_a_gen4_gpu_two_numa_nodes_and_a_virtio_device() {
        let t = Tree::new("full");
        t.file(
            "proc/cpuinfo",
            "processor\t: 0\nmodel name\t: AMD EPYC 7763 64-Core Processor\nprocessor\t: 1\n",
        )
        .file("proc/meminfo", "MemTotal:       16384 kB\nMemFree: 1 kB\n")
        .file("proc/sys/kernel/hostname", "gpu-node-1\n")
        .file("proc/sys/kernel/osrelease", "6.1.0\n")
        .file(
            "proc/self/mountinfo",
            "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
             27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
             25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=1k\n\
             30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684096k\n\
             41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
             42 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
             50 27 0:50 / /scratch ro,relatime - lustre 10.0.0.1@o2ib:/fs rw\n",
        )
        .file("sys/devices/system/cpu/online", "0-3\n");
        for (cpu, pkg, core) in [(0, 0, 0), (1, 0, 0), (2, 1, 0), (3, 1, 1)] {
            t.file(
                &format!("sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id"),
                &format!("{pkg}\n"),
            )
            .file(
                &format!("sys/devices/system/cpu/cpu{cpu}/topology/core_id"),
                &format!("{core}\n"),
            );
        }
        t.file("sys/devices/system/node/node0/cpulist", "0-1\n")
            .file(
                "sys/devices/system/node/node0/meminfo",
                "Node 0 MemTotal:       8192 kB\nNode 0 MemFree: 1 kB\n",
            )
            .file("sys/devices/system/node/node1/cpulist", "2-3\n")
            .file("sys/devices/system/node/online", "0-1\n");
        let gpu = "sys/bus/pci/devices/0000:3b:00.0/";
        for (f, v) in [
            ("vendor", "0x10de"),
            ("device", "0x20b0"),
            ("class", "0x030200"),
            ("current_link_speed", "16.0 GT/s PCIe"),
            ("current_link_width", "16"),
            ("max_link_speed", "16.0 GT/s PCIe"),
            ("max_link_width", "16"),
            ("numa_node", "1"),
        ] {
            t.file(&format!("{gpu}{f}"), &format!("{v}\n"));
        }
        let virtio = "sys/bus/pci/devices/0000:00:02.0/";
        for (f, v) in [
            ("vendor", "0x1af4"),
            ("device", "0x1042"),
            ("class", "0x018000"),
            ("numa_node", "-1"),
        ] {
            t.file(&format!("{virtio}{f}"), &format!("{v}\n"));
        }
        let info = NodeInfo::from_roots(&t.roots());
        assert_eq!(info.hostname, "gpu-node-1");
        assert_eq!(info.kernel, "6.1.0");
        assert_eq!(info.cpu.model, "AMD EPYC 7763 64-Core Processor");
        assert_eq!(info.cpu.logical_cpus, 4);
        assert_eq!(info.cpu.physical_cores, Some(3));
        assert_eq!(info.cpu.sockets, Some(2));
        assert_eq!(info.memory_bytes, 16384 * 1024);
        assert_eq!(info.numa.len(), 2);
        assert_eq!(
            (info.numa[0].cpus.as_str(), info.numa[0].memory_bytes),
            ("0-1", Some(8192 * 1024))
        );
        assert_eq!(info.numa[1].memory_bytes, None);
        let points: Vec<&str> = info.mounts.iter().map(|m| m.mount_point.as_str()).collect();
        assert_eq!(points, ["/", "/dev/shm", "/scratch"]);
        assert_eq!(info.mounts[1].source, "tmpfs");
        assert_eq!(info.mounts[2].backing, "network");
        assert!(info.mounts[2].read_only && !info.mounts[0].read_only);
        assert_eq!(info.pci.len(), 2);
        let (v, g) = (&info.pci[0], &info.pci[1]);
        assert_eq!(v.address, "0000:00:02.0");
        assert_eq!(v.class_name, "storage controller");
        assert_eq!(v.vendor.as_deref(), Some("Red Hat (virtio)"));
        assert_eq!((v.current_link.as_ref(), v.numa_node), (None, None));
        assert!(g.is_gpu() && !v.is_gpu());
        assert_eq!(g.class_name, "3D controller");
        assert_eq!(g.numa_node, Some(1));
        let link = g.current_link.as_ref().unwrap();
        assert_eq!((link.width, link.generation), (16, Some(4)));
        assert!((link.gbps - 31.5077).abs() < 1e-3, "{}", link.gbps);
        assert_eq!(info.gpus.len(), 1);
        assert_eq!(info.gpus[0].name, "NVIDIA 0x20b0");
        assert_eq!(info.gpu_links().count(), 1);
        assert!(info.notes.is_empty(), "{:?}", info.notes);
        // The JSON form reads back the same.
        let back: NodeInfo = serde_json::from_str(&serde_json::to_string(&info).unwrap()).unwrap();
        assert_eq!(back, info);
    }

    #[test]
    fn empty_roots_give_empty_facts_and_a_note() {
        let t = Tree::new("empty");
        let info = NodeInfo::from_roots(&t.roots());
        assert_eq!(info.cpu.logical_cpus, 1);
        assert!(info.numa.is_empty() && info.mounts.is_empty() && info.pci.is_empty());
        assert!(info.gpus.is_empty());
        assert_eq!(info.notes.len(), 1);
        assert!(info.notes[0].starts_with("no PCI devices under"));
        // Unknown fields and missing ones read as defaults (forward compatibility).
        let back: NodeInfo = serde_json::from_str(r#"{"hostname":"h","future":1}"#).unwrap();
        assert_eq!(back.hostname, "h");
    }

    #[test]
    fn devices_without_links_get_a_note() {
        let t = Tree::new("nolink");
        t.file("sys/bus/pci/devices/0000:00:03.0/class", "0x020000\n")
            .file("sys/bus/pci/devices/0000:00:03.0/vendor", "0x1af4\n")
            .file(
                "sys/bus/pci/devices/0000:00:03.0/current_link_speed",
                "Unknown\n",
            )
            .file("sys/bus/pci/devices/0000:00:03.0/current_link_width", "0\n");
        let info = NodeInfo::from_roots(&t.roots());
        assert_eq!(info.pci[0].class_name, "Ethernet controller");
        assert!(info.pci[0].current_link.is_none());
        assert!(info.notes[0].contains("no PCIe link"), "{:?}", info.notes);
    }

    #[test]
    fn nvidia_smi_rows_merge_with_pci_devices() {
        let smi = parse_nvidia_smi(
            "00000000:3B:00.0, NVIDIA H100 80GB HBM3, 81559, 550.54.15\n\
             00000000:5E:00.0, NVIDIA H100 80GB HBM3, 81559, 550.54.15\n",
        );
        assert_eq!(smi[0].address, "0000:3b:00.0");
        let pci = vec![PciDevice {
            address: "0000:3b:00.0".into(),
            class: "0x030200".into(),
            current_link: Some(Link::new(32.0, 16)),
            ..PciDevice::default()
        }];
        let g = gpus(&pci, smi);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].name, "NVIDIA H100 80GB HBM3");
        assert_eq!(g[0].memory_bytes, Some(81559 << 20));
        assert_eq!(g[0].driver.as_deref(), Some("550.54.15"));
        assert!((g[0].current_link.as_ref().unwrap().gbps - 63.015).abs() < 1e-3);
        assert_eq!(g[1].address, "0000:5e:00.0");
        assert!(g[1].current_link.is_none());
    }

    #[test]
    fn pci_ids_lookup() {
        let ids = "# comment\n10de  NVIDIA Corporation\n\t20b0  GA100 [A100 SXM4 40GB]\n\
                   \t\t10de 134f  A100 variant\n1af4  Red Hat, Inc.\n\t1042  Virtio block\n";
        assert_eq!(
            lookup_pci_ids(ids, "0x10de", "0x20b0"),
            (
                Some("NVIDIA Corporation".into()),
                Some("GA100 [A100 SXM4 40GB]".into())
            )
        );
        assert_eq!(
            lookup_pci_ids(ids, "0x10de", "0x1042"),
            (Some("NVIDIA Corporation".into()), None)
        );
        assert_eq!(lookup_pci_ids(ids, "0x8086", "0x0001"), (None, None));
    }

    #[test]
    fn this_node_is_described() {
        let info = NodeInfo::detect();
        assert!(info.cpu.logical_cpus >= 1);
        assert!(info.memory_bytes > 0);
        // The root file system is always a data file system.
        assert!(
            info.mounts.iter().any(|m| m.mount_point == "/"),
            "{:?}",
            info.mounts
        );
    }
}
