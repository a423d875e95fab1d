//! `accio demo laplace` through the binary: ranks as processes of a real world, the final
//! grid checked against a 1-rank run bit for bit, and the errors a user gets for bad input
//! or a rank that dies.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ACCIO: &str = env!("CARGO_BIN_EXE_accio");

fn demo(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(ACCIO)
        .args(["demo", "laplace"])
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn ranks_as_processes_match_one_rank_bit_for_bit_in_2d_and_3d() {
    for (grid, ranks, dims, path, backend) in [
        ("61x47", "3", "3x1", "rma", "shm"),
        ("61x47", "4", "2x2", "messages", "tcp"),
        ("17x13x11", "2", "1x1x2", "rma", "tcp"),
        ("17x13x11", "3", "1x3x1", "messages", "shm"),
    ] {
        let (ok, out, err) = demo(&[
            "--grid",
            grid,
            "--ranks",
            ranks,
            "--dims",
            dims,
            "--path",
            path,
            "--backend",
            backend,
            "--iters",
            "15",
            "--verify",
            "--checked",
        ]);
        assert!(ok, "{grid} {ranks} {path} {backend}:\n{out}\n{err}");
        assert!(
            out.contains("verified: the final grid equals a 1-rank run bit for bit"),
            "{out}"
        );
        assert!(
            out.contains(&format!("path {path}, backend {backend}")),
            "{out}"
        );
        for phase in ["compute", "synchronize", "communicate", "total"] {
            assert!(out.contains(&format!("  {phase} ")), "{out}");
        }
        // The halo table: each rank's bytes sent per iteration, then its rates.
        let halo: Vec<Vec<&str>> = out
            .lines()
            .skip_while(|l| !l.starts_with("halo per iteration"))
            .skip(2)
            .take_while(|l| !l.is_empty())
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(halo.len(), ranks.parse::<usize>().unwrap(), "{out}");
        if grid == "61x47" && dims == "3x1" {
            // Rows of 47 cells: the middle rank sends two.
            let bytes: Vec<&str> = halo.iter().map(|r| r[1]).collect();
            assert_eq!(bytes, ["376", "752", "376"], "{out}");
        }
    }
}

#[test]
fn figures_land_in_the_results_file_per_rank_and_phase() {
    let json = std::env::temp_dir().join(format!("accio-laplace-{}.json", std::process::id()));
    let (ok, out, err) = demo(&[
        "--grid",
        "64x64",
        "--ranks",
        "2",
        "--iters",
        "10",
        "--probe-every",
        "4",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(ok, "{out}\n{err}");
    let report = accio_results::model::Report::read(&json).unwrap();
    std::fs::remove_file(&json).unwrap();
    for rank in 0..2u64 {
        for metric in ["compute", "sync", "communicate", "compute_bw", "halo_bw"] {
            let f = report
                .figures
                .iter()
                .find(|f| {
                    f.bench == "laplace" && f.metric == metric && f.param_u64("rank") == Some(rank)
                })
                .unwrap_or_else(|| panic!("no {metric} figure for rank {rank}"));
            assert!(f.summary.median > 0.0, "{metric}: {:?}", f.summary);
            // Iterations 2 and 6 probed the pair in the run: their phases are not counted.
            assert_eq!(
                f.summary.n, 8,
                "{metric}: one sample per unprobed iteration"
            );
        }
    }
    let bw = report
        .figures
        .iter()
        .find(|f| f.metric == "compute_bw")
        .unwrap();
    assert!(bw.ceiling.as_ref().is_some_and(|c| c.value > 0.0));
    for cache in [
        "",
        "after a sweep",
        "in the run",
        "in the run, both faces at once",
    ] {
        assert!(
            report
                .figures
                .iter()
                .any(|f| f.metric == "pair_bw" && f.param_str("cache") == cache),
            "no pair_bw figure with cache {cache:?}"
        );
    }
}

#[test]
fn bad_grids_are_refused_with_the_cause() {
    let (ok, _, err) = demo(&[
        "--grid", "8x3", "--ranks", "4", "--dims", "1x4", "--iters", "1",
    ]);
    assert!(!ok);
    assert!(
        err.contains("grid 8x3: axis x of 3 cells over 4 ranks gives a rank 0 cells"),
        "{err}"
    );
    let (ok, _, err) = demo(&[
        "--grid", "8x8", "--ranks", "2", "--dims", "3x1", "--iters", "1",
    ]);
    assert!(!ok);
    assert!(
        err.contains("dims 3x1 make 3 ranks, the world has 2"),
        "{err}"
    );
    let (ok, _, err) = demo(&["--grid", "8", "--iters", "1"]);
    assert!(!ok);
    assert!(err.contains("is not a grid"), "{err}");
}

#[test]
fn a_rank_killed_mid_run_is_named_and_the_run_ends() {
    let launcher = Command::new(ACCIO)
        .args([
            "run", "-n", "2", ACCIO, "demo", "laplace", "--grid", "256x256",
        ])
        .args(["--iters", "100000000", "--timeout", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Find rank 1: a child of the launcher whose environment says ACCIO_RANK=1, once it has
    // run for a moment.
    std::thread::sleep(Duration::from_millis(800));
    let rank1 = children(launcher.id())
        .into_iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|e| e.split(|&b| b == 0).any(|v| v == b"ACCIO_RANK=1"))
                .unwrap_or(false)
        })
        .expect("rank 1 is running");
    // SAFETY: plain kill(2) of a child process of ours.
    assert_eq!(unsafe { libc::kill(rank1 as i32, libc::SIGKILL) }, 0);
    let t = Instant::now();
    let out = launcher.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    assert!(err.contains("rank 1 exited with signal 9"), "{err}");
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}
