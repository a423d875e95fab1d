//! Unit tests of the node facts: PCIe arithmetic, parsers, and fixture sysfs trees.

use super::sysfs::{expand_cpu_list, lookup_pci_ids, parse_nvidia_smi};
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
    assert_eq!(
        info.gpus[0].numa_node,
        Some(1),
        "the GPU's NUMA node, from its PCI device"
    );
    assert_eq!(info.gpu_links().count(), 1);
    assert!(info.notes.is_empty(), "{:?}", info.notes);
    // The JSON form reads back the same.
    let back: NodeInfo = serde_json::from_str(&serde_json::to_string(&info).unwrap()).unwrap();
    assert_eq!(back, info);
}

#[test]
fn caches_clock_isa_flags_and_huge_pages_are_read() {
    let t = Tree::new("caches");
    t.file(
        "proc/cpuinfo",
        "processor\t: 0\ncpu MHz\t\t: 2596.142\nflags\t\t: fpu sse4_2 avx avx2 erms avx512f fsrm\n",
    )
    .file(
        "proc/meminfo",
        "MemTotal: 1024 kB\nHugePages_Total:       8\nHugePages_Free:        5\nHugepagesize:       2048 kB\n",
    )
    .file("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    .file("sys/devices/system/cpu/online", "0-1\n");
    for (i, (level, ty, size, shared)) in [
        (3, "Unified", "32768K", "0-1"),
        (1, "Data", "32K", "0"),
        (2, "Unified", "1024K", "0"),
        (1, "Instruction", "32K", "0"),
    ]
    .into_iter()
    .enumerate()
    {
        let d = format!("sys/devices/system/cpu/cpu0/cache/index{i}");
        t.file(&format!("{d}/level"), &format!("{level}\n"))
            .file(&format!("{d}/type"), &format!("{ty}\n"))
            .file(&format!("{d}/size"), &format!("{size}\n"))
            .file(&format!("{d}/shared_cpu_list"), &format!("{shared}\n"));
    }
    let info = NodeInfo::from_roots(&t.roots());
    let c: Vec<(u32, &str, u64, usize)> = info
        .cpu
        .caches
        .iter()
        .map(|k| (k.level, k.kind.as_str(), k.size_bytes, k.shared_by))
        .collect();
    assert_eq!(
        c,
        [
            (1, "Data", 32 << 10, 1),
            (1, "Instruction", 32 << 10, 1),
            (2, "Unified", 1 << 20, 1),
            (3, "Unified", 32 << 20, 2)
        ]
    );
    assert_eq!(info.cpu.mhz, Some(2596.142));
    // In NOTABLE_FLAGS order, others left out.
    assert_eq!(
        info.cpu.flags,
        ["sse4_2", "avx", "avx2", "avx512f", "erms", "fsrm"]
    );
    let h = &info.huge_pages;
    assert_eq!((h.size_bytes, h.total, h.free), (Some(2 << 20), 8, 5));
    assert_eq!(h.transparent.as_deref(), Some("madvise"));
    // A cpufreq maximum wins over the current clock.
    t.file(
        "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",
        "3500000\n",
    );
    assert_eq!(NodeInfo::from_roots(&t.roots()).cpu.mhz, Some(3500.0));
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
