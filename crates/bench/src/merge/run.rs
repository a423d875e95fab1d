//! The measuring: the run loop over targets and producer counts, the fs ceiling, the naive
//! and merge figures, and one timed merge.

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use accio_merge::{ContainerSink, Merger, Producer, ProducerOptions, SyncPolicy, WriteMode};

use super::guards::{wait_child, Kid, RemoveOnDrop};
use super::naive::naive_once;
use super::procfs::{merger_sched, peak_rss, reset_peak_rss};
use super::producer::{set_nice, source_buffer, ProducerConfig};
use super::{io_err, rss_within_budget, warn, MergeBench, MergeBenchError, Placement};
use crate::emit;
use crate::fs::{FsBench, FsError, FsInfo, Mode};
use crate::scratch::ScratchDir;
use crate::CEILING_RETRIES;
use accio_results::event::Event;
use accio_results::hazard::{Hazard, HazardKind};
use accio_results::model::{CeilingSource, Figure, Recorder, Unit};
use accio_results::node::probe;
use accio_results::num::fmt3;
use accio_results::size::format_size;

impl MergeBench {
    /// Runs the bench, pushing figures to `rec` as they are complete. A target that
    /// cannot be used is reported (log and warning) and skipped.
    pub fn run(
        &self,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), MergeBenchError> {
        self.validate()?;
        if self.device.is_some() {
            // Before any ceiling is measured: without a GPU nothing here can run.
            accio_device::available()
                .map_err(|e| MergeBenchError::Config(format!("blocks from device memory: {e}")))?;
        }
        events(Event::Started {
            bench: "merge",
            total: (self.targets.len() * self.producers.len()) as u64,
        });
        let placements: Vec<Placement> = self
            .placements
            .iter()
            .copied()
            .filter(|p| *p == Placement::Threads || self.command.is_some())
            .collect();
        for target in &self.targets {
            self.check_cancel()?;
            let info = match probe::probe(target) {
                Ok(i) if !i.read_only => i,
                Ok(_) => {
                    let w = format!("merge: {} is read-only; skipped", target.display());
                    warn(rec, events, HazardKind::NotMeasured, w)?;
                    events(Event::Advanced(self.producers.len() as u64));
                    continue;
                }
                Err(e) => {
                    let w = format!("merge: {}: {e}; skipped", target.display());
                    warn(rec, events, HazardKind::NotMeasured, w)?;
                    events(Event::Advanced(self.producers.len() as u64));
                    continue;
                }
            };
            // Every file of the target's runs goes into one private directory, removed
            // however the run ends (see `crate::scratch`).
            let scratch = match ScratchDir::new_in(target, "merge") {
                Ok(s) => s,
                Err(e) => {
                    let w = format!(
                        "merge: {}: cannot create a test directory in it: {e}; skipped",
                        target.display()
                    );
                    warn(rec, events, HazardKind::NotMeasured, w)?;
                    events(Event::Advanced(self.producers.len() as u64));
                    continue;
                }
            };
            let sync = self.sync_persistent && !info.memory_backed();
            events(Event::Step(&format!(
                "merge {}: {} ({}-backed){}",
                target.display(),
                info.fs_type,
                info.backing.name(),
                if sync { ", synced at close" } else { "" }
            )));
            let mut ceiling = if self.ceilings {
                self.ceiling(&info, sync, 0, rec, events)?
            } else {
                None
            };
            for &p in &self.producers {
                self.check_cancel()?;
                let f = self.buffers_for(p, &info);
                let total = p as u64 * f * self.buffer_bytes as u64;
                let room = match info.free {
                    Some(free) => free,
                    None => probe::mem_available().unwrap_or(u64::MAX),
                };
                if total + total / 16 + (64 << 20) > room {
                    warn(
                        rec,
                        events,
                        HazardKind::NotMeasured,
                        format!(
                            "merge {}: {p} x {f} x {} = {} does not fit ({} free); skipped",
                            target.display(),
                            format_size(self.buffer_bytes as u64),
                            accio_results::size::human_bytes(total),
                            accio_results::size::human_bytes(room)
                        ),
                    )?;
                    events(Event::Advanced(1));
                    continue;
                }
                // The naive alternative writes from host memory: no peer for device blocks.
                let naive = if self.naive && self.device.is_none() {
                    self.measure_naive(&info, &scratch, p, f, sync, &mut ceiling, rec, events)?
                } else {
                    None
                };
                for backend in &self.backends {
                    for &mode in &self.modes {
                        if backend == "tcp" && mode == WriteMode::Direct {
                            continue; // producers may be elsewhere: tcp copies
                        }
                        for &pl in &placements {
                            self.measure_merge(
                                &info,
                                &scratch,
                                backend,
                                mode,
                                pl,
                                p,
                                f,
                                sync,
                                &mut ceiling,
                                naive,
                                rec,
                                events,
                            )?;
                        }
                    }
                }
                events(Event::Advanced(1));
            }
            scratch.close().map_err(io_err(format!(
                "removing the test directory of {}",
                target.display()
            )))?;
        }
        events(Event::Done);
        Ok(())
    }

