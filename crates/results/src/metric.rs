//! The names figures are filed under: each bench's `bench` name, its metric names, and the
//! published reference points that tables quote beside them. Benches record figures under
//! these names; exporters look figures up by them. Renaming one changes the JSON schema.

/// The transport bench: latency, streaming and RMA bandwidth, connection and registration.
pub mod transport {
    /// The `bench` name of every figure this module records.
    pub const BENCH: &str = "transport";

    /// One-way latency, us.
    pub const LATENCY: &str = "latency";
    /// Streaming bandwidth counted at the receiver, GB/s.
    pub const STREAM_BW: &str = "stream_bw";
    /// RMA write bandwidth, GB/s.
    pub const RMA_WRITE_BW: &str = "rma_write_bw";
    /// Single-thread memcpy bandwidth (the ceiling), GB/s.
    pub const MEMCPY: &str = "memcpy";
    /// Connection setup, us.
    pub const CONNECT: &str = "connect";
    /// Window registration, us.
    pub const REGISTER: &str = "register";
    /// Window unregistration plus unmapping, us.
    pub const UNREGISTER: &str = "unregister";
    /// The least a one-way message between the driver's and the peer's cores can take, us:
    /// a cache line's hop (shm) or a raw loopback socket hop (tcp); the floor under the
    /// latency figures (`docs/CEILINGS.md`).
    pub const LATENCY_FLOOR: &str = "latency_floor";

    /// Registration and connection times quoted by seed 004 (R. Monnard, "Concurrent I/O from
    /// Xeon Phi accelerator cards", 2015) for Intel SCIF over PCIe, in microseconds: a
    /// reference point printed beside ours, not a ceiling.
    pub const SEED_004_REGISTER_US: &[(u64, f64)] =
        &[(64 << 10, 2000.0), (512 << 10, 2880.0), (2 << 20, 4880.0)];
    /// Seed 004's connection times: SCIF 0.75 ms, sockets (ROOT `TSocket`) 2.23 ms.
    pub const SEED_004_CONNECT_US: (f64, f64) = (750.0, 2230.0);
}

/// The ping-pong matrix of a rank world (`accio bench matrix`): one figure per ordered pair
/// of ranks (params `src`, `dst`: rank labels with node and CPU set), backend and size.
pub mod matrix {
    /// The `bench` name of every figure this module records.
    pub const BENCH: &str = "matrix";
    /// One-way latency (half the median ping-pong round trip), us.
    pub const LATENCY: &str = "latency";
    /// Streaming bandwidth from `src` to `dst`, counted when `dst` acknowledged, GB/s.
    pub const STREAM_BW: &str = "stream_bw";
    /// `write_to` (SYNC) from a window of `src` into a window of `dst` where either is GPU
    /// memory (a label ending in `gpuN`): device windows across ranks, GB/s.
    pub const DEVICE_BW: &str = "device_bw";
}

/// The coalescing bench: small-item rates with and without the communication cache.
pub mod coalesce {
    /// The `bench` name of every figure this module records.
    pub const BENCH: &str = "coalesce";

    /// Items written per second, in millions.
    pub const ITEM_RATE: &str = "item_rate";
    /// Item bytes written per second, GB/s.
    pub const ITEM_BW: &str = "item_bw";
    /// The backend's large-message RMA bandwidth (the ceiling), GB/s.
    pub const LARGE_MSG_BW: &str = "large_msg_bw";
    /// Small messages delivered per second, in millions.
    pub const MSG_RATE: &str = "msg_rate";
}

/// The halo-exchange workload (`accio demo laplace`): seed 001's Jacobi iteration timed by
/// phase per rank, with the halo and compute rates beside their ceilings.
pub mod laplace {
    /// The `bench` name of every figure this module records.
    pub const BENCH: &str = "laplace";

    /// Compute time per iteration (stencil and update), ms.
    pub const COMPUTE: &str = "compute";
    /// Synchronize time per iteration (waiting for the neighbours), ms.
    pub const SYNC: &str = "sync";
    /// Communicate time per iteration (moving the halos), ms.
    pub const COMMUNICATE: &str = "communicate";
    /// Halo bytes a rank sends per iteration over its communicate time, GB/s, read beside the
    /// pair bandwidth (`pair_gbps`): not a ceiling, since a rank whose neighbour's faces
    /// arrived while it waited in the synchronize phase communicates faster than one face's
    /// one-way time.
    pub const HALO_BW: &str = "halo_bw";
    /// Grid bytes the kernel sweeps per second (each read once and written once), GB/s; its
    /// ceiling is an in-place sweep of as many bytes (`x[i] *= s`), every rank at once.
    pub const COMPUTE_BW: &str = "compute_bw";
    /// One face moved one way between two neighbours by the run's path, ping-pong, GB/s:
    /// the pair bandwidth the halo rate is read against.
    pub const PAIR_BW: &str = "pair_bw";
}

