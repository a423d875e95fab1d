//! The default suite: what plain `accio bench` runs.
//!
//! Every bench in turn (mem, fs on a temporary directory and /dev/shm, transport over shm
//! and tcp, merge, coalesce, and device where a GPU can be measured: elsewhere one line says
//! why) into one report folder:
//!
//! - `results.json`: the figures, rewritten after each one (an interrupted run keeps what
//!   it measured), with the node facts of `info.json` inside;
//! - `info.json`: what the node is (`accio info --json`);
//! - `report.md`, `report.html`: written at the end, also after a bench failed or Ctrl-C.
//!
//! Every bench reports through the same typed events ([`Event`]): on a terminal each shows
//! a bar with its ETA, sized from the plan the bench announces (figures, files moved, runs),
//! with its latest step or figure as the message and its warnings printed above; elsewhere
//! the events are printed as lines under a header per bench.
//! A bench that fails is reported, the others still run, and the command exits non-zero at
//! the end. Presets: `--quick` (the fewest sizes that still give every headline figure,
//! under a minute on a 2-core VM), the default (full memory and transport sweeps, the
//! quick fs bench: about two minutes), `--full` (every size and thread count of every
//! bench, several minutes).

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::time::Instant;

use accio_bench::cancel;
use accio_results::event::Event;
use accio_results::model::Recorder;
use accio_results::node::NodeInfo;
use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};

use crate::common::{CommonArgs, SizeList};
use crate::{bench_coalesce, bench_device, bench_fs, bench_merge, bench_transport};

/// How thorough a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Preset {
    /// `--quick`: the smallest sizes that still give every headline figure.
    Quick,
    /// No flag: the full memory and transport sweeps, the quick fs bench, merge and
    /// coalesce as their default-suite variants.
    Default,
    /// `--full`: each bench's full sweep (merge and coalesce see `--full` in the shared
    /// flags).
    Full,
}

impl Preset {
    fn of(common: &CommonArgs) -> Preset {
        if common.full {
            Preset::Full
        } else if common.quick {
            Preset::Quick
        } else {
            Preset::Default
        }
    }

    fn name(self) -> &'static str {
        match self {
            Preset::Quick => "--quick",
            Preset::Default => "default",
            Preset::Full => "--full",
        }
    }
}

/// `--quick` memcpy buffers: in L2, in L3, and well past any L3 (DRAM).
const QUICK_MEM_SIZES: [u64; 3] = [64 << 10, 1 << 20, 64 << 20];
/// `--quick` file size per thread for the fs bench.
const QUICK_FILE_SIZE: u64 = 16 << 20;
/// `--quick` transport message sizes: the summary's 8 B latency and 2 MiB bandwidth, and
/// one size in between.
const QUICK_TRANSPORT_SIZES: [u64; 3] = [8, 4 << 10, 2 << 20];

/// Progress of one bench, driven by its events: on a terminal a spinner that becomes a bar
/// with ETA once the bench announces its plan ([`Event::Started`]), with the latest step or
/// figure as its message and warnings printed above it; elsewhere plain lines.
struct Progress {
    bar: Option<ProgressBar>,
    name: &'static str,
    started: Instant,
}

impl Progress {
    /// Starts bench `step` of `steps`.
    fn start(tty: bool, step: usize, steps: usize, name: &'static str) -> Progress {
        let prefix = format!("[{step}/{steps}] {name}");
        if !tty {
            eprintln!("== {prefix}");
            return Progress {
                bar: None,
                name,
                started: Instant::now(),
            };
        }
        let b = ProgressBar::new_spinner();
        b.set_style(
            ProgressStyle::with_template("{prefix:>17} {spinner} {elapsed:>4} {wide_msg}")
                .expect("a valid template"),
        );
        // No steady tick: a drawing thread waking on its own would perturb benches that own
        // both cores of a small machine. The bar redraws when the bench reports progress.
        b.set_prefix(prefix);
        Progress {
            bar: Some(b),
            name,
            started: Instant::now(),
        }
    }

