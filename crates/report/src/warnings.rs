//! Measurement hazards found after a run, as warnings that tell the user what to do (after
//! hyperfine's `src/output/warnings.rs`).
//!
//! [`analyze`] looks at a whole [`Report`] for four hazards:
//!
//! - **above its ceiling**: a figure past its ceiling beyond the noise
//!   ([`accio_results::model::Figure::beyond_ceiling`]: even its slowest sample beats a
//!   bandwidth's or rate's ceiling, or a time's floor, by more than 5%). Usually a cache effect (the
//!   data fit a cache that the ceiling's measurement did not use) or a ceiling measured
//!   while its core was busy;
//! - **noisy**: samples whose min–max spread is more than [`NOISY_SPREAD`] of the median;
//! - **a cache slower than none**: a coalescing cache whose item rate is below writing
//!   each item directly (beyond the noise), with how far its footprint overflows it;
//! - **cold read not cold**: an `fs` cold read whose method says the page cache could not
//!   be emptied: pages stayed resident after the drop (the read then used O_DIRECT, a
//!   different path than a cold buffered read), a loop device whose backing file was not
//!   dropped, or a network file system whose server cache is out of reach. A non-root
//!   run that fell back to `posix_fadvise` is not warned about when `mincore` confirmed
//!   the pages were gone: that read was cold.
//!
//! Some benches judge their figures while they run (`fs` about figures above their ceiling
//! and noisy figures, `mem` about noisy ones) and record typed hazards; `transport` leaves
//! the judging to this module, by its own rules. A figure whose bench already recorded a
//! hazard of the same kind about it is left out, and a warning already in the report is
//! never repeated ([`apply`] records its warnings as typed hazards too), so [`apply`] can
//! run on a report any number of times. One warning
//! covers all figures of one bench with the same hazard, so a noisy machine gives one line
//! per bench, not one per figure.
//!
//! ```
//! use accio_results::model::{CeilingSource, Figure, Report, Unit};
//! use accio_report::warnings::{analyze, Kind};
//!
//! let mut r = Report::new();
//! r.figures.push(
//!     Figure::new("merge", "throughput", Unit::GBps, vec![12.0, 12.5, 13.0])
//!         .unwrap()
//!         .ceiling("memcpy 4M", 10.0, CeilingSource::Measured),
//! );
//! let w = analyze(&r);
//! assert_eq!(w[0].kind, Kind::AboveCeiling);
//! assert!(w[0].text.contains("larger sizes"));
//! ```

use std::io;

use accio_results::hazard::Hazard;
use accio_results::model::{Figure, Recorder, Report};
use accio_results::num::fmt3;

/// A min–max spread above this share of the median makes a figure noisy.
pub const NOISY_SPREAD: f64 = 0.5;
/// Most figures named in one warning; the rest are counted.
const MAX_LISTED: usize = 6;

/// What a warning is about: the hazard kinds of the result model.
pub use accio_results::hazard::HazardKind as Kind;

/// One warning and the figures it is about.
#[derive(Clone, Debug, PartialEq)]
pub struct Warning {
    /// The hazard.
    pub kind: Kind,
    /// Indices into [`Report::figures`].
    pub figures: Vec<usize>,
    /// The sentence shown to the user: what was seen, and what to do.
    pub text: String,
}

/// The warnings a report calls for that it does not already carry (see the module docs).
pub fn analyze(report: &Report) -> Vec<Warning> {
    let mut found: Vec<(Kind, String, usize)> = Vec::new();
    for (i, f) in report.figures.iter().enumerate() {
        if above_ceiling(f) && !bench_said(report, f, Kind::AboveCeiling) {
            found.push((Kind::AboveCeiling, f.bench.clone(), i));
        }
        if f.summary.n >= 2
            && f.summary.spread() > NOISY_SPREAD
            && !bench_said(report, f, Kind::Noisy)
        {
            found.push((Kind::Noisy, f.bench.clone(), i));
        }
    }
    let mut out: Vec<Warning> = Vec::new();
    // Group by (kind, bench) in order of first appearance.
    let mut keys: Vec<(Kind, String)> = Vec::new();
    for (k, b, _) in &found {
        if !keys.contains(&(*k, b.clone())) {
            keys.push((*k, b.clone()));
        }
    }
    for (kind, bench) in keys {
        let idx: Vec<usize> = found
            .iter()
            .filter(|(k, b, _)| *k == kind && *b == bench)
            .map(|(_, _, i)| *i)
            .collect();
        let text = match kind {
            Kind::AboveCeiling => above_text(report, &bench, &idx),
            Kind::Noisy => noisy_text(report, &bench, &idx),
            _ => unreachable!("only the two kinds above are found per figure"),
        };
        out.push(Warning {
            kind,
            figures: idx,
            text,
        });
    }
    out.extend(cold_reads(report));
    out.extend(slow_caches(report));
    out.retain(|w| !report.warnings.contains(&w.text));
    out
}