/// The file-system bench: Colfax's four modes (and `overwrite`) per path and thread count.
pub mod fs {
    /// One measured operation.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Mode {
        /// Sequential write into a fresh file, closed, no sync.
        Write,
        /// Sequential write with `fsync` inside the timing.
        WriteSync,
        /// Read after the cache was dropped.
        ColdRead,
        /// Read again, warm.
        ReRead,
        /// Write over the existing file (pages present), no sync.
        Overwrite,
    }

    impl Mode {
        /// Colfax's four modes: the default selection.
        pub const DEFAULT: [Mode; 4] = [Mode::Write, Mode::WriteSync, Mode::ColdRead, Mode::ReRead];
        /// Every mode, in measurement order.
        pub const ALL: [Mode; 5] = [
            Mode::Write,
            Mode::WriteSync,
            Mode::ColdRead,
            Mode::ReRead,
            Mode::Overwrite,
        ];

        /// Name on the command line and in JSON (`metric`).
        pub fn name(self) -> &'static str {
            match self {
                Mode::Write => "write",
                Mode::WriteSync => "write+sync",
                Mode::ColdRead => "cold-read",
                Mode::ReRead => "re-read",
                Mode::Overwrite => "overwrite",
            }
        }

        /// Name in tables (Colfax's wording).
        pub fn label(self) -> &'static str {
            match self {
                Mode::ColdRead => "cold read",
                m => m.name(),
            }
        }

        /// Parses a mode name (also `cold_read`, `coldread`, `reread`, `sync`).
        pub fn parse(s: &str) -> Result<Mode, String> {
            let t = s.trim().to_ascii_lowercase().replace(['_', ' '], "-");
            Ok(match t.as_str() {
                "write" => Mode::Write,
                "write+sync" | "write-sync" | "sync" => Mode::WriteSync,
                "cold-read" | "coldread" | "cold" | "read" => Mode::ColdRead,
                "re-read" | "reread" => Mode::ReRead,
                "overwrite" | "rewrite" => Mode::Overwrite,
                _ => {
                    return Err(format!(
                    "unknown mode {s:?} (known: write, write+sync, cold-read, re-read, overwrite)"
                ))
                }
            })
        }

        /// The mode a JSON metric name stands for.
        pub fn from_metric(metric: &str) -> Option<Mode> {
            Mode::ALL.into_iter().find(|m| m.name() == metric)
        }
    }
}

/// Whether a figure of this kind is read against a ceiling (`docs/CEILINGS.md`, one row per
/// kind): `Some(true)` when the rule gives it one, `Some(false)` when it has none by the rule
/// (memcpy itself, setup costs, a device-bound mode, a figure measured as another bench's
/// ceiling), `None` for a kind the rule does not know.
pub fn ceiling_defined(f: &crate::model::Figure) -> Option<bool> {
    let flag = |k: &str| f.params.get(k).and_then(|v| v.as_bool()).unwrap_or(false);
    match (f.bench.as_str(), f.metric.as_str()) {
        ("mem", _) => Some(false),
        // fs figures measured as the merge bench's ceiling carry `for`.
        ("fs", _) if f.params.contains_key("for") => Some(false),
        ("fs", m) => {
            let mode = fs::Mode::from_metric(m)?;
            let page_cache = !flag("direct")
                && matches!(
                    mode,
                    fs::Mode::Write | fs::Mode::Overwrite | fs::Mode::ReRead
                );
            Some(flag("memory_backed") || page_cache)
        }
        (transport::BENCH, m) => Some(matches!(
            m,
            transport::LATENCY | transport::STREAM_BW | transport::RMA_WRITE_BW
        )),
        ("merge", "merge" | "naive") => Some(true),
        (laplace::BENCH, m) => Some(m == laplace::COMPUTE_BW),
        // A repeated pattern writes the same few items over and over: the cache merges
        // them, so the large-message rate does not bound it.
        (coalesce::BENCH, m) => Some(
            matches!(m, coalesce::ITEM_RATE | coalesce::ITEM_BW)
                && f.param_str("pattern") != "repeated",
        ),
        // Copies stand beside the link or the device memory (a device copy that the L2
        // cache holds, `fits_l2`, beside nothing: the cache serves it faster than memory);
        // small-copy and flag latencies have no floor accio can measure.
        (device::BENCH, m) => Some(
            matches!(
                m,
                device::H2D
                    | device::D2H
                    | device::BIDIR
                    | device::D2D
                    | device::D2D_IPC
                    | device::WINDOW_D2D
                    | device::WINDOW_H2D
            ) && !flag("fits_l2"),
        ),
        _ => None,
    }
}

