//! The node's facts as `accio info` prints them: host, CPU, memory, NUMA, file systems,
//! PCIe links with their theoretical bandwidth, GPUs.

use accio_results::node::NodeInfo;

pub use crate::doc::{cpu, cpu_details, huge_pages, link, link_name};

/// Everything `accio info` prints: the node section of the pages, as text.
pub fn node(n: &NodeInfo) -> String {
    node_fit(n, usize::MAX)
}

/// [`node`] within `width` columns (see [`super::blocks_fit`]).
pub fn node_fit(n: &NodeInfo, width: usize) -> String {
    super::blocks_fit(&crate::doc::node_blocks(n), width)
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::node::{Cache, CpuInfo, Gpu, HugePages, Link, PciDevice};

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
