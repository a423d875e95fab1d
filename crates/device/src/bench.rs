//! `accio bench device`: NVIDIA `nvbandwidth`'s copy-engine tests for every GPU (a
//! builder), recorded as figures beside their ceilings.
//!
//! For each GPU, each size and each [`Test`] (host→device and device→host from pinned and
//! pageable memory, both at once, device→device): one warm-up pass, then `passes` timed
//! passes of [`copies_per_pass`] copies (see [`crate::copy`] for the method); then the
//! small-copy latency each way, and the one-way time of a flag handed between host and GPU
//! through mapped pinned memory (the GPU's stream polls it; skipped with the reason where
//! stream memory operations are unsupported). Host↔device figures stand beside the PCIe link's
//! theoretical bandwidth (from sysfs, as `accio info` reads it: give it with
//! [`DeviceBench::node`]); device→device beside the device memory's copy rate.
//!
//! ```no_run
//! use accio_device::bench::DeviceBench;
//! use accio_results::model::Recorder;
//! use accio_results::node::NodeInfo;
//!
//! let mut rec = Recorder::new(None).unwrap();
//! let bench = DeviceBench::quick().node(&NodeInfo::detect());
//! match bench.run(&mut rec, &mut |_event| {}) {
//!     Ok(()) => println!("{} figures", rec.report().figures.len()),
//!     Err(e) if e.is_unavailable() => println!("skipped: {e}"),
//!     Err(e) => eprintln!("error: {e}"),
//! }
//! ```

use std::collections::BTreeMap;

use accio_results::event::Event;
use accio_results::metric::device as copy_names;
use accio_results::model::{Figure, Recorder};
use accio_results::node::NodeInfo;
use accio_results::size::format_size;

use crate::copy::{self, copies_per_pass, LinkCeiling, Test, Way};
use crate::driver::Gpu;
use crate::{DeviceInfo, Error, Result};

/// Small copies per latency pass.
const LATENCY_COPIES: u64 = 200;
/// Flag round trips per pass.
const FLAG_ROUND_TRIPS: u64 = 1000;

/// `accio bench device` (a builder; see the module docs).
#[derive(Clone, Debug)]
pub struct DeviceBench {
    sizes: Vec<u64>,
    passes: usize,
    tests: Vec<Test>,
    latency: bool,
    gpus: Option<Vec<u32>>,
    links: BTreeMap<String, LinkCeiling>,
    stop: Option<fn() -> bool>,
}

impl Default for DeviceBench {
    fn default() -> Self {
        DeviceBench::new()
    }
}

impl DeviceBench {
    /// Defaults: [`copy::DEFAULT_SIZES`] (4 KiB to 512 MiB), 5 passes, every test and the
    /// latencies, every GPU, no link ceilings.
    pub fn new() -> DeviceBench {
        DeviceBench {
            sizes: copy::DEFAULT_SIZES.to_vec(),
            passes: 5,
            tests: Test::all(),
            latency: true,
            gpus: None,
            links: BTreeMap::new(),
            stop: None,
        }
    }

    /// The quick variant: [`copy::QUICK_SIZES`], 3 passes.
    pub fn quick() -> DeviceBench {
        DeviceBench {
            sizes: copy::QUICK_SIZES.to_vec(),
            passes: 3,
            ..DeviceBench::new()
        }
    }

    /// Copy sizes (default [`copy::DEFAULT_SIZES`]), checked by [`copy::check_sizes`].
    pub fn sizes(mut self, sizes: &[u64]) -> Result<DeviceBench> {
        self.sizes = copy::check_sizes(sizes)?;
        Ok(self)
    }

    /// Timed passes per figure, after the warm-up pass (default 5; at least 1).
    pub fn passes(mut self, n: usize) -> DeviceBench {
        self.passes = n.max(1);
        self
    }

    /// The bandwidth tests to run (default [`Test::all`]).
    pub fn tests(mut self, tests: &[Test]) -> DeviceBench {
        self.tests = tests.to_vec();
        self
    }

    /// Whether to measure the small-copy latencies (default yes).
    pub fn latency(mut self, on: bool) -> DeviceBench {
        self.latency = on;
        self
    }

