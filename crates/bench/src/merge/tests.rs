//! The merge bench end to end on a temporary directory.

use super::*;

#[test]
fn merge_and_naive_figures_carry_the_fs_ceiling_of_the_same_run() {
    let dir = std::env::temp_dir().join(format!("accio-bench-merge-t-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rec = Recorder::new(None).unwrap();
    MergeBench::quick([&dir])
        .producers(&[2])
        .buffer_bytes(256 << 10)
        .run_bytes(4 << 20)
        .buffers(Some(6))
        .budget(4 << 20)
        .placements(&[Placement::Threads])
        .run(&mut rec, &mut |_| {})
        .unwrap();
    let r = rec.report();
    // The ceiling is the best of one stream and as many as there are cores.
    let mode = if r.select("fs", "write+sync").next().is_some() {
        "write+sync"
    } else {
        "write"
    };
    // The first measure of the ceiling (a merge figure past it beyond the noise would have
    // it measured again, `MergeBench::settle`).
    let all: Vec<_> = r.select("fs", mode).collect();
    let streams: Vec<_> = all
        .iter()
        .filter(|f| f.param_str("for") == "merge ceiling")
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let mut counts: Vec<u64> = streams
        .iter()
        .filter_map(|f| f.param_u64("threads"))
        .collect();
    counts.dedup();
    assert_eq!(counts, if cores > 1 { vec![1, cores] } else { vec![1] });
    // Each stream writes as many bytes as a merge run (2 x 6 x 256 KiB), not run_bytes.
    for f in &streams {
        assert_eq!(f.param_u64("file_size"), Some(2 * 6 * (256 << 10)), "{f:?}");
    }
    let ceil = all
        .iter()
        .map(|f| f.summary.median)
        .fold(f64::MIN, f64::max);
    let merges: Vec<_> = r.select("merge", "merge").collect();
    let mut kinds: Vec<_> = merges
        .iter()
        .map(|f| format!("{}/{}", f.param_str("backend"), f.param_str("write_mode")))
        .collect();
    kinds.sort();
    // The test folder is on a local file system: shm producers write in place there.
    assert_eq!(kinds, ["shm/copy", "shm/direct", "tcp/copy"]);
    for f in &merges {
        assert_eq!(f.ceiling.as_ref().unwrap().value, ceil);
        assert_eq!(f.param_str("bytes"), (2u64 * 6 * (256 << 10)).to_string());
        assert!(f.params["merger_peak_rss_bytes"].as_u64().unwrap() > 0);
        assert!(f.summary.median > 0.0);
        // Where the merger's time went: shares of the wall time, and the write rate.
        let writing = f.params["merger_writing_share"].as_f64().unwrap();
        // Copying, the merger writes every byte; in place it writes only block headers,
        // which on a busy machine may round to no time at all.
        let least = if f.param_str("write_mode") == "copy" {
            f64::MIN_POSITIVE
        } else {
            0.0
        };
        assert!(writing >= least && writing <= 1.0, "{writing} ({f:?})");
        let idle = f.params["merger_idle_share"].as_f64().unwrap();
        // Both are times of the merger thread inside the measured window (an idle pause
        // under way when the clock starts counts from then on), and never overlap.
        assert!(idle >= 0.0 && writing + idle <= 1.02, "{writing} + {idle}");
        assert!(f.params["merger_write_gbps"].as_f64().unwrap() >= f.summary.min);
        // Counted in scheduler ticks (10 ms): a run of a few milliseconds may count none.
        if let Some(on_cpu) = f.params["merger_on_cpu_share"].as_f64() {
            assert!((0.0..=1.05).contains(&on_cpu), "{on_cpu}");
        }
    }
    assert_eq!(r.select("merge", "naive").count(), 1);
    let t = accio_report::text::merge::render_table(r);
    assert!(
        t.contains("shm") && t.contains("tcp") && t.contains("merger writing"),
        "{t}"
    );
    assert!(checks(r).iter().any(|l| l.starts_with("shm/tcp = ")));
    assert!(checks(r)
        .iter()
        .any(|l| l.starts_with("shm direct/copy = ")));
    assert!(t.contains("direct") && t.contains("copy"), "{t}");
    // Every output and part file was removed.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn a_figure_past_its_ceiling_has_the_ceiling_measured_again() {
    use accio_results::model::{CeilingSource, Figure, Unit};
    let dir = std::env::temp_dir().join(format!("accio-bench-merge-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mb = MergeBench::quick([&dir])
        .producers(&[2])
        .buffer_bytes(256 << 10)
        .buffers(Some(6));
    let info = probe::probe(&dir).unwrap();
    let figure = |ceiling: f64| {
        Figure::new("merge", "merge", Unit::GBps, vec![1.0, 1.1, 1.2])
            .unwrap()
            .ceiling("a ceiling", ceiling, CeilingSource::Measured)
    };

    // Within its ceiling: recorded as it is, nothing measured.
    let mut rec = Recorder::new(None).unwrap();
    let mut ceiling = Some(("a ceiling".to_string(), 10.0));
    let within = mb
        .settle(
            figure(10.0),
            &info,
            false,
            &mut ceiling,
            &mut rec,
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(within, figure(10.0));
    assert!(rec.report().figures.is_empty());

    // Past a ceiling taken in a (here: feigned) slow phase: measured again, and the
    // figure read against the better one.
    let mut ceiling = Some(("a ceiling".to_string(), 1e-6));
    let past = figure(1e-6);
    assert!(past.beyond_ceiling());
    let fig = mb
        .settle(past, &info, false, &mut ceiling, &mut rec, &mut |_| {})
        .unwrap();
    let (name, value) = ceiling.unwrap();
    assert!(name.starts_with("fs write of 256K records"), "{name}");
    assert!(value > 1e-6);
    let c = fig.ceiling.as_ref().unwrap();
    assert_eq!((c.name.as_str(), c.value), (name.as_str(), value));
    let again = rec
        .report()
        .select("fs", "write")
        .filter(|f| f.param_str("for") == "merge ceiling, measured again (1)")
        .count();
    assert!(again > 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The names the bench wrote before it used a private directory: `accio-bench-merge.PID.accio`,
/// `accio-bench-merge-naive.PID.partI` and `.out` in the target directory, and the fs
/// ceiling's `accio-bench-fs.PID`.
fn old_names(pid: u32) -> Vec<String> {
    let mut v = vec![
        format!("accio-bench-merge.{pid}.accio"),
        format!("accio-bench-merge-naive.{pid}.out"),
        format!("accio-bench-fs.{pid}"),
    ];
    v.extend((0..4).map(|i| format!("accio-bench-merge-naive.{pid}.part{i}")));
    v
}

#[test]
fn symlinks_planted_at_the_old_temp_names_are_never_followed() {
    use std::os::unix::fs::PermissionsExt;
    // The attacker's directory (world-writable in real life), and the victim: a 0600 file
    // of the user running the bench.
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    let precious: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
    std::fs::write(&victim, &precious).unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let target = tempfile::tempdir().unwrap();
    let me = std::process::id();
    let mut planted = Vec::new();
    for pid in me.saturating_sub(200)..me + 200 {
        for name in old_names(pid) {
            let link = target.path().join(name);
            std::os::unix::fs::symlink(&victim, &link).unwrap();
            planted.push(link);
        }
    }
    let mut rec = Recorder::new(None).unwrap();
    MergeBench::quick([target.path()])
        .producers(&[2])
        .buffer_bytes(256 << 10)
        .buffers(Some(4))
        .budget(4 << 20)
        .placements(&[Placement::Threads])
        .run(&mut rec, &mut |_| {})
        .unwrap();
    // It measured (through the private directory), and every figure kind is there.
    let r = rec.report();
    assert!(r.select("merge", "merge").count() >= 2);
    assert_eq!(r.select("merge", "naive").count(), 1);
    assert!(r.figures.iter().any(|f| f.bench == "fs"));
    // The victim is byte for byte what it was, and still 0600.
    assert_eq!(std::fs::read(&victim).unwrap(), precious);
    let meta = std::fs::metadata(&victim).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // Every planted link is still a symlink to the victim (not replaced, not removed),
    // and nothing else was left in the directory.
    for link in &planted {
        assert_eq!(std::fs::read_link(link).unwrap(), victim, "{link:?}");
    }
    assert_eq!(
        std::fs::read_dir(target.path()).unwrap().count(),
        planted.len()
    );
}

/// A cancellation flag of one test (the process-wide `INTERRUPTED` would stop the other
/// tests of this binary).
static CANCEL_NAIVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static CANCEL_MERGE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs a long bench on a fresh directory, sets `flag` after 400 ms, and returns the
/// outcome, the time from the flag to the return, and what was left in the directory.
fn cancelled_run(
    bench: MergeBench,
    flag: &'static std::sync::atomic::AtomicBool,
) -> (
    Result<(), MergeBenchError>,
    std::time::Duration,
    Vec<std::path::PathBuf>,
) {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};
    let target = tempfile::tempdir().unwrap();
    let bench = bench.targets_for_test(target.path()).cancel_on(flag);
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        flag.store(true, Ordering::SeqCst);
        Instant::now()
    });
    let mut rec = Recorder::new(None).unwrap();
    let out = bench.run(&mut rec, &mut |_| {});
    let ended = Instant::now();
    let set_at = setter.join().unwrap();
    let left = std::fs::read_dir(target.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    (out, ended.saturating_duration_since(set_at), left)
}

#[test]
fn cancel_stops_the_naive_writers_within_a_second_and_removes_the_files() {
    // 2 x 64 x 1 MiB a run, 1000 runs: minutes without the flag.
    let bench = MergeBench::new(["unused"])
        .producers(&[2])
        .buffer_bytes(1 << 20)
        .buffers(Some(64))
        .repeats(1000)
        .budget(4 << 20)
        .ceilings(false)
        .placements(&[Placement::Threads]);
    let (out, took, left) = cancelled_run(bench, &CANCEL_NAIVE);
    assert!(matches!(out, Err(MergeBenchError::Interrupted)), "{out:?}");
    // Measured 0.05-0.25 s; the bound leaves room for a busy test machine.
    assert!(took < std::time::Duration::from_secs(3), "{took:?}");
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn cancel_stops_the_producer_threads_within_a_second_and_removes_the_files() {
    let bench = MergeBench::new(["unused"])
        .producers(&[2])
        .buffer_bytes(1 << 20)
        .buffers(Some(64))
        .repeats(1000)
        .budget(4 << 20)
        .ceilings(false)
        .naive(false)
        .backends(&["shm".to_string()])
        .write_modes(&[accio_merge::WriteMode::Copy])
        .placements(&[Placement::Threads]);
    let (out, took, left) = cancelled_run(bench, &CANCEL_MERGE);
    assert!(matches!(out, Err(MergeBenchError::Interrupted)), "{out:?}");
    // Measured 0.05-0.25 s; the bound leaves room for a busy test machine.
    assert!(took < std::time::Duration::from_secs(3), "{took:?}");
    assert!(left.is_empty(), "left behind: {left:?}");
}

impl MergeBench {
    fn targets_for_test(mut self, dir: &std::path::Path) -> MergeBench {
        self.targets = vec![dir.to_path_buf()];
        self
    }
}
