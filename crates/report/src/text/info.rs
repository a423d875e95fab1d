//! The node's facts as `accio info` prints them: host, CPU, memory, NUMA, file systems,
//! PCIe links with their theoretical bandwidth, GPUs.

use accio_results::node::{CpuInfo, Link, NodeInfo};
use accio_results::num::fmt3;

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
    use accio_results::node::{Gpu, PciDevice};

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
    }
}