    /// One event of the bench.
    fn event(&self, e: Event<'_>) {
        let Some(b) = &self.bar else {
            crate::common::print_event(self.name, e);
            return;
        };
        match e {
            Event::Started { total, .. } if total > 0 => {
                b.set_length(total);
                b.set_style(
                    ProgressStyle::with_template(
                        "{prefix:>17} [{bar:28}] {percent:>3}% {elapsed:>4} ETA {eta:>4} {wide_msg}",
                    )
                    .expect("a valid template")
                    .progress_chars("=> "),
                );
            }
            Event::Advanced(n) => {
                if let Some(len) = b.length() {
                    if b.position() + n > len {
                        b.set_length(b.position() + n);
                    }
                }
                b.inc(n);
            }
            // Warnings, skips and notes stay on screen above the bar.
            Event::Warning(_) | Event::Skipped(_) | Event::Note(_) => {
                // One paragraph each, wrapped at spaces within the terminal.
                if let Some(line) = accio_report::text::event_line(&e) {
                    let text = accio_report::text::wrap(
                        &format!("{}: {line}", self.name),
                        crate::term::stderr_width(),
                        "  ",
                    );
                    // Printed with the bar cleared, not through `println`: indicatif pads
                    // the last line it prints to the terminal's edge, and the terminal then
                    // takes the next line for a continuation of that one.
                    b.suspend(|| eprint!("{text}"));
                }
            }
            // Steps and figures become the bar's message.
            _ => {
                if let Some(line) = accio_report::text::event_line(&e) {
                    b.set_message(line);
                }
            }
        }
    }

    fn finish(self, outcome: &str) {
        let outcome = format!("{outcome} in {:.0} s", self.started.elapsed().as_secs_f64());
        match self.bar {
            Some(b) => {
                b.set_style(
                    ProgressStyle::with_template("{prefix:>17} {msg}").expect("a valid template"),
                );
                b.finish_with_message(outcome);
            }
            None => eprintln!("{}: {outcome}", self.name),
        }
    }
}

/// `accio-report-20240501T120000Z` for the current time.
fn default_folder() -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // "2024-05-01 12:00:00 UTC" -> "20240501T120000Z"
    let digits: String = accio_report::doc::utc(secs)
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    PathBuf::from(format!("accio-report-{}T{}Z", &digits[..8], &digits[8..14]))
}

/// One bench's outcome for the closing lines.
struct Outcome {
    name: &'static str,
    error: Option<anyhow::Error>,
}