/// Adds the warnings of [`analyze`] to the recorder's report (and its file); returns how
/// many were new.
pub fn apply(rec: &mut Recorder) -> io::Result<usize> {
    let new = analyze(rec.report());
    for w in &new {
        let figures: Vec<&Figure> = w
            .figures
            .iter()
            .map(|&i| &rec.report().figures[i])
            .collect();
        let bench = figures.first().map_or("accio", |f| f.bench.as_str());
        let h = Hazard::new(w.kind, bench, w.text.clone()).about(figures.iter().copied());
        rec.hazard(h)?;
    }
    Ok(new.len())
}

fn above_ceiling(f: &Figure) -> bool {
    f.beyond_ceiling()
}

/// Whether the bench that measured `f` already dealt with this hazard for it: recorded a
/// hazard of this kind about it (the typed `hazards` of the report, never its sentences),
/// or, for a bench that judges every figure by its own rule, found nothing to warn about.
fn bench_said(report: &Report, f: &Figure, kind: Kind) -> bool {
    if report.hazards.iter().any(|h| h.covers(kind, f)) {
        return true;
    }
    match f.bench.as_str() {
        // transport's rules (`text::transport::hazards`): setup costs are never called noisy
        // (every registration is cold by design) and a bandwidth counts as above its
        // ceiling from 110%. Its verdict stands; only a hazard its rule finds is warned of.
        accio_results::metric::transport::BENCH => !crate::text::transport::hazards(f)
            .iter()
            .any(|h| h.kind == kind),
        _ => false,
    }
}