    /// Only these GPU ordinals (default every GPU the driver sees).
    pub fn gpus(mut self, ordinals: &[u32]) -> DeviceBench {
        self.gpus = Some(ordinals.to_vec());
        self
    }

    /// The link ceilings of the GPUs in `info` (sysfs, as `accio info` reads it), found by
    /// PCI address (default: none, host↔device figures without a ceiling).
    pub fn node(mut self, info: &NodeInfo) -> DeviceBench {
        for g in &info.gpus {
            let (Some(addr), Some(c)) = (
                copy::normalize_bus_id(&g.address),
                copy::link_ceiling(g.current_link.as_ref(), g.max_link.as_ref()),
            ) else {
                continue;
            };
            self.links.insert(addr, c);
        }
        self
    }

    /// A check run between two figures: when it answers true the bench ends with
    /// [`Error::Interrupted`] (default: none). The CLI passes its Ctrl-C flag.
    pub fn stop_when(mut self, stop: fn() -> bool) -> DeviceBench {
        self.stop = Some(stop);
        self
    }

    /// The figures one GPU gives: a figure per test and size, and two latencies.
    pub fn figures_per_gpu(&self) -> usize {
        self.tests.len() * self.sizes.len() + if self.latency { 3 } else { 0 }
    }

    /// Measures every GPU, recording each figure as it comes and reporting through
    /// `events` (one unit of work per figure).
    ///
    /// # Errors
    ///
    /// [`Error::is_unavailable`] errors before anything is measured when there is no GPU
    /// to use; a failed driver call, [`Error::Interrupted`], or a results file that could
    /// not be written end the run with what was recorded kept.
    pub fn run(&self, rec: &mut Recorder, events: &mut dyn FnMut(Event<'_>)) -> Result<()> {
        let all = crate::devices()?;
        let gpus: Vec<DeviceInfo> = match &self.gpus {
            None => all,
            Some(want) => {
                if let Some(bad) = want.iter().find(|o| !all.iter().any(|g| g.ordinal == **o)) {
                    return Err(Error::Argument(format!(
                        "--gpus: no GPU {bad} (the driver sees {})",
                        all.len()
                    )));
                }
                all.into_iter()
                    .filter(|g| want.contains(&g.ordinal))
                    .collect()
            }
        };
        events(Event::Started {
            bench: copy_names::BENCH,
            total: (gpus.len() * self.figures_per_gpu()) as u64,
        });
        for g in &gpus {
            self.run_gpu(g, rec, events)?;
        }
        events(Event::Done);
        Ok(())
    }

    fn check_stop(&self) -> Result<()> {
        match self.stop {
            Some(f) if f() => Err(Error::Interrupted),
            _ => Ok(()),
        }
    }

    fn run_gpu(
        &self,
        g: &DeviceInfo,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<()> {
        let max = self
            .sizes
            .iter()
            .copied()
            .max()
            .unwrap_or(copy::LATENCY_BYTES);
        events(Event::Step(&format!(
            "GPU {} {} ({}): buffers of {}",
            g.ordinal,
            g.name,
            g.pci_bus_id,
            format_size(max)
        )));
        let mut gpu = Gpu::open(g.ordinal, max as usize)?;
        let link = self.links.get(&g.pci_bus_id);
        if link.is_none() {
            events(Event::Note(
                "no PCIe link in sysfs for this GPU: host-device figures without a ceiling",
            ));
        }
        let memory_copy = gpu.memory_copy_gbps();
        let l2 = gpu.l2_bytes();
        if let Some(l2) = l2.filter(|_| {
            self.tests
                .iter()
                .any(|t| t.copy == copy::Copy::DeviceToDevice)
                && self.sizes.iter().any(|&s| !copy::memory_bound(s, l2))
        }) {
            events(Event::Note(&format!(
                "device→device copies whose two buffers fit the GPU's L2 cache ({}) stand \
                 without the memory's copy rate as ceiling: the cache serves them faster",
                format_size(l2)
            )));
        }
        for &test in &self.tests {
            for &size in &self.sizes {
                self.check_stop()?;
                let memory_copy = memory_copy.filter(|_| copy::memory_bound(size, l2));
                let copies = copies_per_pass(size);
                gpu.pass(test, size as usize, copies)?;
                let secs = (0..self.passes)
                    .map(|_| gpu.pass(test, size as usize, copies))
                    .collect::<Result<Vec<f64>>>()?;
                if let Some(f) =
                    copy::bandwidth_figure(g, test, size, copies, &secs, link, memory_copy)
                {
                    record(rec, events, f)?;
                }
                events(Event::Advanced(1));
            }
        }
        if self.latency {
            for way in [Way::HostToDevice, Way::DeviceToHost] {
                self.check_stop()?;
                gpu.latency_pass(way, LATENCY_COPIES / 4)?;
                let secs = (0..self.passes)
                    .map(|_| gpu.latency_pass(way, LATENCY_COPIES))
                    .collect::<Result<Vec<f64>>>()?;
                if let Some(f) = copy::latency_figure(g, way, LATENCY_COPIES, &secs) {
                    record(rec, events, f)?;
                }
                events(Event::Advanced(1));
            }
            self.check_stop()?;
            // Stream memory operations may be unsupported (old drivers, some
            // virtualized GPUs): then this one figure is skipped, with the reason.
            let flag = gpu.flag_pass(FLAG_ROUND_TRIPS / 4).and_then(|_| {
                (0..self.passes)
                    .map(|_| gpu.flag_pass(FLAG_ROUND_TRIPS))
                    .collect::<Result<Vec<f64>>>()
            });
            match flag {
                Ok(secs) => {
                    if let Some(f) = copy::flag_latency_figure(g, FLAG_ROUND_TRIPS, &secs) {
                        record(rec, events, f)?;
                    }
                }
                Err(e @ (Error::Driver { .. } | Error::Argument(_))) => {
                    events(Event::Skipped(&format!(
                        "GPU {}: flag latency through mapped pinned memory: {e}",
                        g.ordinal
                    )));
                }
                Err(e) => return Err(e),
            }
            events(Event::Advanced(1));
        }
        Ok(())
    }
}

/// Records `fig` and reports it as [`Event::Figure`], in that order.
fn record(rec: &mut Recorder, events: &mut dyn FnMut(Event<'_>), fig: Figure) -> Result<()> {
    rec.push(fig)?;
    if let Some(f) = rec.report().figures.last() {
        events(Event::Figure(f));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::node::{Gpu as NodeGpu, Link};

    #[test]
    fn bad_sizes_are_refused_before_any_gpu_call() {
        assert!(DeviceBench::new().sizes(&[0]).is_err());
        let b = DeviceBench::quick().sizes(&[4096, 1 << 20]).unwrap();
        assert_eq!(b.figures_per_gpu(), 6 * 2 + 3);
        assert_eq!(b.latency(false).figures_per_gpu(), 12);
    }

    #[test]
    fn link_ceilings_are_found_by_pci_address() {
        let info = NodeInfo {
            gpus: vec![NodeGpu {
                address: "0000:3B:00.0".into(),
                current_link: Some(Link::new(2.5, 16)),
                max_link: Some(Link::new(16.0, 16)),
                ..NodeGpu::default()
            }],
            ..NodeInfo::default()
        };
        let b = DeviceBench::new().node(&info);
        let c = b.links.get("0000:3b:00.0").unwrap();
        assert_eq!(c.name, "PCIe 4.0 x16 theoretical");
    }

    /// Runs on a GPU machine; elsewhere the run is refused with the cause, records
    /// nothing, and the test says it skipped.
    #[test]
    fn a_run_without_a_device_records_nothing_and_names_the_cause() {
        let mut rec = Recorder::new(None).unwrap();
        let bench = DeviceBench::new()
            .sizes(&[4096, 1 << 20])
            .unwrap()
            .passes(2);
        let mut started = false;
        match bench.run(&mut rec, &mut |e| {
            started |= matches!(e, Event::Started { .. })
        }) {
            Err(e) if e.is_unavailable() => {
                assert!(rec.report().figures.is_empty());
                assert!(!started);
                eprintln!("skipped: no CUDA device ({e})");
            }
            Err(e) => panic!("{e}"),
            Ok(()) => {
                let n = crate::devices().unwrap().len();
                let figs = &rec.report().figures;
                assert_eq!(figs.len(), n * bench.figures_per_gpu());
                assert!(figs.iter().all(|f| f.summary.median > 0.0), "{figs:?}");
            }
        }
    }
}