/// `accio bench` with no subcommand: every bench on built-in defaults into one report
/// folder (see the module docs). A bench that fails is reported and the others still run;
/// the command fails at the end if any did.
pub fn run(common: CommonArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let preset = Preset::of(&common);
    let tty = std::io::stderr().is_terminal();
    let dir = common.out.clone().unwrap_or_else(default_folder);
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating the report folder {}", dir.display()))?;
    let results = dir.join("results.json");
    let mut rec = Recorder::new(Some(&results))
        .with_context(|| format!("creating the results file {}", results.display()))?;
    let info = NodeInfo::detect();
    // The GPU part runs only where a GPU can be measured; elsewhere one line says why.
    let no_gpu = bench_device::unavailable(&info);
    let device_info = no_gpu.is_none().then(|| info.clone());
    let info_path = dir.join("info.json");
    std::fs::write(
        &info_path,
        serde_json::to_vec_pretty(&info).context("encoding the node facts")?,
    )
    .with_context(|| format!("writing {}", info_path.display()))?;
    rec.set_info(info)
        .with_context(|| format!("writing {}", results.display()))?;
    crate::term::eprint_para(
        &format!(
            "accio bench ({} preset): mem, fs, transport, merge, coalesce{}; report folder {}",
            preset.name(),
            if no_gpu.is_none() { ", device" } else { "" },
            dir.display()
        ),
        "  ",
    );
    if let Some(line) = &no_gpu {
        crate::term::eprint_para(line, "  ");
    }

    // Each bench's arguments: its own default-suite variant, adjusted by the preset. The
    // shared flags that only concern some benches are cleared for the others, so that no
    // bench prints "ignores --sizes" for a flag meant for another.
    let mut mem = bench_fs::MemArgs::default_suite(&common);
    mem.common.backend = None;
    let mut fs = bench_fs::FsArgs::default_suite(&common);
    fs.common.backend = None;
    fs.common.sizes = None;
    match preset {
        Preset::Quick => fs.set_file_size(QUICK_FILE_SIZE),
        Preset::Default => {}
        Preset::Full => fs.common.quick = false,
    }
    let mut transport = bench_transport::TransportArgs::default_suite(&common);
    match preset {
        Preset::Quick => {
            if mem.common.sizes.is_none() {
                mem.common.sizes = Some(SizeList(QUICK_MEM_SIZES.to_vec()));
            }
            if transport.common.sizes.is_none() {
                transport.common.sizes = Some(SizeList(QUICK_TRANSPORT_SIZES.to_vec()));
            }
        }
        // The full memory and transport sweeps: every buffer size from L2 to DRAM and
        // every message size from 8 B to 64 MiB, so the plots have their shape (about 70 s
        // of the default run on a 2-core VM). The fs bench stays quick: its full sweep
        // writes 128 MiB per thread per mode and repeat.
        Preset::Default | Preset::Full => {
            mem.common.quick = false;
            transport.common.quick = false;
        }
    }

    let steps = if device_info.is_some() { 6 } else { 5 };
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut interrupted = false;

    // mem
    {
        let p = Progress::start(tty, 1, steps, "mem");
        let r = bench_fs::run_mem_with(mem, &mut rec, &mut |e| p.event(e), false);
        outcomes.push(finish(p, "mem", r, &rec));
    }

    // fs
    {
        let p = Progress::start(tty, 2, steps, "fs");
        let r = bench_fs::run_fs_with(fs, &mut rec, &mut |e| p.event(e), false);
        outcomes.push(finish(p, "fs", r, &rec));
        interrupted |= cancel::interrupted();
    }

    // transport
    if !interrupted {
        let p = Progress::start(tty, 3, steps, "transport");
        let r = bench_transport::run_with(transport, &mut rec, &mut |e| p.event(e), false);
        outcomes.push(finish(p, "transport", r, &rec));
        interrupted |= cancel::interrupted();
    }

    // merge and coalesce
    if !interrupted {
        let p = Progress::start(tty, 4, steps, "merge");
        let r = bench_merge::run_with(
            bench_merge::MergeArgs::default_suite(&common),
            &mut rec,
            &mut |e| p.event(e),
            false,
        );
        outcomes.push(finish(p, "merge", r, &rec));
        interrupted |= cancel::interrupted();
    }
    if !interrupted {
        let p = Progress::start(tty, 5, steps, "coalesce");
        let r = bench_coalesce::run_with(
            bench_coalesce::CoalesceArgs::default_suite(&common),
            &mut rec,
            &mut |e| p.event(e),
            false,
        );
        outcomes.push(finish(p, "coalesce", r, &rec));
        interrupted |= cancel::interrupted();
    }
    if let (false, Some(info)) = (interrupted, &device_info) {
        let p = Progress::start(tty, 6, steps, "device");
        let r = bench_device::run_with(
            bench_device::DeviceArgs::default_suite(&common),
            info,
            &mut rec,
            &mut |e| p.event(e),
            false,
        );
        outcomes.push(finish(p, "device", r, &rec));
        interrupted |= cancel::interrupted();
    }

    // Post-hoc warnings, then the pages.
    accio_report::warnings::apply(&mut rec)
        .with_context(|| format!("writing {}", results.display()))?;
    let written = accio_report::write(rec.report(), &dir)?;
    if let Some(json) = common
        .flags
        .json
        .as_deref()
        .filter(|p| *p != std::path::Path::new("-"))
    {
        std::fs::copy(&results, json)
            .with_context(|| format!("copying the results to {}", json.display()))?;
    }
    common.export(rec.report())?;

    let report = rec.report();
    // With an export on stdout, stdout carries only that export.
    let mut out: Box<dyn std::io::Write> = if common.stdout_taken() {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    writeln!(
        out,
        "\naccio bench: {} figures in {:.0} s on {} ({} CPUs, {})",
        report.figures.len(),
        started.elapsed().as_secs_f64(),
        report.host.hostname,
        report.host.cores,
        report.host.cpu
    )?;
    let width = if common.stdout_taken() {
        crate::term::stderr_width()
    } else {
        crate::term::stdout_width()
    };
    write!(out, "{}", accio_report::summary::text_fit(report, width))?;
    if !report.warnings.is_empty() {
        writeln!(
            out,
            "{} warning(s): see the report's Warnings section",
            report.warnings.len()
        )?;
    }
    write!(
        out,
        "{}",
        accio_report::text::wrap(
            &format!(
                "report: {} (with report.md, results.json, info.json in {})",
                written.html.display(),
                dir.display()
            ),
            width,
            "  ",
        )
    )?;
    if let Some(json) = common
        .flags
        .json
        .as_deref()
        .filter(|p| *p != std::path::Path::new("-"))
    {
        writeln!(out, "results also copied to {}", json.display())?;
    }
    if interrupted {
        // main reports the interruption and exits with its status.
        return Ok(());
    }
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| o.error.is_some())
        .map(|o| o.name)
        .collect();
    anyhow::ensure!(
        failed.is_empty(),
        "{} failed (see above); the report holds what the other benches measured",
        failed.join(", ")
    );
    common.check_strict(rec.report())
}

