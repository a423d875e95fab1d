//! The summary and node sections (the headline figures and the hardware they were measured on).

use accio_results::model::Report;
use accio_results::node::NodeInfo;
use accio_results::num::fmt3;

use crate::summary;

use super::transport::{transport_plots, SECTION_TITLE};
use super::{Block, Plot, PlotRef, Section, Table};

pub(super) fn summary_section(report: &Report) -> Section {
    let heads = summary::headlines(report);
    let mut blocks = Vec::new();
    if report.figures.is_empty() {
        blocks.push(Block::Para("No figures were recorded.".into()));
    } else if heads.is_empty() {
        blocks.push(Block::Para(
            "None of this run's figures is a headline figure (memory, file systems, \
             transports, or a bench's best figure); they are all in the sections below."
                .into(),
        ));
    } else {
        blocks.push(Block::Para(
            "The headline figures, each beside the ceiling it should be read against. \
             \"Of ceiling\" is median / ceiling for bandwidths and rates, and ceiling / median \
             for times (a time's ceiling is a floor), so 100% is at the limit."
                .into(),
        ));
        blocks.push(Block::Table(summary::table(&heads)));
        // The transport plots are drawn in their section: here, where to find them.
        for p in transport_plots(report) {
            blocks.push(Block::Plot(Plot::Ref(PlotRef {
                id: p.id,
                title: p.title,
                section: SECTION_TITLE.into(),
            })));
        }
    }
    Section {
        id: "summary".into(),
        title: "Summary".into(),
        blocks,
    }
}

pub(super) fn node_section(report: &Report) -> Section {
    let mut blocks = Vec::new();
    let Some(info) = &report.info else {
        let h = &report.host;
        let mut t = Table::new(&["", ""], &[]);
        t.rows = vec![
            vec!["host".into(), h.hostname.clone()],
            vec!["cpu".into(), format!("{} ({} CPUs)", h.cpu, h.cores)],
            vec![
                "memory".into(),
                accio_results::size::human_bytes(h.memory_bytes),
            ],
            vec!["kernel".into(), h.kernel.clone()],
        ];
        blocks.push(Block::Table(t));
        blocks.push(Block::Para(
            "This run did not record node details (file systems, PCIe links, GPUs); \
             `accio info` shows them."
                .into(),
        ));
        return Section {
            id: "node".into(),
            title: "Node".into(),
            blocks,
        };
    };
    blocks.extend(node_blocks(info));
    Section {
        id: "node".into(),
        title: "Node".into(),
        blocks,
    }
}

/// The node facts as blocks (also what `accio info` would print, in tables).
pub fn node_blocks(info: &NodeInfo) -> Vec<Block> {
    let human = accio_results::size::human_bytes;
    let mut blocks = Vec::new();
    let mut t = Table::new(&["", ""], &[]);
    t.rows.push(vec!["host".into(), info.hostname.clone()]);
    t.rows
        .push(vec!["cpu".into(), super::cells::cpu(&info.cpu)]);
    for (k, v) in super::cells::cpu_details(&info.cpu) {
        t.rows.push(vec![k.into(), v]);
    }
    t.rows.push(vec!["memory".into(), human(info.memory_bytes)]);
    if let Some(h) = super::cells::huge_pages(&info.huge_pages) {
        t.rows.push(vec!["huge pages".into(), h]);
    }
    t.rows.push(vec![
        "NUMA".into(),
        if info.numa.is_empty() {
            "no NUMA information".into()
        } else {
            info.numa
                .iter()
                .map(|n| {
                    format!(
                        "node{}: cpus {}{}",
                        n.id,
                        n.cpus,
                        n.memory_bytes
                            .map_or(String::new(), |m| format!(", {}", human(m)))
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        },
    ]);
    t.rows.push(vec!["kernel".into(), info.kernel.clone()]);
    blocks.push(Block::Table(t));
    if !info.mounts.is_empty() {
        blocks.push(Block::Heading("File systems".into()));
        let mut t = Table::new(
            &["mount", "type", "backing", "size", "free", "source"],
            &["size", "free"],
        );
        for m in &info.mounts {
            t.rows.push(vec![
                m.mount_point.clone(),
                format!("{}{}", m.fs_type, if m.read_only { " (ro)" } else { "" }),
                m.backing.clone(),
                m.size_bytes.map_or("-".into(), human),
                m.free_bytes.map_or("-".into(), human),
                m.source.clone(),
            ]);
        }
        blocks.push(Block::Table(t));
    }
    blocks.push(Block::Heading("PCIe".into()));
    let linked: Vec<_> = info
        .pci
        .iter()
        .filter(|d| d.current_link.is_some() || d.max_link.is_some())
        .collect();
    if linked.is_empty() {
        blocks.push(Block::Para(format!(
            "{} PCI devices, none with PCIe link information in sysfs.",
            info.pci.len()
        )));
    } else {
        let mut t = Table::new(
            &[
                "address", "class", "device", "link now", "GB/s now", "link max", "GB/s max",
            ],
            &["GB/s now", "GB/s max"],
        );
        for d in &linked {
            let link = |l: Option<&accio_results::node::Link>| match l {
                Some(l) => (super::cells::link_name(l), fmt3(l.gbps)),
                None => ("-".into(), "-".into()),
            };
            let (now, now_gb) = link(d.current_link.as_ref());
            let (max, max_gb) = link(d.max_link.as_ref());
            t.rows.push(vec![
                d.address.clone(),
                d.class_name.clone(),
                d.name(),
                now,
                now_gb,
                max,
                max_gb,
            ]);
        }
        t.notes.push(
            "GB/s: theoretical bandwidth per direction, lanes × GT/s × encoding / 8 (8b/10b \
             for Gen1–2, 128b/130b for Gen3–5, FLIT 242/256 for Gen6+), as \"IO Performance on \
             Intel's MIC Architecture\" (2013) computes 16 × 5 GT/s × 8/10 = 8 GB/s for PCIe 2.0 x16."
                .into(),
        );
        t.notes.push(format!(
            "{} of {} PCI devices report a link.",
            linked.len(),
            info.pci.len()
        ));
        blocks.push(Block::Table(t));
    }
    blocks.push(Block::Heading("GPUs".into()));
    if info.gpus.is_empty() {
        blocks.push(Block::Para(
            "None on PCI (no display-class device in sysfs).".into(),
        ));
    } else {
        let mut t = Table::new(
            &[
                "address",
                "name",
                "memory",
                "driver",
                "NUMA",
                "PCIe link",
                "GB/s",
            ],
            &["GB/s"],
        );
        for g in &info.gpus {
            t.rows.push(vec![
                g.address.clone(),
                g.name.clone(),
                g.memory_bytes.map_or("-".into(), human),
                g.driver.clone().unwrap_or_else(|| "-".into()),
                g.numa_node.map_or("-".into(), |n| n.to_string()),
                g.current_link
                    .as_ref()
                    .map_or("-".into(), super::cells::link),
                g.current_link.as_ref().map_or("-".into(), |l| fmt3(l.gbps)),
            ]);
        }
        blocks.push(Block::Table(t));
    }
    if !info.notes.is_empty() {
        blocks.push(Block::List(info.notes.clone()));
    }
    blocks
}