/// Whether a figure measures the node itself rather than work of accio's own data paths:
/// memory copies and the hop between two cores (the transport bench's ceilings, `accio
/// bench mem`), the file systems' own speed (`accio bench fs`, the merge bench's ceilings),
/// the GPUs' copy engines (`accio bench device`). `accio compare` shows their changes but
/// never counts them for or against accio.
pub fn measures_machine(f: &crate::model::Figure) -> bool {
    match (f.bench.as_str(), f.metric.as_str()) {
        ("mem" | "fs" | device::BENCH, _) => true,
        (transport::BENCH, m) => m == transport::MEMCPY || m == transport::LATENCY_FLOOR,
        _ => false,
    }
}

/// Why a figure has no ceiling by the rule (`docs/CEILINGS.md`), in a few words for the
/// ceiling column: `None` where the rule gives it one (or does not know its kind).
pub fn no_ceiling_reason(f: &crate::model::Figure) -> Option<&'static str> {
    if ceiling_defined(f) != Some(false) {
        return None;
    }
    Some(match (f.bench.as_str(), f.metric.as_str()) {
        ("mem", _) => "none: memcpy is the ceiling",
        ("fs", _) if f.params.contains_key("for") => "none: itself a ceiling",
        ("fs", _) => "none: bounded by the device",
        (transport::BENCH, transport::CONNECT | transport::REGISTER | transport::UNREGISTER) => {
            "none: a setup cost"
        }
        (transport::BENCH, _) => "none: itself a ceiling",
        (coalesce::BENCH, coalesce::MSG_RATE) => "none: no transfer to compare",
        (laplace::BENCH, laplace::PAIR_BW) => "none: itself the reference",
        (laplace::BENCH, laplace::HALO_BW) => "none: read beside pair_bw",
        (laplace::BENCH, _) => "none: one phase of the breakdown",
        (coalesce::BENCH, coalesce::LARGE_MSG_BW) => "none: itself a ceiling",
        (coalesce::BENCH, _) => "none: repeated items merge",
        _ => "none",
    })
}

/// The GPU copy bench (`accio bench device`): NVIDIA nvbandwidth's copy-engine tests, one
/// figure per GPU (param `gpu`: its PCI address), host memory (`memory`: pinned, pageable,
/// device) and size.
pub mod device {
    /// The `bench` name of every figure this module records.
    pub const BENCH: &str = "device";
    /// Host → device copy bandwidth, GB/s.
    pub const H2D: &str = "h2d";
    /// Device → host copy bandwidth, GB/s.
    pub const D2H: &str = "d2h";
    /// Both directions at once, bytes of both over the time, GB/s.
    pub const BIDIR: &str = "bidir";
    /// Device → device copy within one GPU, GB/s.
    pub const D2D: &str = "d2d";
    /// Device → device copy from one process into another's device memory on the same
    /// GPU, opened through CUDA IPC, GB/s.
    pub const D2D_IPC: &str = "d2d_ipc";
    /// `write_to` from a device window into another process's device window on the same
    /// GPU, over a transport (`backend` parameter), GB/s.
    pub const WINDOW_D2D: &str = "window_d2d";
    /// `write_to` from a host window into another process's device window, over a
    /// transport (`backend` parameter), GB/s.
    pub const WINDOW_H2D: &str = "window_h2d";
    /// `write_to` from a host window into another process's host window over the same
    /// transport in the same run: the transport's part of `window_h2d`'s ceiling, GB/s.
    pub const WINDOW_H2H: &str = "window_h2h";
    /// A small host → device copy and its completion, us.
    pub const LATENCY_H2D: &str = "latency_h2d";
    /// A small device → host copy and its completion, us.
    pub const LATENCY_D2H: &str = "latency_d2h";
    /// One way of a flag round trip through mapped pinned memory (the host writes, the
    /// GPU's stream waits on it and answers), half the round trip, us.
    pub const LATENCY_FLAG: &str = "latency_flag";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Figure, Unit};

    #[test]
    fn device_copies_have_a_ceiling_and_device_latencies_none() {
        let fig = |m: &str, unit| Figure::new(device::BENCH, m, unit, vec![1.0]).unwrap();
        for m in [
            device::H2D,
            device::D2H,
            device::BIDIR,
            device::D2D,
            device::D2D_IPC,
            device::WINDOW_D2D,
            device::WINDOW_H2D,
        ] {
            assert_eq!(ceiling_defined(&fig(m, Unit::GBps)), Some(true), "{m}");
        }
        for m in [
            device::LATENCY_H2D,
            device::LATENCY_D2H,
            device::LATENCY_FLAG,
        ] {
            assert_eq!(ceiling_defined(&fig(m, Unit::Micros)), Some(false), "{m}");
        }
    }
}