/// Closes a bench's progress with its outcome and prints its error.
fn finish(p: Progress, name: &'static str, r: anyhow::Result<()>, rec: &Recorder) -> Outcome {
    let figures = rec
        .report()
        .figures
        .iter()
        .filter(|f| f.bench == name)
        .count();
    match r {
        Ok(()) => {
            p.finish(&format!("done, {figures} figures"));
            Outcome { name, error: None }
        }
        Err(e) => {
            p.finish(&format!("FAILED after {figures} figures"));
            crate::term::eprint_para(&format!("error: bench {name}: {e:#}"), "  ");
            Outcome {
                name,
                error: Some(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_folder_is_timestamped() {
        let d = default_folder();
        let s = d.to_string_lossy();
        assert!(s.starts_with("accio-report-20"), "{s}");
        // accio-report-YYYYMMDDTHHMMSSZ
        assert_eq!(s.len(), "accio-report-".len() + 16, "{s}");
        assert_eq!(&s[s.len() - 1..], "Z");
    }

    fn suite_args(argv: &[&str]) -> Result<CommonArgs, clap::Error> {
        use clap::Parser;
        match crate::Cli::try_parse_from(argv)?.command {
            crate::Command::Bench(crate::BenchArgs {
                which: None,
                common,
            }) => Ok(common),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn suite_flags_parse_and_quick_excludes_full() {
        let c = suite_args(&["accio", "bench", "--full", "--out", "r"]).unwrap();
        assert!(c.full && !c.quick);
        assert_eq!(c.out.as_deref(), Some(std::path::Path::new("r")));
        let e = suite_args(&["accio", "bench", "--quick", "--full"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot be used with"), "{e}");
    }

    #[test]
    fn presets_follow_the_flags() {
        let mut c = CommonArgs::default();
        assert_eq!(Preset::of(&c), Preset::Default);
        c.quick = true;
        assert_eq!(Preset::of(&c), Preset::Quick);
        c.quick = false;
        c.full = true;
        assert_eq!(Preset::of(&c), Preset::Full);
    }
}
