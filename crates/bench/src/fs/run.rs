//! The run: checking the paths, the memcpy ceilings, and per path and thread count the
//! measuring loop that turns the workers' spans into figures and hazards.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Barrier, Mutex};

use serde_json::Value;

use super::crew::{worker_loop, Control, Crew};
use super::io::{aggregate_gbps, Phase, Worker};
use super::workdir::WorkDir;
use super::{cache, Engine, FsBench, FsError, FsOutcome, Mode, PathFailure};
use crate::mem::Direction;
use crate::{emit, mem};
use accio_results::event::Event;
use accio_results::hazard::{Hazard, HazardKind};
use accio_results::model::{CeilingSource, Figure, Recorder, Unit};
use accio_results::node::probe::{self, FsInfo};
use accio_results::num::fmt3;
use accio_results::size::format_size;

/// Min–max spread (relative to the median) above which a figure is called noisy.
const NOISY: f64 = 0.25;

/// Largest span per thread of a copy ceiling: well past any last-level cache, so a larger
/// file's ceiling is the same DRAM copy.
const STREAM_SPAN_MAX: u64 = 256 << 20;

/// Passes of each copy ceiling per repeat (so 6 samples at the default 3 repeats).
const CEILING_PASSES: usize = 2;

/// Which way a mode's bytes go: writes copy into the file's pages, reads out of them.
fn direction(mode: Mode) -> Direction {
    match mode {
        Mode::Write | Mode::WriteSync | Mode::Overwrite => Direction::Into,
        Mode::ColdRead | Mode::ReRead => Direction::OutOf,
    }
}

fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::Into => "into",
        Direction::OutOf => "out-of",
    }
}

/// Measurement hazards of one path, reported as one warning each after the path.
#[derive(Default)]
struct Hazards {
    /// `mode xN spread%` of noisy figures, with the figure's key.
    noisy: Vec<(String, String)>,
    /// `mode xN ratio%` of figures above their ceiling, with the figure's key.
    above: Vec<(String, String)>,
}

