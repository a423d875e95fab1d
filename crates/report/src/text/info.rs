//! The node's facts as `accio info` prints them: host, CPU, memory, NUMA, file systems,
//! PCIe links with their theoretical bandwidth, GPUs.

use accio_results::node::{CpuInfo, Link, NodeInfo, PciDevice};
use accio_results::num::fmt3;
use accio_results::size::human_bytes;

use super::table::render;

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

/// `Gen4 x16 (16 GT/s, 128b/130b) = 31.5 GB/s`.
pub fn link(l: &Link) -> String {
    let generation = l
        .generation
        .map_or_else(|| "PCIe".to_string(), |g| format!("Gen{g}"));
    format!(
        "{generation} x{} ({} GT/s, {}) = {} GB/s",
        l.width,
        fmt3(l.speed_gts),
        l.encoding.name(),
        fmt3(l.gbps)
    )
}

/// Human-readable text, as `accio info` prints it.
pub fn node(n: &NodeInfo) -> String {
    let gib = human_bytes;
    let mut out = String::new();
    out.push_str(&format!("host     {} (Linux {})\n", n.hostname, n.kernel));
    out.push_str(&format!("cpu      {}\n", cpu(&n.cpu)));
    out.push_str(&format!("memory   {}\n", gib(n.memory_bytes)));
    if n.numa.is_empty() {
        out.push_str("numa     no NUMA information\n");
    } else {
        let nodes: Vec<String> = n
            .numa
            .iter()
            .map(|n| {
                format!(
                    "node{}: cpus {}{}",
                    n.id,
                    n.cpus,
                    n.memory_bytes
                        .map_or(String::new(), |m| format!(", {}", gib(m)))
                )
            })
            .collect();
        out.push_str(&format!(
            "numa     {} node{}: {}\n",
            n.numa.len(),
            if n.numa.len() == 1 { "" } else { "s" },
            nodes.join("; ")
        ));
    }
    out.push_str("\nFile systems\n");
    let rows: Vec<Vec<String>> = n
        .mounts
        .iter()
        .map(|m| {
            vec![
                m.mount_point.clone(),
                m.fs_type.clone(),
                m.backing.clone(),
                m.size_bytes.map_or("-".into(), gib),
                m.free_bytes.map_or("-".into(), gib),
                m.source.clone(),
            ]
        })
        .collect();
    out.push_str(&render(
        &["mount", "type", "backing", "size", "free", "source"],
        &rows,
    ));
    let linked: Vec<&PciDevice> = n.pci.iter().filter(|d| d.current_link.is_some()).collect();
    out.push_str(&format!(
        "\nPCIe ({} devices, {} with link information)\n",
        n.pci.len(),
        linked.len()
    ));
    if !linked.is_empty() {
        let rows: Vec<Vec<String>> = linked
            .iter()
            .map(|d| {
                vec![
                    d.address.clone(),
                    d.class_name.clone(),
                    d.name(),
                    d.current_link.as_ref().map_or("-".into(), link),
                    d.max_link.as_ref().map_or("-".into(), link),
                ]
            })
            .collect();
        out.push_str(&render(
            &["address", "class", "device", "link now", "link max"],
            &rows,
        ));
        out.push_str(
            "GB/s = lanes x GT/s x encoding / 8, per direction (8b/10b for Gen1-2, \
             128b/130b for Gen3-5, FLIT 242/256 for Gen6+)\n",
        );
    }
    out.push_str("\nGPUs\n");
    if n.gpus.is_empty() {
        out.push_str("none\n");
    }
    for g in &n.gpus {
        out.push_str(&format!(
            "{}  {}{}{}\n",
            g.address,
            g.name,
            g.memory_bytes
                .map_or(String::new(), |m| format!(", {}", gib(m))),
            g.current_link
                .as_ref()
                .map_or(String::new(), |l| format!(", {}", link(l)))
        ));
    }
    for n in &n.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
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
