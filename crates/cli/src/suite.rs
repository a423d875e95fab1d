//! The default suite: what plain `accio bench` runs.
//!
//! Every bench in turn (mem, fs on a temporary directory and /dev/shm, transport over shm
//! and tcp, merge, coalesce) into one report folder:
//!
//! - `results.json`: the figures, rewritten after each one (an interrupted run keeps what
//!   it measured), with the node facts of `info.json` inside;
//! - `info.json`: what the node is (`accio info --json`);
//! - `report.md`, `report.html`: written at the end, also after a bench failed or Ctrl-C.
//!
//! On a terminal each bench shows a bar with its ETA, sized from the bench's plan
//! (figures, or for fs bytes moved), or for merge and coalesce, whose plans depend on the
//! machine, a spinner with the latest figure; elsewhere the benches' progress lines are
//! printed under a header per bench.
//! A bench that fails is reported, the others still run, and the command exits non-zero at
//! the end. Presets: `--quick` (the fewest sizes that still give every headline figure,
//! under a minute on a 2-core VM), the default (full memory and transport sweeps, the
//! quick fs bench: about two minutes), `--full` (every size and thread count of every
//! bench, several minutes).

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Instant;

use accio_bench::transport::{BenchError, Event};
use accio_results::model::Recorder;
use accio_results::node::NodeInfo;
use anyhow::Context as _;
use indicatif::{ProgressBar, ProgressStyle};

use crate::common::{CommonArgs, SizeList};
use crate::{bench_coalesce, bench_fs, bench_merge, bench_transport};

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

/// Progress of one bench: a bar with ETA on a terminal, plain lines otherwise.
struct Progress {
    bar: Option<ProgressBar>,
    name: &'static str,
    started: Instant,
}