    /// The write ceiling of `info.path`, from `bench fs` in this run: the best of one stream
    /// and one stream per core, of as many bytes as one merge run writes (the first
    /// producer count's, at most 1 GiB). `again` counts the times it was measured before.
    fn ceiling(
        &self,
        info: &FsInfo,
        sync: bool,
        again: usize,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Option<(String, f64)>, MergeBenchError> {
        let mode = if sync { Mode::WriteSync } else { Mode::Write };
        let record = if self.buffer_bytes.is_multiple_of(4096) {
            self.buffer_bytes
        } else {
            4 << 20
        };
        // As many bytes as a merge run writes (the first producer count's run, at most
        // 1 GiB): a ceiling of other work (a longer run amortizes its fixed costs more)
        // would not be the limit of this work.
        let run = self.producers.first().map_or(self.run_bytes, |&p| {
            p as u64 * self.buffers_for(p, info) * self.buffer_bytes as u64
        });
        let size = (run.min(1 << 30) / record as u64).max(1) * record as u64;
        let mut tmp = Recorder::new(None).map_err(MergeBenchError::Record)?;
        // One stream and as many as the machine has cores: producers write in parallel, so
        // a single stream does not bound them (docs/CEILINGS.md).
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut streams = vec![1, cores];
        streams.dedup();
        let fsb = FsBench::new([&info.path])
            .modes(&[mode])
            .threads(&streams)
            .file_size(size)
            .record_size(record)
            .repeats(self.repeats.max(3))
            .ceilings(false)
            .cancel_on(self.cancel);
        let out = fsb
            .run(&mut tmp, &mut |e| match e {
                // The ceiling is a step of this bench, not a bench of its own.
                Event::Started { .. } | Event::Advanced(_) | Event::Done => {}
                e => events(e),
            })
            .map_err(|e| match e {
                FsError::Interrupted => MergeBenchError::Interrupted,
                e => MergeBenchError::Io {
                    what: format!("measuring the fs ceiling of {}", info.path.display()),
                    source: std::io::Error::other(e.to_string()),
                },
            })?;
        for f in &out.failures {
            warn(
                rec,
                events,
                HazardKind::NotMeasured,
                format!("merge: ceiling of {}: {f}", info.path.display()),
            )?;
        }
        let mut found: Option<(String, f64)> = None;
        for fig in &tmp.report().figures {
            if fig.bench == "fs"
                && fig.metric == mode.name()
                && found.as_ref().is_none_or(|(_, v)| fig.summary.median > *v)
            {
                let n = fig.param_u64("threads").unwrap_or(1);
                found = Some((
                    format!(
                        "fs {} of {} records, best of {} stream(s) ({n}), same path, same run",
                        mode.name(),
                        format_size(record as u64),
                        streams
                            .iter()
                            .map(|s| s.to_string())
                            .collect::<Vec<_>>()
                            .join(" and "),
                    ),
                    fig.summary.median,
                ));
            }
            let role = match again {
                0 => "merge ceiling".to_string(),
                n => format!("merge ceiling, measured again ({n})"),
            };
            rec.push(fig.clone().param("for", role))
                .map_err(MergeBenchError::Record)?;
        }
        Ok(found)
    }

    /// `fig` (read against `ceiling`) as it is recorded. A figure past its ceiling beyond
    /// the noise means the ceiling met a slower phase of the machine than the figure
    /// (docs/CEILINGS.md; CI saw 16 producers write+sync at 1.67 GB/s against a ceiling of
    /// 1.55 that reads 2.1-2.8 in other runs): the ceiling is measured again, up to
    /// [`CEILING_RETRIES`] times while the figure still passes it, and the best is kept,
    /// for this figure and the path's later ones.
    pub(super) fn settle(
        &self,
        mut fig: Figure,
        info: &FsInfo,
        sync: bool,
        ceiling: &mut Option<(String, f64)>,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Figure, MergeBenchError> {
        for again in 1..=CEILING_RETRIES {
            if !fig.beyond_ceiling() {
                break;
            }
            if let Some(c) = self.ceiling(info, sync, again, rec, events)? {
                if ceiling.as_ref().is_none_or(|(_, v)| c.1 > *v) {
                    fig = fig.ceiling(c.0.clone(), c.1, CeilingSource::Measured);
                    *ceiling = Some(c);
                }
            }
        }
        Ok(fig)
    }

    #[allow(clippy::too_many_arguments)]
    fn figure(
        &self,
        metric: &str,
        info: &FsInfo,
        p: usize,
        f: u64,
        sync: bool,
        samples: Vec<f64>,
        ceiling: Option<&(String, f64)>,
    ) -> Option<Figure> {
        let total = p as u64 * f * self.buffer_bytes as u64;
        let mut fig = Figure::new("merge", metric, Unit::GBps, samples)?
            .param("path", info.path.display().to_string())
            .param("fs_type", info.fs_type.clone())
            .param("memory_backed", info.memory_backed())
            .param("producers", p)
            .param("buffers", f)
            .param("buffer_bytes", self.buffer_bytes as u64)
            .param("bytes", total)
            .param("sync", sync);
        if let Some(gpu) = self.device {
            fig = fig.param("source", format!("device:{gpu}"));
        }
        if let Some((name, v)) = ceiling {
            fig = fig.ceiling(name.clone(), *v, CeilingSource::Measured);
        }
        Some(fig)
    }

    #[allow(clippy::too_many_arguments)]
    fn measure_naive(
        &self,
        info: &FsInfo,
        scratch: &ScratchDir,
        p: usize,
        f: u64,
        sync: bool,
        ceiling: &mut Option<(String, f64)>,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Option<f64>, MergeBenchError> {
        let mut samples = Vec::new();
        let src = source_buffer(self.buffer_bytes, 0);
        for _ in 0..self.repeats {
            self.check_cancel()?;
            samples.push(naive_once(scratch, p, f, &src, sync, self.cancel)?);
        }
        let Some(fig) = self.figure("naive", info, p, f, sync, samples, ceiling.as_ref()) else {
            return Ok(None);
        };
        let fig = self.settle(fig, info, sync, ceiling, rec, events)?;
        let fig = fig.param("placement", "threads").method(
            "each producer thread pwrites its buffers to its own file; then copy_file_range \
             concatenates the files into one (each part removed once appended)",
        );
        let median = fig.summary.median;
        emit::figure(rec, events, fig).map_err(MergeBenchError::Record)?;
        Ok(Some(median))
    }

    #[allow(clippy::too_many_arguments)]
    fn measure_merge(
        &self,
        info: &FsInfo,
        scratch: &ScratchDir,
        backend: &str,
        mode: WriteMode,
        placement: Placement,
        p: usize,
        f: u64,
        sync: bool,
        ceiling: &mut Option<(String, f64)>,
        naive: Option<f64>,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), MergeBenchError> {
        let mut samples = Vec::new();
        let mut rss = 0u64;
        let mut stats = None;
        let mut overhead = 0.0f64;
        let (mut writing, mut idle, mut sched) = (Vec::new(), Vec::new(), Vec::new());
        let mut inserted = Vec::new();
        let mut exit_lag = Vec::new();
        let mut used = mode;
        let mut claim = "";
        for _ in 0..self.repeats {
            self.check_cancel()?;
            let r = match self.merge_once(scratch, backend, mode, placement, p, f, sync) {
                Err(MergeBenchError::Merge {
                    source: accio_merge::MergeError::Config(why),
                    ..
                }) if mode == WriteMode::Direct && why.contains("cannot write in place") => {
                    let w = format!(
                        "merge {}: {backend} direct: {why}; not measured",
                        info.path.display()
                    );
                    return warn(rec, events, HazardKind::NotMeasured, w);
                }
                r => r?,
            };
            used = r.mode;
            claim = r.claim;
            samples.push(r.gbps);
            writing.push(r.writing);
            idle.push(r.idle);
            sched.push(r.sched);
            inserted.push(r.inserted);
            exit_lag.push(r.exit_lag);
            rss = rss.max(r.peak_rss);
            stats = Some(r.stats);
            overhead = r.file_overhead;
        }
        // Where the merger thread's time went, for the run with the median throughput.
        let mid = accio_results::stats::median_index(&samples).expect("at least one repeat");
        let (writing, idle, sched, inserted) = (writing[mid], idle[mid], sched[mid], inserted[mid]);
        let exit_lag = exit_lag[mid];
        let write_gbps = samples[mid] / writing.max(f64::MIN_POSITIVE);
        let Some(fig) = self.figure("merge", info, p, f, sync, samples, ceiling.as_ref()) else {
            return Ok(());
        };
        let mut fig = self.settle(fig, info, sync, ceiling, rec, events)?;
        let stats = stats.expect("at least one repeat");
        let mut method = format!(
            "producers connect, prepare an S-byte buffer and get their first slots (untimed), \
             start together, write_block F times ({}), finish; timed until Merger::close \
             returned (index written{}); producer processes' exits come after the clock \
             (producer_exit_s: from its stop to the last exit)",
            match (backend, used) {
                ("shm", WriteMode::Direct) => {
                    "written in place: one copy into room of the output file, on tmpfs by \
                     inserting pages (userfaultfd) while several producers are connected and, \
                     alone, by a pwrite of part of each block of 512 KiB or more beside a \
                     helper thread inserting the rest (inserted_blocks says how many blocks \
                     were); else one pwrite (alone, with a helper thread checksumming large \
                     blocks meanwhile); commit by message; the merger writes only the headers"
                }
                ("shm", _) => "one copy into the merger's shared slot, commit by message; the merger copies the slot into the file",
                _ => "vwrite_to over the socket, commit by message; the merger copies the slot into the file",
            },
            if sync { ", file fsynced" } else { "" }
        );
        if self.producer_nice != 0 {
            method += &format!("; producers at nice {}", self.producer_nice);
        }
        fig = fig
            .param("backend", backend)
            .param("write_mode", used.name())
            .param(
                "claim",
                if used == WriteMode::Direct {
                    claim
                } else {
                    "-"
                },
            )
            .param("inserted_blocks", inserted)
            .param("placement", placement.name())
            .param("budget_bytes", self.budget as u64)
            .param("slot_bytes", self.slot_bytes() as u64)
            .param("merger_peak_rss_bytes", rss)
            .param("file_overhead", overhead)
            .param("peak_slots", stats.peak_slots)
            .param("slot_moves", stats.moves)
            .param("merger_writing_share", writing)
            .param("merger_idle_share", idle)
            .param("merger_write_gbps", write_gbps)
            .param("producer_nice", self.producer_nice)
            .param(
                "merger_on_cpu_share",
                sched.map_or(Value::Null, |s| s.0.into()),
            )
            .param(
                "merger_runqueue_share",
                sched.map_or(Value::Null, |s| s.1.into()),
            )
            .param("naive_gbps", naive.map_or(Value::Null, Value::from))
            .param("producer_exit_s", exit_lag.map_or(Value::Null, Value::from))
            .method(method);
        let detail = format!(
            "merge {}: {backend} {} {}, {p} producer(s): merger peak RSS {}; merger thread \
             writing {:.0}% of the time (at {} GB/s), idle {:.0}%{}{}",
            info.path.display(),
            used.name(),
            placement.name(),
            accio_results::size::human_bytes(rss),
            writing * 100.0,
            fmt3(write_gbps),
            idle * 100.0,
            sched.map_or(String::new(), |(on, wait)| format!(
                ", on a CPU {:.0}%, waiting for one {:.0}%",
                on * 100.0,
                wait * 100.0
            )),
            if used == WriteMode::Direct {
                format!(
                    "; {inserted} of {} blocks written by inserting pages (all or half)",
                    p as u64 * f
                )
            } else {
                String::new()
            }
        );
        let key = fig.key();
        emit::figure(rec, events, fig).map_err(MergeBenchError::Record)?;
        events(Event::Step(&detail));
        // Bytes written that are not data cost time too: small blocks pay their header and
        // their 4 KiB alignment on every block.
        if overhead > FILE_OVERHEAD_WARN {
            let w = Hazard {
                figures: vec![key.clone()],
                ..Hazard::new(
                    HazardKind::Caution,
                    "merge",
                    format!(
                        "merge {}: the file is {:.1}% larger than the data ({backend}, {p} \
                         producers, {}-byte blocks): every block carries a header and is \
                         aligned to 4 KiB, which costs write time in proportion; use blocks of \
                         at least 1 MiB, or sizes that leave room for the header within a \
                         multiple of 4 KiB",
                        info.path.display(),
                        overhead * 100.0,
                        self.buffer_bytes
                    ),
                )
            };
            emit::hazard(rec, events, w).map_err(MergeBenchError::Record)?;
        }
        // The merger's promise, checkable where it runs alone in its process.
        if placement == Placement::Processes && !rss_within_budget(rss, self.budget as u64) {
            let w = Hazard {
                figures: vec![key],
                ..Hazard::new(
                    HazardKind::Caution,
                    "merge",
                    format!(
                        "merge {}: the merger's peak RSS, {}, is above its budget of {} + 64 MiB \
                     ({backend}, {p} producer processes)",
                        info.path.display(),
                        accio_results::size::human_bytes(rss),
                        accio_results::size::human_bytes(self.budget as u64)
                    ),
                )
            };
            emit::hazard(rec, events, w).map_err(MergeBenchError::Record)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn merge_once(
        &self,
        scratch: &ScratchDir,
        backend: &str,
        mode: WriteMode,
        placement: Placement,
        p: usize,
        f: u64,
        sync: bool,
    ) -> Result<RunResult, MergeBenchError> {
        // In the run's private directory (`crate::scratch`): nobody else can put a file or
        // a symlink at this name.
        let path = scratch.path().join("merge.accio");
        let _cleanup = RemoveOnDrop(path.clone());
        let merr = |what: &str| {
            let what = what.to_string();
            move |source| MergeBenchError::Merge { what, source }
        };
        let sink = ContainerSink::create(&path, Default::default())
            .map_err(merr("creating the output"))?;
        let claim = sink.claim_mode();
        let addr = match backend {
            "shm" => format!(
                "shm://accio-bench-merge-{}-{}",
                std::process::id(),
                scratch.tag()
            ),
            _ => "tcp://127.0.0.1:0".to_string(),
        };
        let problems = Arc::new(Mutex::new(Vec::new()));
        let pr = problems.clone();
        let merger = Merger::builder()
            .budget(self.budget)
            .slot_bytes(self.slot_bytes())
            .write_mode(mode)
            .sync(if sync {
                SyncPolicy::OnClose
            } else {
                SyncPolicy::Never
            })
            .on_event(move |e| {
                if !matches!(
                    e,
                    accio_merge::Event::Connected { .. } | accio_merge::Event::Finished { .. }
                ) {
                    pr.lock().expect("events").push(e.to_string());
                }
            })
            .listen(&addr, Box::new(sink))
            .map_err(merr("starting the merger"))?;
        let addr = merger.addr().to_string();
        let used = merger.write_mode();
        reset_peak_rss();
        let mut inserted = 0u64;
        let (t0, before, spawned) = match placement {
            Placement::Threads => {
                let src = Arc::new(source_buffer(self.buffer_bytes, 1));
                let go = Arc::new(Barrier::new(p + 1));
                let handles: Vec<_> = (0..p)
                    .map(|i| {
                        let (addr, go, src) = (addr.clone(), go.clone(), src.clone());
                        let (nice, cancel) = (self.producer_nice, self.cancel);
                        let (device, size) = (self.device, self.buffer_bytes);
                        std::thread::spawn(move || -> Result<u64, MergeBenchError> {
                            let merr = |e| MergeBenchError::Merge {
                                what: "a producer thread".into(),
                                source: e,
                            };
                            set_nice(nice).map_err(|e| {
                                merr(accio_merge::MergeError::Config(format!(
                                    "producer {i}: {e}"
                                )))
                            })?;
                            let prod = Producer::connect_with(
                                &addr,
                                ProducerOptions {
                                    id: Some(i as u32),
                                    timeout: Duration::from_secs(60),
                                },
                            );
                            // In device memory: the pattern of this producer's id, as a
                            // producer process writes it (and `verify_blocks` checks).
                            let on_device = device
                                .map(|gpu| {
                                    let b = accio_device::DeviceBuffer::alloc(gpu, size)?;
                                    b.write(0, &source_buffer(size, i as u8))?;
                                    Ok(b)
                                })
                                .transpose()
                                .map_err(|e: accio_device::Error| merr(e.into()));
                            // Pinned staging before the clock, as a producer process makes
                            // it before it says it is ready.
                            let prod = prod.and_then(|mut p| {
                                if let Some(gpu) = device {
                                    p.prepare_device(gpu)?;
                                }
                                Ok(p)
                            });
                            go.wait();
                            let (mut prod, on_device) = (prod.map_err(merr)?, on_device?);
                            for _ in 0..f {
                                if cancel.load(std::sync::atomic::Ordering::Relaxed) {
                                    // Dropped unfinished: the merger counts it as lost.
                                    return Err(MergeBenchError::Interrupted);
                                }
                                match &on_device {
                                    Some(b) => prod.write_device(&b.range()),
                                    None => prod.write_block(&src),
                                }
                                .map_err(merr)?;
                            }
                            prod.finish().map(|s| s.inserted_blocks).map_err(merr)
                        })
                    })
                    .collect();
                // Cancellation ends the wait early; the producers, released below, then
                // stop before their first block.
                wait_warm(&merger, p, self.cancel);
                let before = (merger.stats(), merger_sched());
                // The clock starts before the producers are released: a main thread that
                // the scheduler parks after the barrier would otherwise start it after
                // the first blocks were written, and the merger's shares of the window
                // could add up past the whole.
                let t0 = Instant::now();
                go.wait();
                let mut first = None;
                for h in handles {
                    let r = h
                        .join()
                        .map_err(|_| MergeBenchError::Config("a producer thread panicked".into()))
                        .and_then(|r| r);
                    match r {
                        Ok(n) => inserted += n,
                        // A real failure says more than the Interrupted of its siblings.
                        Err(e) => {
                            if first.is_none()
                                || matches!(first, Some(MergeBenchError::Interrupted))
                            {
                                first = Some(e);
                            }
                        }
                    }
                }
                if let Some(e) = first {
                    return Err(e);
                }
                (t0, before, Vec::new())
            }
            Placement::Processes => {
                let cmd = self.command.as_ref().expect("filtered in run");
                let mut kids = Vec::with_capacity(p);
                for i in 0..p {
                    self.check_cancel()?;
                    let cfg = ProducerConfig {
                        addr: addr.clone(),
                        id: i as u32,
                        buffers: f,
                        size: self.buffer_bytes,
                        nice: self.producer_nice,
                        device: self.device,
                    };
                    let child = Command::new(&cmd.program)
                        .args(&cmd.args)
                        .args(cfg.to_args())
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .spawn()
                        .map_err(io_err(format!(
                            "starting producer process {}",
                            cmd.program.display()
                        )))?;
                    kids.push(Kid(child));
                }
                for (i, k) in kids.iter_mut().enumerate() {
                    self.check_cancel()?;
                    let out = k.0.stdout.as_mut().expect("piped");
                    let mut line = String::new();
                    BufReader::new(out)
                        .read_line(&mut line)
                        .map_err(io_err(format!("reading producer process {i}")))?;
                    if line.trim() != "ready" {
                        return Err(MergeBenchError::Io {
                            what: format!("producer process {i}"),
                            source: std::io::Error::other(format!(
                                "did not start (said {:?}; see its error above)",
                                line.trim()
                            )),
                        });
                    }
                }
                wait_warm(&merger, p, self.cancel);
                self.check_cancel()?;
                let before = (merger.stats(), merger_sched());
                let t0 = Instant::now();
                for k in &mut kids {
                    // Best effort: a producer that died is reported by its exit status.
                    let _ = k.0.stdin.as_mut().expect("piped").write_all(b"go\n");
                }
                // A producer's work ends with its summary (every block committed and
                // acknowledged); its exit, which with a GPU is its CUDA context's
                // teardown, is waited for after the clock stops (`exit_lag`).
                for (i, k) in kids.iter_mut().enumerate() {
                    let mut line = String::new();
                    let out = k.0.stdout.as_mut().expect("piped");
                    BufReader::new(out)
                        .read_line(&mut line)
                        .map_err(io_err(format!("reading producer process {i}")))?;
                    // "done BLOCKS BYTES INSERTED"
                    let summary = line
                        .strip_prefix("done ")
                        .and_then(|l| l.split_whitespace().nth(2))
                        .and_then(|n| n.parse::<u64>().ok());
                    let Some(n) = summary else {
                        // It failed or died: its exit status says how.
                        exited(&mut k.0, i, self.cancel)?;
                        return Err(MergeBenchError::Io {
                            what: format!("producer process {i}"),
                            source: std::io::Error::other(format!(
                                "ended saying {:?}, not its summary",
                                line.trim()
                            )),
                        });
                    };
                    inserted += n;
                }
                (t0, before, kids)
            }
        };
        // The progress thread's scheduler counters while the producers ran (it is gone
        // once close returns).
        let (before, sched_before) = before;
        // A running thread's counters are brought up to date at scheduler ticks (1 to 10
        // ms): over a window shorter than SCHED_WINDOW they could be off by more than 5%
        // (a test's short run, on a loaded machine, read 142% on a CPU), so none is
        // reported.
        let ns = t0.elapsed().as_nanos() as f64;
        let sched = merger_sched()
            .zip(sched_before)
            .filter(|_| ns >= SCHED_WINDOW.as_nanos() as f64)
            .map(|((run, wait), (run0, wait0))| {
                (
                    run.saturating_sub(run0) as f64 / ns,
                    wait.saturating_sub(wait0) as f64 / ns,
                )
            });
        let summary = merger.close().map_err(merr("closing the merger"))?;
        let secs = t0.elapsed().as_secs_f64();
        let peak_rss = peak_rss();
        let exit_lag = if spawned.is_empty() {
            None
        } else {
            let stopped = Instant::now();
            for (i, mut k) in spawned.into_iter().enumerate() {
                exited(&mut k.0, i, self.cancel)?;
            }
            Some(stopped.elapsed().as_secs_f64())
        };
        let want = p as u64 * f;
        if summary.sink.blocks != want
            || summary.sink.payload_bytes != want * self.buffer_bytes as u64
        {
            return Err(MergeBenchError::Io {
                what: format!("merge into {}", path.display()),
                source: std::io::Error::other(format!(
                    "wrote {} blocks / {} bytes, expected {want} / {}; events: {:?}",
                    summary.sink.blocks,
                    summary.sink.payload_bytes,
                    want * self.buffer_bytes as u64,
                    problems.lock().expect("events")
                )),
            });
        }
        if self.device.is_some() {
            verify_blocks(&path, self.buffer_bytes)?;
        }
        if let Some(keep) = &self.keep {
            std::fs::rename(&path, keep)
                .or_else(|_| std::fs::copy(&path, keep).map(|_| ()))
                .map_err(io_err(format!(
                    "keeping the merged file as {}",
                    keep.display()
                )))?;
        }
        let (end, ns) = (summary.stats, secs * 1e9);
        Ok(RunResult {
            mode: used,
            claim: claim.name(),
            gbps: summary.sink.payload_bytes as f64 / secs / 1e9,
            file_overhead: summary.sink.file_bytes as f64
                / (summary.sink.payload_bytes as f64).max(1.0)
                - 1.0,
            peak_rss,
            stats: summary.stats,
            writing: end.sink_write_ns.saturating_sub(before.sink_write_ns) as f64 / ns,
            idle: end
                .idle_ns_at(t0 + Duration::from_secs_f64(secs))
                .saturating_sub(before.idle_ns_at(t0)) as f64
                / ns,
            sched,
            inserted,
            exit_lag,
        })
    }
}

/// Waits for producer process `i` to exit, which it must do successfully.
fn exited(
    child: &mut std::process::Child,
    i: usize,
    cancel: &AtomicBool,
) -> Result<(), MergeBenchError> {
    // Cancellation returns at once; the guards kill the producers.
    let st = wait_child(child, cancel)
        .map_err(io_err(format!("waiting for producer {i}")))?
        .ok_or(MergeBenchError::Interrupted)?;
    if st.success() {
        Ok(())
    } else {
        Err(MergeBenchError::Io {
            what: format!("producer process {i}"),
            source: std::io::Error::other(format!("exited with {st}")),
        })
    }
}

/// Checks a merged file whose producers wrote from device memory: whole (every checksum, the
/// index, every sequence), and each block's bytes those its producer put in device memory
/// (`source_buffer` of its id): a staging copy that lost or moved bytes would still carry
/// a valid checksum, computed after the copy.
fn verify_blocks(path: &std::path::Path, size: usize) -> Result<(), MergeBenchError> {
    let bad = |why: String| MergeBenchError::Io {
        what: format!("verifying {}", path.display()),
        source: std::io::Error::other(why),
    };
    let r = accio_merge::container::ContainerReader::open(path).map_err(|e| bad(e.to_string()))?;
    let v = r.verify().map_err(|e| bad(e.to_string()))?;
    if !v.is_whole() {
        return Err(bad(format!("not whole: {:?}", v.problems)));
    }
    let mut want: std::collections::HashMap<u32, Vec<u8>> = Default::default();
    let mut got = Vec::new();
    for b in r.blocks() {
        r.read_payload_into(b, &mut got)
            .map_err(|e| bad(e.to_string()))?;
        let id = b.header.producer;
        let expect = want
            .entry(id)
            .or_insert_with(|| source_buffer(size, id as u8));
        if got != *expect {
            return Err(bad(format!(
                "block {} of producer {id} differs from the bytes it wrote from device memory",
                b.header.seq
            )));
        }
    }
    Ok(())
}

/// Waits (at most 30 s, and not once `cancel` is set) until `p` producers are connected and the merger has registered
/// the slots they asked for at connect time, so that the clock measures the merge and not
/// the one-time setup (fresh slot memory is zeroed by the kernel at registration).
fn wait_warm(merger: &Merger, p: usize, cancel: &AtomicBool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = (usize::MAX, 0usize);
    let mut steady = 0;
    while Instant::now() < deadline && !cancel.load(Ordering::Relaxed) {
        let s = merger.stats();
        // Registration is done when the slot count stops moving with everyone connected.
        if s.active == p && (s.slots, s.active) == last {
            steady += 1;
            if steady >= 5 {
                return;
            }
        } else {
            steady = 0;
        }
        last = (s.slots, s.active);
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A merged file more than this much larger than its data is worth a warning.
const FILE_OVERHEAD_WARN: f64 = 0.02;

/// The shortest run whose merger thread's scheduler shares are reported: 20 ticks of a
/// 100 Hz kernel, so that one tick of lag in the counters is at most 5%.
const SCHED_WINDOW: Duration = Duration::from_millis(200);

struct RunResult {
    /// The write mode the merger used (`Auto` resolved).
    mode: WriteMode,
    /// How the merger claimed room in the file (used in direct mode only).
    claim: &'static str,
    gbps: f64,
    /// The file's size against the data written into it: block headers, the index and
    /// alignment padding.
    file_overhead: f64,
    peak_rss: u64,
    stats: accio_merge::MergerStats,
    /// Shares of the timed wall time the merger thread spent in file writes and idle.
    writing: f64,
    idle: f64,
    /// Shares of the time until the producers finished that the merger thread was on a
    /// CPU, and runnable but waiting for one (Linux schedstat; `None` elsewhere).
    sched: Option<(f64, f64)>,
    /// Blocks the producers wrote in place by inserting pages (the rest: `pwrite`).
    inserted: u64,
    /// Producer processes: seconds from the clock's stop to the last one's exit.
    exit_lag: Option<f64>,
}
