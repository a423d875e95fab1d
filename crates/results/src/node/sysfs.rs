//! The readers: `/proc`, `/sys`, `pci.ids` and `nvidia-smi`, each fact left empty where its file is missing.

use std::path::Path;
use std::process::Command;

use super::probe::{self, Backing};
use super::{
    Cache, CpuInfo, Gpu, HugePages, Link, Mount, NumaNode, PciDevice, Roots, NOTABLE_FLAGS,
};

/// File systems that hold no user data: skipped in [`NodeInfo::mounts`](super::NodeInfo::mounts).
pub(super) const PSEUDO_FS: &[&str] = &[
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
pub(super) const VENDORS: &[(&str, &str)] = &[
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
pub(super) fn class_name(code: u32) -> &'static str {
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

pub(super) fn read(path: &Path) -> Option<String> {
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
pub(super) fn expand_cpu_list(list: &str) -> Vec<usize> {
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
pub(super) fn lookup_pci_ids(
    text: &str,
    vendor: &str,
    device: &str,
) -> (Option<String>, Option<String>) {
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

pub(super) fn meminfo_kb(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
}

pub(super) fn cpu_info(roots: &Roots) -> CpuInfo {
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
    let first = online.first().copied().unwrap_or(0);
    let max_khz = read(&cpu_dir.join(format!("cpu{first}/cpufreq/cpuinfo_max_freq")))
        .and_then(|v| v.parse::<f64>().ok());
    let field = |name: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    let mhz = max_khz
        .map(|k| k / 1000.0)
        .or_else(|| field("cpu MHz").and_then(|v| v.parse().ok()));
    // x86 lists "flags", arm64 "Features".
    let have: Vec<String> = field("flags")
        .or_else(|| field("Features"))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let flags = NOTABLE_FLAGS
        .iter()
        .filter(|f| have.iter().any(|h| h == *f))
        .map(|f| f.to_string())
        .collect();
    CpuInfo {
        model,
        logical_cpus: logical_cpus.max(1),
        physical_cores: (!cores.is_empty()).then_some(cores.len()),
        sockets: (!packages.is_empty()).then_some(packages.len()),
        caches: caches(&cpu_dir.join(format!("cpu{first}/cache"))),
        mhz,
        flags,
    }
}

/// The caches listed under one CPU's `cache/index*` directories, by level.
fn caches(dir: &Path) -> Vec<Cache> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<Cache> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| {
            let p = e.path();
            let size = read(&p.join("size"))?;
            Some(Cache {
                level: read(&p.join("level"))?.parse().ok()?,
                kind: read(&p.join("type")).unwrap_or_default(),
                size_bytes: parse_cache_size(&size)?,
                shared_by: read(&p.join("shared_cpu_list")).map_or(1, |l| count_cpu_list(&l)),
            })
        })
        .collect();
    out.sort_by(|a, b| (a.level, &a.kind).cmp(&(b.level, &b.kind)));
    out
}

/// `32K`, `1024K`, `32768K`, `2M` as sysfs writes cache sizes.
fn parse_cache_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}

/// Huge pages from `/proc/meminfo` and the transparent huge page mode from sysfs.
pub(super) fn huge_pages(roots: &Roots) -> HugePages {
    let meminfo = read(&roots.proc.join("meminfo")).unwrap_or_default();
    let num = |key: &str| {
        meminfo.lines().find_map(|l| {
            l.strip_prefix(key)
                .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
    };
    // "always [madvise] never": the bracketed word is in force.
    let transparent =
        read(&roots.sys.join("kernel/mm/transparent_hugepage/enabled")).and_then(|t| {
            let open = t.find('[')?;
            let close = t[open..].find(']')? + open;
            Some(t[open + 1..close].to_string())
        });
    HugePages {
        size_bytes: num("Hugepagesize:").map(|kb| kb * 1024),
        total: num("HugePages_Total:").unwrap_or(0),
        free: num("HugePages_Free:").unwrap_or(0),
        transparent,
    }
}

pub(super) fn numa_nodes(sys: &Path) -> Vec<NumaNode> {
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

pub(super) fn mounts(roots: &Roots) -> Vec<Mount> {
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

pub(super) fn pci_devices(sys: &Path) -> Vec<PciDevice> {
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
pub(super) struct SmiGpu {
    pub(super) address: String,
    name: String,
    memory_mib: Option<u64>,
    driver: String,
}

/// Runs `nvidia-smi` if it is installed; nothing otherwise.
pub(super) fn nvidia_smi() -> Vec<SmiGpu> {
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
pub(super) fn parse_nvidia_smi(text: &str) -> Vec<SmiGpu> {
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

pub(super) fn gpus(pci: &[PciDevice], smi: Vec<SmiGpu>) -> Vec<Gpu> {
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
            numa_node: d.numa_node,
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
                numa_node: None,
            }),
        }
    }
    out
}
