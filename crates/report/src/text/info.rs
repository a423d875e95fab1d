//! The node's facts as `accio info` prints them: host, CPU, memory, NUMA, file systems,
//! PCIe links with their theoretical bandwidth, GPUs.

use accio_results::node::{CpuInfo, HugePages, Link, NodeInfo};
use accio_results::num::fmt3;
use accio_results::size::human_bytes;

/// The model and its counts: `Xeon Gold 6338 (128 logical CPUs, 64 cores, 2 sockets)`.
pub fn cpu(info: &CpuInfo) -> String {
    let counts = match (info.physical_cores, info.sockets) {
        (Some(c), Some(s)) => format!(
            "{} logical CPUs, {c} cores, {s} socket{}",
            info.logical_cpus,
            if s == 1 { "" } else { "s" }
        ),
        _ => format!("{} logical CPUs", info.logical_cpus),
    };
    format!("{} ({counts})", info.model)
}

/// The CPU's caches, clock and notable ISA features, as `(row name, text)` pairs: the
/// facts that explain the steps of a memcpy curve. Rows whose facts are unknown are left
/// out.
pub fn cpu_details(c: &CpuInfo) -> Vec<(&'static str, String)> {
    let mut rows = Vec::new();
    if !c.caches.is_empty() {
        let caches: Vec<String> = c
            .caches
            .iter()
            .map(|k| {
                let kind = match k.kind.as_str() {
                    "Data" => "d",
                    "Instruction" => "i",
                    _ => "",
                };
                let shared = if k.shared_by > 1 {
                    format!(" (shared by {})", k.shared_by)
                } else {
                    String::new()
                };
                format!("L{}{kind} {}{shared}", k.level, human_bytes(k.size_bytes))
            })
            .collect();
        rows.push(("caches", caches.join(", ")));
    }
    if let Some(mhz) = c.mhz {
        rows.push(("clock", format!("{mhz:.0} MHz")));
    }
    if !c.flags.is_empty() {
        rows.push(("ISA", c.flags.join(" ")));
    }
    rows
}

/// Huge pages: the pool (`2 MiB pages: 0 in the pool, 0 free`) and the transparent mode;
/// `None` when neither is known (results of an older accio).
pub fn huge_pages(h: &HugePages) -> Option<String> {
    if h.size_bytes.is_none() && h.transparent.is_none() {
        return None;
    }
    let pool = match h.size_bytes {
        Some(s) => format!(
            "{} pages: {} in the pool, {} free",
            human_bytes(s),
            h.total,
            h.free
        ),
        None => "none".into(),
    };
    Some(match &h.transparent {
        Some(t) => format!("{pool}; transparent: {t}"),
        None => pool,
    })
}

/// `Gen4 x16 (16.0 GT/s, 128b/130b)`: generation, lanes, rate and line code.
pub fn link_name(l: &Link) -> String {
    let generation = l
        .generation
        .map_or_else(|| "PCIe".to_string(), |g| format!("Gen{g}"));
    format!(
        "{generation} x{} ({} GT/s, {})",
        l.width,
        fmt3(l.speed_gts),
        l.encoding.name()
    )
}

/// `Gen4 x16 (16.0 GT/s, 128b/130b) = 31.5 GB/s`.
pub fn link(l: &Link) -> String {
    format!("{} = {} GB/s", link_name(l), fmt3(l.gbps))
}

/// Everything `accio info` prints: the node section of the pages, as text.
pub fn node(n: &NodeInfo) -> String {
    super::blocks(&crate::doc::node_blocks(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::node::{Cache, Gpu, PciDevice};

    #[test]
    fn links_read_generation_lanes_and_bandwidth() {
        assert_eq!(
            link(&Link::new(16.0, 8)),
            "Gen4 x8 (16.0 GT/s, 128b/130b) = 15.8 GB/s"
        );
    }

    #[test]
    fn node_text_has_cpu_counts_and_links() {
        let gpu_link = Link::new(16.0, 16);
        let info = NodeInfo {
            cpu: CpuInfo {
                model: "AMD EPYC 7763 64-Core Processor".into(),
                logical_cpus: 4,
                physical_cores: Some(3),
                sockets: Some(2),
                caches: vec![
                    Cache {
                        level: 1,
                        kind: "Data".into(),
                        size_bytes: 32 << 10,
                        shared_by: 1,
                    },
                    Cache {
                        level: 3,
                        kind: "Unified".into(),
                        size_bytes: 32 << 20,
                        shared_by: 2,
                    },
                ],
                mhz: Some(2596.1),
                flags: vec!["avx2".into(), "erms".into(), "fsrm".into()],
            },
            huge_pages: HugePages {
                size_bytes: Some(2 << 20),
                total: 4,
                free: 3,
                transparent: Some("madvise".into()),
            },
            pci: vec![PciDevice {
                address: "0000:41:00.0".into(),
                current_link: Some(gpu_link.clone()),
                ..PciDevice::default()
            }],
            gpus: vec![Gpu {
                address: "0000:41:00.0".into(),
                name: "NVIDIA 0x20b0".into(),
                current_link: Some(gpu_link),
                ..Gpu::default()
            }],
            ..NodeInfo::default()
        };
        let text = node(&info);
        assert!(
            text.contains("4 logical CPUs, 3 cores, 2 sockets"),
            "{text}"
        );
        assert!(
            text.contains("Gen4 x16 (16.0 GT/s, 128b/130b) = 31.5 GB/s"),
            "{text}"
        );
        for line in [
            "caches      L1d 32 KiB, L3 32 MiB (shared by 2)",
            "clock       2596 MHz",
            "ISA         avx2 erms fsrm",
            "huge pages  2 MiB pages: 4 in the pool, 3 free; transparent: madvise",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        }
    }
}
