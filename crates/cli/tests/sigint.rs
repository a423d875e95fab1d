//! Ctrl-C reaches every bench at its next step: SIGINT (or SIGTERM) while a bench
//! measures ends it with exit status 130, its test files and peer processes gone. `bench
//! merge` ignored Ctrl-C for 52-118 s before, `bench coalesce` for 78 s, `bench mem` for
//! 2.5 s; measured within 0.05-0.9 s now. The bound asserted is loose (3 s) so that a busy
//! CI machine does not fail it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Processes whose command line contains `needle` (the producers of one bench carry its
/// shm address, which holds the bench's pid).
fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            found.push(cmd);
        }
    }
    found
}

#[test]
fn sigint_stops_bench_merge_within_a_second_and_leaves_nothing() {
    interrupt_bench_merge("sigint", &[libc::SIGINT]);
}

/// SIGTERM is an interruption too, and the same signal delivered twice within a
/// millisecond (`timeout` signals the process, then its process group) does not kill the
/// bench before it removed its files.
#[test]
fn sigterm_delivered_twice_at_once_still_leaves_nothing() {
    interrupt_bench_merge("sigterm", &[libc::SIGTERM, libc::SIGTERM]);
}

fn interrupt_bench_merge(tag: &str, signals: &[libc::c_int]) {
    let parent = if Path::new("/dev/shm").is_dir() {
        Path::new("/dev/shm").to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = parent.join(format!("accio-cli-merge-{tag}-{}", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    // 4 producer processes x 64 x 256 KiB a run, 30 runs (and the fs ceiling of 30 repeats
    // first): several seconds without the signal.
    let mut child = Command::new(env!("CARGO_BIN_EXE_accio"))
        .args(["bench", "merge"])
        .arg(&dir)
        .args([
            "--producers",
            "4",
            "--placement",
            "processes",
            "--backend",
            "shm",
            "--write-mode",
            "copy",
            "--no-naive",
            "--sizes",
            "256K",
            "--buffers",
            "64",
            "--repetitions",
            "30",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // The signal goes in while producer processes run (their command lines carry the
    // bench's shm address, which holds its pid).
    let producers = format!("accio-bench-merge-{pid}-");
    let started = Instant::now();
    let running = loop {
        let n = processes_with(&producers).len();
        if n == 4 || started.elapsed() > Duration::from_secs(60) {
            break n;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "ended before its producers ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let (status, took, stderr) = signal_and_wait(&mut child, signals);
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(status.code(), Some(130), "{stderr}");
    // Measured 0.1-0.25 s on a quiet machine (the issue asks for a second); the bound
    // leaves room for a busy test machine, and is far from the 52-118 s of before.
    assert!(took < Duration::from_secs(3), "{took:?}: {stderr}");
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(stderr.contains("accio: interrupted"), "{stderr}");
    // Its producer processes ran when the signal was sent, and they are gone.
    assert_eq!(running, 4, "{stderr}");
    assert_eq!(processes_with(&producers), Vec::<String>::new());
}

/// Sends `signals` to `child` (back to back), waits for it to end (at most 30 s), and
/// returns its status, how long it took after the signals and its stderr.
fn signal_and_wait(
    child: &mut std::process::Child,
    signals: &[libc::c_int],
) -> (std::process::ExitStatus, Duration, String) {
    for &sig in signals {
        // SAFETY: kill(2) on our own child, which has not been waited for.
        let sent = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        assert_eq!(sent, 0, "kill");
    }
    let sent = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if sent.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("still running 30 s after the signal");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = sent.elapsed();
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
    (status, took, stderr)
}

/// `accio ARGS`, interrupted 1.5 s into its run.
fn interrupt(args: &[&str]) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_accio"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "{args:?} ended before the signal"
    );
    let (status, took, stderr) = signal_and_wait(&mut child, &[libc::SIGINT]);
    assert_eq!(status.code(), Some(130), "{args:?}: {stderr}");
    assert!(
        took < Duration::from_secs(3),
        "{args:?}: {took:?}: {stderr}"
    );
    assert!(stderr.contains("accio: interrupted"), "{args:?}: {stderr}");
}

#[test]
fn sigint_stops_bench_mem() {
    interrupt(&["bench", "mem"]);
}

#[test]
fn sigint_stops_bench_coalesce() {
    interrupt(&["bench", "coalesce"]);
}

#[test]
fn sigint_stops_bench_transport() {
    interrupt(&["bench", "transport", "--backend", "shm"]);
}