impl FsBench {
    /// Runs the bench: checks every path first (reporting unusable ones through `log` and
    /// as warnings), measures memcpy ceilings, then measures each usable path, pushing
    /// figures to `rec` as they are complete. A failing path is recorded in
    /// [`FsOutcome::failures`] and the run goes on; only cancellation, bad parameters and
    /// an unwritable result file end it with an error. Test files are removed in every
    /// case.
    pub fn run(
        &self,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<FsOutcome, FsError> {
        self.validate()?;
        let mut out = FsOutcome::default();
        if self.repeats < 3 {
            caution(
                rec,
                events,
                format!(
                    "fs: {} repeat(s): min and max say little below 3",
                    self.repeats
                ),
            )?;
        }
        let mut usable = Vec::new();
        for path in &self.paths {
            match probe::probe(path)
                .map_err(FsError::from)
                .and_then(|i| self.check_usable(&i).map(|()| i))
            {
                Ok(info) => usable.push(info),
                Err(e) => fail(rec, events, &mut out, path, e)?,
            }
        }
        if usable.is_empty() {
            return Ok(out);
        }
        let units = self.repeats as u64 * self.threads.iter().sum::<usize>() as u64;
        events(Event::Started {
            bench: "fs",
            total: usable.len() as u64 * units,
        });
        for info in &usable {
            if self.cancel.load(Ordering::SeqCst) {
                return Err(FsError::Interrupted);
            }
            events(Event::Step(&describe(info)));
            match self.measure_path(info, rec, events) {
                Ok(()) => out.measured.push(info.path.clone()),
                Err(FsError::Interrupted) => return Err(FsError::Interrupted),
                Err(e @ FsError::Record(_)) => return Err(e),
                Err(e) => fail(rec, events, &mut out, &info.path, e)?,
            }
        }
        events(Event::Done);
        Ok(out)
    }

    /// Ceiling samples of the same work ([`mem::stream_copy_gbps`]) for `n` threads, into
    /// `samples` by direction: the file system's copy without its system calls,
    /// record-sized chunks into a span as large as each thread's file (for the write modes)
    /// and out of it (for the read modes). Taken in every repeat, right before its modes,
    /// so that the ceiling sees the host's phases the figures see (`docs/CEILINGS.md`,
    /// rule 1): measured once before every path, a ceiling taken in a slow phase read
    /// below a page-cache re-read taken in a fast one (re-read x2 at 9.5-12.5 GB/s against
    /// a 2-thread copy of 8.8). The span is capped at [`STREAM_SPAN_MAX`] and at a quarter
    /// of the available memory: past the last-level cache a larger span changes nothing.
    fn ceiling_samples(
        &self,
        n: usize,
        span: usize,
        samples: &mut BTreeMap<Direction, Vec<f64>>,
    ) -> Result<(), FsError> {
        let record = self.record();
        for dir in [Direction::Into, Direction::OutOf] {
            if !self.modes.iter().any(|m| direction(*m) == dir) {
                continue;
            }
            let got = mem::stream_copy_gbps(record, span, n, dir, CEILING_PASSES)
                .map_err(|e| FsError::io("measuring the copy ceiling".into(), e))?;
            samples.entry(dir).or_default().extend(got);
        }
        Ok(())
    }

    /// The span of each thread's ceiling copy (see [`Self::ceiling_samples`]), taken once
    /// per thread count (it depends on the memory available).
    fn ceiling_span(&self, n: usize) -> usize {
        let avail = probe::mem_available().map_or(u64::MAX, |a| a / 4 / n as u64);
        (self.file_size.min(STREAM_SPAN_MAX).min(avail) as usize).max(self.record())
    }

    /// Records the ceiling samples of `n` threads on `info` as `mem`/`stream_copy` figures
    /// and returns each direction's median, the ceiling of that direction's figures.
    fn ceiling_figures(
        &self,
        info: &FsInfo,
        n: usize,
        span: usize,
        samples: BTreeMap<Direction, Vec<f64>>,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<BTreeMap<Direction, f64>, FsError> {
        let mut map = BTreeMap::new();
        for (dir, s) in samples {
            let Some(fig) = Figure::new("mem", "stream_copy", Unit::GBps, s) else {
                continue;
            };
            let fig = fig
                .param("record_size", self.record() as u64)
                .param("span", span as u64)
                .param("threads", n)
                .param("direction", direction_name(dir))
                .param("for", "fs ceiling")
                .param("path", info.path.display().to_string())
                .method(
                    "accio::copy_bytes of record-sized chunks between one reused record \
                     buffer and a pre-faulted span per thread, sequentially across the span; \
                     barrier start; total bytes / (last finish - first start); passes taken \
                     in every repeat, right before its modes",
                );
            map.insert(dir, fig.summary.median);
            emit::figure(rec, events, fig).map_err(FsError::Record)?;
        }
        Ok(map)
    }

    /// Measures every thread count on one path; removes the test directory afterwards.
    fn measure_path(
        &self,
        info: &FsInfo,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), FsError> {
        if info.memory_backed()
            && self
                .modes
                .iter()
                .any(|m| matches!(m, Mode::Write | Mode::WriteSync))
        {
            caution(
                rec,
                events,
                format!(
                    "fs {}: write and write+sync go to fresh {} pages; on VMs that return freed \
                     memory to the host the first touch of a page is slow (0.3-1.5 GB/s on our \
                     CI machine), so these figures can swing several-fold between runs; add \
                     'overwrite' to --modes for the same files with their pages present",
                    info.path.display(),
                    info.fs_type
                ),
            )?;
        }
        let work = WorkDir::create(&info.path)?;
        let mut hz = Hazards::default();
        for &n in &self.threads {
            let h = self.measure_threads(info, &work, n, rec, events)?;
            hz.noisy.extend(h.noisy);
            hz.above.extend(h.above);
            work.remove_files()?;
        }
        work.remove()?;
        let p = info.path.display();
        let items = |v: &[(String, String)]| -> (String, Vec<String>) {
            let text: Vec<&str> = v.iter().map(|(t, _)| t.as_str()).collect();
            (text.join(", "), v.iter().map(|(_, k)| k.clone()).collect())
        };
        if !hz.noisy.is_empty() {
            let (list, figures) = items(&hz.noisy);
            let w = format!(
                "fs {p}: noisy figures (min-max spread over {:.0}% of the median): {list}; use \
                 more --reps, larger --file-size or a quieter machine",
                NOISY * 100.0,
            );
            let h = Hazard {
                figures,
                ..Hazard::new(HazardKind::Noisy, "fs", w)
            };
            emit::hazard(rec, events, h).map_err(FsError::Record)?;
        }
        if !hz.above.is_empty() {
            let (list, figures) = items(&hz.above);
            let w = format!(
                "fs {p}: above the memcpy ceiling: {list}; the ceiling (a short in-cache copy) \
                 was measured low on a busy machine, or the file system avoided a copy",
            );
            let h = Hazard {
                figures,
                ..Hazard::new(HazardKind::AboveCeiling, "fs", w)
            };
            emit::hazard(rec, events, h).map_err(FsError::Record)?;
        }
        Ok(())
    }

    /// All repeats of all modes with `n` threads on one path; returns the hazards seen.
    fn measure_threads(
        &self,
        info: &FsInfo,
        work: &WorkDir,
        n: usize,
        rec: &mut Recorder,
        events: &mut dyn FnMut(Event<'_>),
    ) -> Result<Hazards, FsError> {
        let mut hazards = Hazards::default();
        let files: Vec<PathBuf> = (0..n).map(|i| work.dir.join(format!("t{i}"))).collect();
        let workers = files
            .iter()
            .map(|f| {
                Worker::new(
                    f.clone(),
                    self.file_size,
                    self.record(),
                    self.engine,
                    self.iodepth,
                    self.cancel,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let ctl = Control {
            barrier: Barrier::new(n + 1),
            phase: Mutex::new(Phase::Exit),
            results: Mutex::new((0..n).map(|_| None).collect()),
            direct: self.direct,
        };
        let mut samples: BTreeMap<Mode, Vec<f64>> = BTreeMap::new();
        let mut ceiling_samples: BTreeMap<Direction, Vec<f64>> = BTreeMap::new();
        let span = self.ceiling_span(n);
        let mut drop_methods: Vec<String> = Vec::new();
        let mut resident_max: Option<f64> = None;
        std::thread::scope(|s| -> Result<(), FsError> {
            for (i, w) in workers.into_iter().enumerate() {
                let ctl = &ctl;
                s.spawn(move || worker_loop(ctl, i, w));
            }
            // Sends Exit to the workers however this closure ends.
            let crew = Crew { ctl: &ctl };
            let mut have_files = false;
            for r in 0..self.repeats {
                if self.ceilings && self.modes.iter().any(|m| self.has_memcpy_ceiling(*m, info)) {
                    self.ceiling_samples(n, span, &mut ceiling_samples)?;
                }
                let mut line = Vec::new();
                let mut cold_was_direct = false;
                for &mode in &self.modes {
                    if self.cancel.load(Ordering::SeqCst) {
                        return Err(FsError::Interrupted);
                    }
                    if !have_files
                        && matches!(mode, Mode::ColdRead | Mode::ReRead | Mode::Overwrite)
                    {
                        // These modes need the files: lay them out, untimed.
                        crew.step(Phase::Write {
                            fresh: true,
                            sync: true,
                        })?;
                    }
                    let phase = match mode {
                        Mode::Write => Phase::Write {
                            fresh: true,
                            sync: false,
                        },
                        Mode::WriteSync => Phase::Write {
                            fresh: true,
                            sync: true,
                        },
                        Mode::Overwrite => Phase::Write {
                            fresh: false,
                            sync: false,
                        },
                        Mode::ColdRead | Mode::ReRead => {
                            if mode == Mode::ColdRead {
                                let d = cache::drop_cache(
                                    info,
                                    &work.dir,
                                    &files,
                                    self.file_size,
                                    self.cache_drop,
                                    self.direct,
                                )?;
                                if let Some(x) = d.resident {
                                    resident_max = Some(resident_max.unwrap_or(0.0).max(x));
                                }
                                if !drop_methods.contains(&d.method) {
                                    drop_methods.push(d.method);
                                }
                                cold_was_direct = d.direct && !self.direct;
                                Phase::Read { direct: d.direct }
                            } else {
                                if cold_was_direct {
                                    // The cold read bypassed the cache: warm it, untimed.
                                    crew.step(Phase::Read { direct: false })?;
                                }
                                Phase::Read { direct: false }
                            }
                        }
                    };
                    let spans = crew.step(phase)?;
                    have_files = true;
                    let moved: u64 = spans.iter().map(|s| s.bytes).sum();
                    if moved != n as u64 * self.file_size {
                        return Err(FsError::io(
                            format!("{} in {}", mode.name(), work.dir.display()),
                            std::io::Error::other(format!(
                                "moved {moved} bytes, expected {}",
                                n as u64 * self.file_size
                            )),
                        ));
                    }
                    if let Some(g) = aggregate_gbps(&spans) {
                        samples.entry(mode).or_default().push(g);
                        line.push(format!("{} {}", mode.label(), fmt3(g)));
                    }
                }
                events(Event::Step(&format!(
                    "fs {}: {n} thread(s), repeat {}/{}: {} GB/s",
                    info.path.display(),
                    r + 1,
                    self.repeats,
                    line.join(", ")
                )));
                events(Event::Advanced(n as u64));
            }
            Ok(())
        })?;
        let ceilings = self.ceiling_figures(info, n, span, ceiling_samples, rec, events)?;
        for mode in &self.modes {
            let Some(s) = samples.remove(mode) else {
                continue;
            };
            let method = match mode {
                Mode::ColdRead => drop_methods.join(" | "),
                m => self.method_of(*m, info),
            };
            let Some(mut fig) = self.figure(*mode, info, n, s) else {
                continue;
            };
            fig = fig.method(method);
            if *mode == Mode::ColdRead {
                if let Some(x) = resident_max {
                    fig = fig.param("resident_after_drop", x);
                }
            }
            let dir = direction(*mode);
            let ceiling = ceilings.get(&dir).copied();
            if let Some(c) = ceiling.filter(|_| self.has_memcpy_ceiling(*mode, info)) {
                fig = fig.ceiling(
                    format!(
                        "copy {} records {} {} per thread, {n} thread{}",
                        format_size(self.record() as u64),
                        match dir {
                            Direction::Into => "into",
                            Direction::OutOf => "out of",
                        },
                        format_size(span as u64),
                        if n == 1 { "" } else { "s" }
                    ),
                    c,
                    CeilingSource::Measured,
                );
            }
            let what = format!("{} x{n}", mode.label());
            if fig.summary.spread() > NOISY {
                hazards.noisy.push((
                    format!("{what} {:.0}%", fig.summary.spread() * 100.0),
                    fig.key(),
                ));
            }
            if let Some(r) = fig.ceiling.as_ref().and_then(|c| c.ratio) {
                if r > 1.05 {
                    hazards
                        .above
                        .push((format!("{what} {:.0}%", r * 100.0), fig.key()));
                }
            }
            emit::figure(rec, events, fig).map_err(FsError::Record)?;
        }
        Ok(hazards)
    }

    /// Whether memcpy bounds `mode` on `info`: always on memory-backed file systems (every
    /// mode is a copy between user buffers and RAM pages), and for the page-cache modes
    /// elsewhere. write+sync and cold read on a device or network are bounded by that
    /// device or network, which this bench does not measure, so they get no ceiling.
    fn has_memcpy_ceiling(&self, mode: Mode, info: &FsInfo) -> bool {
        info.memory_backed()
            || (!self.direct && matches!(mode, Mode::Write | Mode::Overwrite | Mode::ReRead))
    }

    fn method_of(&self, mode: Mode, info: &FsInfo) -> String {
        let rec = format_size(self.record() as u64);
        let call = if matches!(mode, Mode::ColdRead | Mode::ReRead) {
            "pread"
        } else {
            "pwrite"
        };
        let engine = match self.engine {
            Engine::Psync => format!("{call} of {rec} records (psync)"),
            Engine::IoUring => format!(
                "io_uring {call}s, {} x {rec} records in flight",
                self.iodepth
            ),
        };
        let direct = if self.direct { ", O_DIRECT" } else { "" };
        match mode {
            Mode::Write => {
                format!("{engine}{direct} into new files (old ones unlinked, untimed); close timed, no fsync")
            }
            Mode::WriteSync => {
                format!("{engine}{direct} into new files (old ones unlinked, untimed); fsync and close timed")
            }
            Mode::Overwrite => {
                format!(
                    "{engine}{direct} over existing files (pages present); close timed, no fsync"
                )
            }
            Mode::ReRead if self.direct => {
                format!("{engine}, O_DIRECT: not cached, same path as the cold read")
            }
            Mode::ReRead if info.memory_backed() => format!("{engine}; memory-backed"),
            Mode::ReRead => format!("{engine}; pages cached by the previous read"),
            Mode::ColdRead => String::new(),
        }
    }

    /// A figure with every identifying parameter and the path's properties.
    fn figure(&self, mode: Mode, info: &FsInfo, n: usize, samples: Vec<f64>) -> Option<Figure> {
        let opt_str = |s: Option<String>| s.map_or(Value::Null, Value::from);
        let mut f = Figure::new("fs", mode.name(), Unit::GBps, samples)?
            .param("path", info.path.display().to_string())
            .param("threads", n)
            .param("file_size", self.file_size)
            .param("record_size", self.record() as u64)
            .param("bytes", n as u64 * self.file_size)
            .param("engine", self.engine.name())
            .param("direct", self.direct)
            .param("fs_type", info.fs_type.clone())
            .param("backing", info.backing.name())
            .param("memory_backed", info.memory_backed())
            .param("persistent", info.backing.persistent())
            .param("shared", info.backing.shared())
            .param("root_to_mount", info.root_to_mount())
            .param(
                "mount_point",
                opt_str(info.mount_point.as_ref().map(|p| p.display().to_string())),
            )
            .param("mount_source", opt_str(info.mount_source.clone()))
            .param("mount_options", opt_str(info.mount_options.clone()))
            .param("capacity_bytes", info.capacity)
            .param("free_bytes", info.free);
        if self.engine == Engine::IoUring {
            f = f.param("iodepth", self.iodepth);
        }
        Some(f)
    }
}

/// One line describing a path, for progress output.
fn describe(info: &FsInfo) -> String {
    let space = match (info.capacity, info.free) {
        (Some(c), Some(f)) => format!(
            "{} ({} free)",
            accio_results::size::human_bytes(c),
            accio_results::size::human_bytes(f)
        ),
        _ => "no size limit (RAM)".into(),
    };
    format!(
        "fs {}: {} ({}-backed), {space}, mounted at {} from {} ({})",
        info.path.display(),
        info.fs_type,
        info.backing.name(),
        info.mount_point
            .as_deref()
            .map_or("?".into(), |p| p.display().to_string()),
        info.mount_source.as_deref().unwrap_or("?"),
        info.mount_options.as_deref().unwrap_or("?"),
    )
}

fn caution(
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    w: String,
) -> Result<(), FsError> {
    emit::hazard(rec, events, Hazard::new(HazardKind::Caution, "fs", w)).map_err(FsError::Record)
}

fn fail(
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    out: &mut FsOutcome,
    path: &Path,
    error: FsError,
) -> Result<(), FsError> {
    let failure = PathFailure {
        path: path.to_path_buf(),
        error,
    };
    events(Event::Skipped(&failure.to_string()));
    let h = Hazard::new(
        HazardKind::NotMeasured,
        "fs",
        format!("fs: not measured: {failure}"),
    );
    rec.hazard(h).map_err(FsError::Record)?;
    out.failures.push(failure);
    Ok(())
}