impl Progress {
    /// Starts bench `step` of `steps`; `total` is its planned work in the units the bench
    /// reports (0: unknown, a spinner).
    fn start(tty: bool, step: usize, steps: usize, name: &'static str, total: u64) -> Progress {
        let prefix = format!("[{step}/{steps}] {name}");
        if !tty {
            eprintln!("== {prefix}");
            return Progress {
                bar: None,
                name,
                started: Instant::now(),
            };
        }
        let bar = if total == 0 {
            let b = ProgressBar::new_spinner();
            b.set_style(
                ProgressStyle::with_template("{prefix:>17} {spinner} {elapsed:>4} {wide_msg}")
                    .expect("a valid template"),
            );
            b
        } else {
            let b = ProgressBar::new(total);
            b.set_style(
                ProgressStyle::with_template(
                    "{prefix:>17} [{bar:28}] {percent:>3}% {elapsed:>4} ETA {eta:>4} {wide_msg}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            b
        };
        // No steady tick: a drawing thread waking on its own would perturb benches that own
        // both cores of a small machine. The bar redraws when the bench reports progress.
        bar.set_prefix(prefix);
        Progress {
            bar: Some(bar),
            name,
            started: Instant::now(),
        }
    }

    /// A progress line from the bench. Warnings, errors and notes stay on screen above the
    /// bar; other lines become the bar's message.
    fn line(&self, text: &str) {
        match &self.bar {
            None => eprintln!("{text}"),
            Some(b) => {
                let keep = ["warning", "error", "note", "skipped", "accio bench"]
                    .iter()
                    .any(|k| text.starts_with(k) || text.contains(&format!(": {k}")));
                if keep {
                    b.println(format!("{}: {text}", self.name));
                } else {
                    // The prefix already names the bench.
                    let short = text
                        .strip_prefix(self.name)
                        .map_or(text, |t| t.trim_start_matches([':', ' ']));
                    b.set_message(short.to_string());
                }
            }
        }
    }

    fn advance(&self, units: u64) {
        if let Some(b) = &self.bar {
            if let Some(len) = b.length() {
                if b.position() + units > len {
                    b.set_length(b.position() + units);
                }
            }
            b.inc(units);
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

/// The fs bench's progress lines say `N thread(s), repeat r/R`: the work done is N files.
fn fs_units(line: &str) -> u64 {
    let Some(at) = line.find(" thread(s), repeat ") else {
        return 0;
    };
    let digits: String = line[..at]
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().unwrap_or(0)
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
    let info_path = dir.join("info.json");
    std::fs::write(
        &info_path,
        serde_json::to_vec_pretty(&info).context("encoding the node facts")?,
    )
    .with_context(|| format!("writing {}", info_path.display()))?;
    rec.set_info(info)
        .with_context(|| format!("writing {}", results.display()))?;
    eprintln!(
        "accio bench ({} preset): mem, fs, transport, merge, coalesce; report folder {}",
        preset.name(),
        dir.display()
    );

    // Each bench's arguments: its own default-suite variant, adjusted by the preset. The
    // shared flags that only concern some benches are cleared for the others, so that no
    // bench prints "ignores --sizes" for a flag meant for another.
    let mut mem = bench_fs::MemArgs::default_suite(&common);
    mem.common.backend = None;
    let fs = bench_fs::FsArgs::default_suite(&common).map(|mut a| {
        a.common.backend = None;
        a.common.sizes = None;
        a
    });
    let mut transport = bench_transport::TransportArgs::default_suite(&common);
    let fs = fs.map(|mut a| {
        match preset {
            Preset::Quick => a.set_file_size(QUICK_FILE_SIZE),
            Preset::Default => {}
            Preset::Full => a.common.quick = false,
        }
        a
    });
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

    let steps = 5;
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut interrupted = false;

    // mem
    {
        let (sizes, threads) = mem.plan();
        let p = Progress::start(tty, 1, steps, "mem", (sizes.len() * threads.len()) as u64);
        let r = bench_fs::run_mem_with(
            mem,
            &mut rec,
            &mut |line| {
                if line.starts_with("mem: ")
                    && (line.contains("thread(s): ") || line.starts_with("mem: skipped"))
                {
                    p.advance(1);
                }
                p.line(line);
            },
            false,
        );
        outcomes.push(finish(p, "mem", r, &rec));
    }

    // fs
    {
        let total = fs.as_ref().map_or(0, |a| {
            let (paths, repeats, threads) = a.plan();
            (paths.len() * repeats * threads.iter().sum::<usize>()) as u64
        });
        let p = Progress::start(tty, 2, steps, "fs", total);
        let r = fs.and_then(|a| {
            bench_fs::run_fs_with(
                a,
                &mut rec,
                &mut |line| {
                    p.advance(fs_units(line));
                    p.line(line);
                },
                false,
            )
        });
        if r.as_ref()
            .err()
            .and_then(|e| e.downcast_ref::<accio_bench::fs::FsError>())
            .is_some_and(|e| matches!(e, accio_bench::fs::FsError::Interrupted))
        {
            interrupted = true;
        }
        outcomes.push(finish(p, "fs", r, &rec));
    }

    // transport
    if !interrupted {
        let total = transport.plan().map_or(0, |(backends, sizes, reg)| {
            (backends.len() * (sizes.len() * 4 + 1 + reg * 2)) as u64
        });
        let p = Progress::start(tty, 3, steps, "transport", total);
        let r = bench_transport::run_with(
            transport,
            &mut rec,
            &mut |e| {
                if matches!(e, Event::Figure(_)) {
                    p.advance(1);
                }
                p.line(&format!("{e}"));
            },
            false,
        );
        if r.as_ref()
            .err()
            .and_then(|e| e.downcast_ref::<BenchError>())
            .is_some_and(|e| matches!(e, BenchError::Interrupted { .. }))
        {
            interrupted = true;
        }
        outcomes.push(finish(p, "transport", r, &rec));
    }

    // merge and coalesce: a spinner whose message is the latest figure.
    if !interrupted {
        let p = Progress::start(tty, 4, steps, "merge", 0);
        let r = bench_merge::run_with(
            bench_merge::MergeArgs::default_suite(&common),
            &mut rec,
            &mut |line| p.line(line),
            false,
        );
        outcomes.push(finish(p, "merge", r, &rec));
        interrupted |= accio_bench::fs::cancel::sigint_received();
    }
    if !interrupted {
        let p = Progress::start(tty, 5, steps, "coalesce", 0);
        let r = bench_coalesce::run_with(
            bench_coalesce::CoalesceArgs::default_suite(&common),
            &mut rec,
            &mut |line| p.line(line),
            false,
        );
        outcomes.push(finish(p, "coalesce", r, &rec));
        interrupted |= accio_bench::fs::cancel::sigint_received();
    }

    // Post-hoc warnings, then the pages.
    accio_report::warnings::apply(&mut rec)
        .with_context(|| format!("writing {}", results.display()))?;
    let written = accio_report::write(rec.report(), &dir)?;
    if let Some(json) = &common.json {
        std::fs::copy(&results, json)
            .with_context(|| format!("copying the results to {}", json.display()))?;
    }

    let report = rec.report();
    println!(
        "\naccio bench: {} figures in {:.0} s on {} ({} CPUs, {})",
        report.figures.len(),
        started.elapsed().as_secs_f64(),
        report.host.hostname,
        report.host.cores,
        report.host.cpu
    );
    print!("{}", accio_report::summary::text(report));
    if !report.warnings.is_empty() {
        println!(
            "{} warning(s): see the report's Warnings section",
            report.warnings.len()
        );
    }
    println!(
        "report: {} (with report.md, results.json, info.json in {})",
        written.html.display(),
        dir.display()
    );
    if let Some(json) = &common.json {
        println!("results also copied to {}", json.display());
    }
    if interrupted {
        eprintln!("accio bench: interrupted; the report holds what was measured");
        std::process::exit(130);
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
    Ok(())
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
            eprintln!("error: bench {name}: {e:#}");
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
    fn fs_lines_count_files_moved() {
        assert_eq!(
            fs_units("fs /dev/shm: 2 thread(s), repeat 1/3: write 1.2, cold read 3.4 GB/s"),
            2
        );
        assert_eq!(
            fs_units("fs /a: b: 16 thread(s), repeat 3/3: write 1 GB/s"),
            16
        );
        assert_eq!(fs_units("fs: memcpy ceiling 4M, 2 thread(s): 12 GB/s"), 0);
    }

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
