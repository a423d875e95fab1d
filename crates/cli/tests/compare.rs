//! `accio compare` as a user or a CI job meets it: each change in words with the direction
//! of the figure's unit ("2.00× slower" for a time, "lower" for a rate), "within noise" where
//! the two runs' ranges overlap, `--fail-on-regression` failing only on a change beyond the
//! noise, and every line within an 80-column terminal.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use accio_results::model::{Figure, Report, Unit};

/// A fresh directory for one test's results files, removed at the end.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("accio-compare-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    /// Writes a results file of `figures` (metric, unit, size, samples) as `name`.
    fn results(&self, name: &str, figures: &[(&str, Unit, u64, &[f64])]) -> PathBuf {
        let mut r = Report::new();
        for (metric, unit, size, samples) in figures {
            r.figures.push(
                Figure::new("transport", metric, *unit, samples.to_vec())
                    .unwrap()
                    .param("backend", "shm")
                    .param("size", *size),
            );
        }
        let p = self.0.join(name);
        std::fs::write(&p, serde_json::to_vec_pretty(&r).unwrap()).unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn compare(old: &Path, new: &Path, more: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_accio"))
        .arg("compare")
        .arg(old)
        .arg(new)
        .args(more)
        .env("COLUMNS", "80")
        .output()
        .unwrap()
}

fn row<'a>(out: &'a str, figure: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(figure))
        .unwrap_or_else(|| panic!("no row for {figure} in\n{out}"))
}

#[test]
fn a_doubled_latency_reads_slower_and_a_dropped_rate_lower() {
    let d = Dir::new("regression");
    let old = d.results(
        "old.json",
        &[
            ("latency", Unit::Micros, 8, &[0.26, 0.27, 0.28]),
            ("stream_bw", Unit::GBps, 4096, &[40.0, 48.0, 50.0]),
        ],
    );
    let new = d.results(
        "new.json",
        &[
            ("latency", Unit::Micros, 8, &[0.52, 0.54, 0.56]),
            ("stream_bw", Unit::GBps, 4096, &[20.0, 24.0, 25.0]),
        ],
    );
    let o = compare(&old, &new, &["--fail-on-regression"]);
    let out = String::from_utf8(o.stdout).unwrap();
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        row(&out, "shm latency 8 ").ends_with("2.00× slower"),
        "{out}"
    );
    assert!(
        row(&out, "shm stream_bw 4K").ends_with("2.00× lower"),
        "{out}"
    );
    assert!(
        out.contains("2 figures compared: 2 worse, 0 better, 0 within noise"),
        "{out}"
    );
    assert!(
        err.contains("2 figure(s) got slower or lower beyond the noise"),
        "{err}"
    );
    for l in out.lines().chain(err.lines()) {
        assert!(l.chars().count() <= 80, "wider than 80 columns: {l}");
    }
    // The other way round: faster and higher, no regression.
    let o = compare(&new, &old, &["--fail-on-regression"]);
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        row(&out, "shm latency 8 ").ends_with("2.00× faster"),
        "{out}"
    );
    assert!(
        row(&out, "shm stream_bw 4K").ends_with("2.00× higher"),
        "{out}"
    );
}

#[test]
fn overlapping_ranges_are_within_noise_and_pass_fail_on_regression() {
    let d = Dir::new("noise");
    // Medians 30% apart, but the ranges overlap: one slow sample says nothing.
    let old = d.results(
        "old.json",
        &[("latency", Unit::Micros, 8, &[0.27, 0.27, 0.40])],
    );
    let new = d.results(
        "new.json",
        &[("latency", Unit::Micros, 8, &[0.30, 0.35, 0.36])],
    );
    // Ranges apart, but by less than the 10% default threshold (0.36 × 1.1 > 0.38).
    let near = d.results(
        "near.json",
        &[("latency", Unit::Micros, 8, &[0.38, 0.39, 0.42])],
    );
    let o = compare(&old, &new, &["--fail-on-regression"]);
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        row(&out, "shm latency 8").ends_with("within noise"),
        "{out}"
    );
    assert!(!out.contains("slower"), "{out}");
    let o = compare(&new, &near, &["--fail-on-regression"]);
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        row(&out, "shm latency 8").ends_with("within noise"),
        "{out}"
    );
    // With a 5% threshold the same gap counts.
    let o = compare(&new, &near, &["--fail-on-regression", "--threshold", "5"]);
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        row(&out, "shm latency 8").ends_with("1.11× slower"),
        "{out}"
    );
}

/// The host moved the vCPUs between the runs (the core-to-core hop went from 0.05 to
/// 0.25 µs): the latency that moved with it is shown but not judged, and
/// `--fail-on-regression` exits 3, inconclusive, not 1.
#[test]
fn a_machine_that_differed_is_inconclusive_not_a_regression() {
    let d = Dir::new("machine");
    let old = d.results(
        "old.json",
        &[
            ("latency_floor", Unit::Micros, 8, &[0.050, 0.051, 0.055]),
            ("latency", Unit::Micros, 8, &[0.086, 0.086, 0.086]),
        ],
    );
    let new = d.results(
        "new.json",
        &[
            ("latency_floor", Unit::Micros, 8, &[0.244, 0.250, 0.251]),
            ("latency", Unit::Micros, 8, &[0.281, 0.290, 0.291]),
        ],
    );
    let o = compare(&old, &new, &["--fail-on-regression"]);
    let out = String::from_utf8(o.stdout).unwrap();
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(3), "{out}{err}");
    assert!(out.contains("3.37× slower (machine differed)"), "{out}");
    assert!(out.contains("Inconclusive"), "{out}");
    assert!(err.contains("inconclusive, run both again"), "{err}");
}