/// `a, b, c and 3 more`.
fn list(report: &Report, idx: &[usize], each: &dyn Fn(&Figure) -> String) -> String {
    let mut items: Vec<String> = idx
        .iter()
        .take(MAX_LISTED)
        .map(|&i| each(&report.figures[i]))
        .collect();
    if idx.len() > MAX_LISTED {
        items.push(format!("{} more", idx.len() - MAX_LISTED));
    }
    items.join(", ")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn above_text(report: &Report, bench: &str, idx: &[usize]) -> String {
    let items = list(report, idx, &|f| {
        let c = f.ceiling.as_ref().expect("above_ceiling checked it");
        format!(
            "{} at {}% of {} ({} {})",
            f.label(),
            fmt3(c.ratio.unwrap_or(0.0) * 100.0),
            c.name,
            fmt3(c.value),
            f.unit
        )
    });
    format!(
        "{bench}: {} above {} ceiling: {items}. A cache effect is likely (the data fit in a \
         cache the ceiling's measurement did not use): measure larger sizes. Or the ceiling \
         was measured while its core was busy and reads low: rerun on a quiet machine. \
         Either way a measurement error to fix, not a success (docs/CEILINGS.md)",
        plural(idx.len(), "figure is", "figures are"),
        if idx.len() == 1 { "its" } else { "their" }
    )
}

/// Bytes a cache geometry `SETSxWAYSxWAY_BYTES` holds (`16x4x32K`: 2 MiB).
fn geometry_bytes(g: &str) -> Option<u64> {
    let parts: Vec<u64> = g
        .split('x')
        .map(accio_results::size::parse_size)
        .collect::<Result<_, _>>()
        .ok()?;
    (parts.len() == 3).then(|| parts.iter().product())
}

/// Coalescing caches slower than writing each item directly (beyond the noise: the
/// cache's fastest sample below the direct writes' slowest): a silent slow path, usually a
/// footprint several times the cache, where most inserts evict a way.
fn slow_caches(report: &Report) -> Vec<Warning> {
    use accio_results::metric::coalesce::{BENCH, ITEM_RATE};
    let mut idx = Vec::new();
    let mut items = Vec::new();
    for (i, f) in report.figures.iter().enumerate() {
        if f.bench != BENCH || f.metric != ITEM_RATE || f.param_str("mode") != "cache" {
            continue;
        }
        let Some(d) = crate::text::coalesce::direct_of(report, f) else {
            continue;
        };
        if f.summary.max >= d.summary.min {
            continue;
        }
        let over = match (
            f.param_u64("footprint"),
            geometry_bytes(&f.param_str("geometry")),
        ) {
            (Some(fp), Some(cap)) if cap > 0 => {
                format!(", a footprint {}x the cache", fmt3(fp as f64 / cap as f64))
            }
            _ => String::new(),
        };
        idx.push(i);
        items.push(format!(
            "{} at {} Mop/s against {} direct{over}",
            f.label(),
            fmt3(f.summary.median),
            fmt3(d.summary.median)
        ));
    }
    if idx.is_empty() {
        return Vec::new();
    }
    vec![Warning {
        kind: Kind::Caution,
        figures: idx,
        text: format!(
            "coalesce: the cache is slower than writing each item directly: {}. Most inserts \
             evict a way when the items spread over more than the cache holds: use a \
             geometry at least as large as the footprint (--geometry), or write directly",
            items.join("; ")
        ),
    }]
}

fn noisy_text(report: &Report, bench: &str, idx: &[usize]) -> String {
    let items = list(report, idx, &|f| {
        format!(
            "{} ({} {}, {}–{})",
            f.label(),
            fmt3(f.summary.median),
            f.unit,
            fmt3(f.summary.min),
            fmt3(f.summary.max)
        )
    });
    format!(
        "{bench}: {} a min–max spread over {:.0}% of the median: {items}. The machine was \
         noisy: stop other load, and rerun with more repetitions (accio bench --full, or the \
         bench's --reps)",
        plural(idx.len(), "figure has", "figures have"),
        NOISY_SPREAD * 100.0
    )
}

/// One warning per path whose cold reads may not have been cold.
fn cold_reads(report: &Report) -> Vec<Warning> {
    let mut out: Vec<Warning> = Vec::new();
    for (i, f) in report.figures.iter().enumerate() {
        if f.bench != "fs" || f.metric != "cold-read" {
            continue;
        }
        let method = f.method.as_deref().unwrap_or("");
        let path = f.param_str("path");
        let mut why: Vec<String> = Vec::new();
        if method.contains("stayed cached") {
            let resident = f
                .param_f64("resident_after_drop")
                .map_or(String::new(), |r| format!("{:.0}% of ", r * 100.0));
            why.push(format!(
                "{resident}the pages stayed cached after the drop, so the read used O_DIRECT, \
                 which bypasses readahead and is not the path a cold buffered read takes: run \
                 as root so that drop_caches can empty the cache"
            ));
        }
        if method.contains("loop device") {
            why.push(
                "the file system sits on a loop device whose backing file may still be cached: \
                 run as root (drop_caches empties every cache) or use --drop direct"
                    .into(),
            );
        }
        if method.contains("server's cache was not dropped") {
            why.push(
                "only this client's cache was dropped; the server may still serve the data from \
                 its memory: drop the server's caches too, or use files larger than the \
                 server's memory"
                    .into(),
            );
        }
        if why.is_empty() {
            continue;
        }
        let text = format!(
            "fs {path}: the cold read could not empty the page cache ({}): {}",
            method,
            why.join("; ")
        );
        match out.iter_mut().find(|w| w.text == text) {
            Some(w) => w.figures.push(i),
            None => out.push(Warning {
                kind: Kind::ColdReadCached,
                figures: vec![i],
                text,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::model::{CeilingSource, Unit};

    fn fig(bench: &str, metric: &str, unit: Unit, samples: &[f64]) -> Figure {
        Figure::new(bench, metric, unit, samples.to_vec()).unwrap()
    }

    #[test]
    fn above_ceiling_groups_figures_of_a_bench_and_says_what_to_do() {
        let mut r = Report::new();
        for size in [4096u64, 8192] {
            r.figures.push(
                fig("coalesce", "rate", Unit::MopsPerSec, &[30.0, 31.0, 32.0])
                    .param("size", size)
                    .ceiling("memcpy", 20.0, CeilingSource::Measured),
            );
        }
        r.figures.push(
            fig("coalesce", "rate", Unit::MopsPerSec, &[10.0, 10.0, 10.0])
                .param("size", 64u64)
                .ceiling("memcpy", 20.0, CeilingSource::Measured),
        );
        let w = analyze(&r);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].kind, Kind::AboveCeiling);
        assert_eq!(w[0].figures, vec![0, 1]);
        assert!(
            w[0].text.starts_with(
                "coalesce: 2 figures are above their ceiling: coalesce rate 4K at 155% of \
                 memcpy (20.0 Mop/s), coalesce rate 8K at 155% of memcpy (20.0 Mop/s). A cache \
                 effect is likely"
            ),
            "{}",
            w[0].text
        );
    }

    #[test]
    fn a_cache_slower_than_direct_writes_is_named_with_its_overflow() {
        let mut r = Report::new();
        let case = |mode: &str, s: &[f64], pattern: &str| {
            let f = fig("coalesce", "item_rate", Unit::MopsPerSec, s)
                .param("backend", "shm")
                .param("pattern", pattern)
                .param("item", 64u64)
                .param("footprint", 8u64 << 20)
                .param("mode", mode);
            if mode == "cache" {
                f.param("geometry", "16x4x32K")
            } else {
                f
            }
        };
        r.figures.push(case("direct", &[5.0, 5.2, 5.5], "random"));
        r.figures.push(case("cache", &[4.2, 4.4, 4.6], "random"));
        // Overlapping ranges: noise, not a slow path.
        r.figures
            .push(case("direct", &[5.0, 5.2, 5.5], "streaming"));
        r.figures.push(case("cache", &[4.8, 5.1, 5.6], "streaming"));
        let w: Vec<Warning> = analyze(&r)
            .into_iter()
            .filter(|w| w.kind == Kind::Caution)
            .collect();
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].figures, vec![1]);
        assert!(
            w[0].text.starts_with(
                "coalesce: the cache is slower than writing each item directly: coalesce shm \
                 item_rate pattern=random mode=cache item=64 geometry=16x4x32K footprint=8M at \
                 4.40 Mop/s \
                 against 5.20 direct, a footprint 4.00x the cache."
            ),
            "{}",
            w[0].text
        );
    }

    #[test]
    fn a_time_below_its_floor_is_above_its_ceiling() {
        let mut r = Report::new();
        r.figures
            .push(fig("x", "latency", Unit::Micros, &[1.0, 1.0, 1.0]).ceiling(
                "floor",
                2.0,
                CeilingSource::Theoretical,
            ));
        assert_eq!(analyze(&r)[0].kind, Kind::AboveCeiling);
    }

    #[test]
    fn noisy_figures_are_reported_once_and_apply_is_idempotent() {
        let mut rec = Recorder::new(None).unwrap();
        rec.push(fig("merge", "throughput", Unit::GBps, &[1.0, 2.0, 3.0]).param("producers", 4))
            .unwrap();
        rec.push(fig("merge", "throughput", Unit::GBps, &[2.0, 2.1, 2.2]))
            .unwrap();
        assert_eq!(apply(&mut rec).unwrap(), 1);
        let w = &rec.report().warnings[0];
        assert!(
            w.starts_with(
                "merge: 1 figure has a min–max spread over 50% of the median: merge throughput \
                 producers=4 (2.00 GB/s, 1.00–3.00). The machine was noisy"
            ),
            "{w}"
        );
        assert_eq!(apply(&mut rec).unwrap(), 0);
        assert_eq!(rec.report().warnings.len(), 1);
    }

    #[test]
    fn what_a_bench_already_said_is_not_repeated() {
        let mut r = Report::new();
        // transport: its own rule's hazards were recorded.
        let t = fig("transport", "stream_bw", Unit::GBps, &[5.0, 12.0, 20.0])
            .param("backend", "shm")
            .param("size", 2u64 << 20)
            .ceiling("memcpy 2M", 10.0, CeilingSource::Measured);
        r.hazards.extend(crate::text::transport::hazards(&t));
        r.figures.push(t);
        // fs: the per-path summary hazards.
        let fs = fig("fs", "write", Unit::GBps, &[1.0, 3.0, 6.0])
            .param("path", "/dev/shm")
            .param("threads", 2)
            .ceiling("memcpy 4M, 2 threads", 2.0, CeilingSource::Measured);
        r.hazards.push(
            Hazard::new(
                Kind::Noisy,
                "fs",
                "fs /dev/shm: noisy figures (min-max spread over 25% of the median): write x2 \
                 167%; use more --repeats",
            )
            .about([&fs]),
        );
        r.hazards.push(
            Hazard::new(
                Kind::AboveCeiling,
                "fs",
                "fs /dev/shm: above the memcpy ceiling: write x2 150%; the ceiling ...",
            )
            .about([&fs]),
        );
        r.figures.push(fs);
        // mem: its noisy hazard.
        let mem = fig("mem", "memcpy", Unit::GBps, &[1.0, 2.0, 9.0])
            .param("size", 65536u64)
            .param("threads", 1);
        r.hazards.push(
            Hazard::new(
                Kind::Noisy,
                "mem",
                "mem 64K x 1: noisy, min-max spread 400% of the median",
            )
            .about([&mem]),
        );
        r.figures.push(mem);
        assert_eq!(analyze(&r), vec![]);
        // The same fs figure on another path was not covered.
        r.figures.push(
            fig("fs", "write", Unit::GBps, &[1.0, 3.0, 6.0])
                .param("path", "/tmp")
                .param("threads", 2),
        );
        let w = analyze(&r);
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].kind, w[0].figures.clone()), (Kind::Noisy, vec![3]));
        assert!(w[0].text.contains("fs /tmp write x2"), "{}", w[0].text);
    }

    #[test]
    fn transport_rules_stand() {
        let mut r = Report::new();
        // Registration is cold by design: transport never calls it noisy, nor do we.
        r.figures.push(
            fig("transport", "register", Unit::Micros, &[60.0, 65.0, 700.0])
                .param("backend", "shm")
                .param("size", 65536u64),
        );
        // 107% of the ceiling: under transport's 110% threshold.
        r.figures.push(
            fig("transport", "stream_bw", Unit::GBps, &[10.7, 10.7, 10.7])
                .param("backend", "shm")
                .param("size", 2u64 << 20)
                .ceiling("memcpy 2M", 10.0, CeilingSource::Measured),
        );
        assert_eq!(analyze(&r), vec![]);
        // A hazard transport would report but that the report lacks (an edited file).
        r.figures.push(
            fig("transport", "latency", Unit::Micros, &[1.0, 2.0, 9.0])
                .param("backend", "tcp")
                .param("size", 8),
        );
        let w = analyze(&r);
        assert_eq!((w.len(), w[0].figures.clone()), (1, vec![2]));
        assert!(
            w[0].text.contains("tcp latency 8 (2.00 us, 1.00–9.00)"),
            "{}",
            w[0].text
        );
    }

    #[test]
    fn cold_reads_that_stayed_cached_say_run_as_root() {
        let mut r = Report::new();
        let method = "fsync + posix_fadvise(POSIX_FADV_DONTNEED) per file; 40% of pages stayed \
                      cached, so the read used O_DIRECT (drop_caches unavailable (opening \
                      /proc/sys/vm/drop_caches: Permission denied))";
        for n in [1, 2] {
            r.figures.push(
                fig("fs", "cold-read", Unit::GBps, &[1.0, 1.0, 1.0])
                    .param("path", "/data")
                    .param("threads", n)
                    .param("resident_after_drop", 0.4)
                    .method(method),
            );
        }
        // Cold reads that worked, and memory-backed ones, are not warned about.
        r.figures.push(
            fig("fs", "cold-read", Unit::GBps, &[1.0, 1.0, 1.0])
                .param("path", "/tmp")
                .method("sync + echo 3 > /proc/sys/vm/drop_caches"),
        );
        r.figures.push(
            fig("fs", "cold-read", Unit::GBps, &[1.0, 1.0, 1.0])
                .param("path", "/dev/shm")
                .method("none: memory-backed (tmpfs), the cached pages are the file's only copy"),
        );
        let w = analyze(&r);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(
            (w[0].kind, w[0].figures.clone()),
            (Kind::ColdReadCached, vec![0, 1])
        );
        assert!(w[0]
            .text
            .starts_with("fs /data: the cold read could not empty the page cache"));
        assert!(
            w[0].text.contains("40% of the pages stayed cached"),
            "{}",
            w[0].text
        );
        assert!(w[0].text.contains("run as root"), "{}", w[0].text);
    }

    #[test]
    fn long_lists_are_cut() {
        let mut r = Report::new();
        for s in 0..9u64 {
            r.figures.push(
                fig("merge", "throughput", Unit::GBps, &[1.0, 2.0, 3.0]).param("size", s + 1),
            );
        }
        let w = analyze(&r);
        assert!(w[0].text.contains(", 3 more."), "{}", w[0].text);
        assert_eq!(w[0].figures.len(), 9);
    }
}
