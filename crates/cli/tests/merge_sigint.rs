//! SIGINT reaches `accio bench merge` within a second while producer processes write: it
//! exits 130, its producer processes are gone and its directory is empty (it ignored Ctrl-C
//! for 52-87 s before, and could leave its output file behind).

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
    for &sig in signals {
        // SAFETY: kill(2) on our own child, which has not been waited for.
        assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0);
    }
    let sent = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if sent.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("still running 10 s after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = sent.elapsed();
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
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
