//! `accio run`: local worlds, and the errors that name the rank at fault.

use std::process::Command;
use std::time::{Duration, Instant};

const ACCIO: &str = env!("CARGO_BIN_EXE_accio");

fn accio(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut c = Command::new(ACCIO);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn three_ranks_connect_every_pair_over_every_backend() {
    let (ok, out, err) = accio(
        &["run", "-n", "3", ACCIO, "world-check", "--bytes", "65536"],
        &[],
    );
    assert!(ok, "{out}\n{err}");
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        for (x, y) in [(a, b), (b, a)] {
            assert!(
                out.contains(&format!("rank {x} <-> rank {y}: shm ok (chosen: same node")),
                "{out}"
            );
            assert!(
                out.contains(&format!("rank {x} <-> rank {y}: tcp ok (also)")),
                "{out}"
            );
        }
    }
}

#[test]
fn accio_transport_and_the_config_file_override_the_rule() {
    let dir = std::env::temp_dir().join(format!("accio-run-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("pairs.conf");
    std::fs::write(&conf, "# pair 0-1 stays on shm\n0 1 shm\n").unwrap();
    let (ok, out, err) = accio(
        &["run", "-n", "3", ACCIO, "world-check", "--bytes", "4096"],
        &[
            ("ACCIO_TRANSPORT", "tcp"),
            ("ACCIO_WORLD_CONFIG", conf.to_str().unwrap()),
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("rank 1 <-> rank 0: shm ok (chosen: "), "{out}");
    assert!(out.contains("pairs.conf:2 sets shm)"), "{out}");
    assert!(
        out.contains("rank 2 <-> rank 0: tcp ok (chosen: ACCIO_TRANSPORT=tcp)"),
        "{out}"
    );
    assert!(
        out.contains("rank 1 <-> rank 2: tcp ok (chosen: ACCIO_TRANSPORT=tcp)"),
        "{out}"
    );

    let (ok, _, err) = accio(
        &["run", "-n", "2", ACCIO, "world-check"],
        &[("ACCIO_TRANSPORT", "mpi")],
    );
    assert!(!ok);
    assert!(
        err.contains(
            "ACCIO_TRANSPORT=mpi for ranks 0 and 1, but the world was not launched by MPI"
        ),
        "{err}"
    );
}

#[test]
fn a_rank_dying_in_bootstrap_is_named_quickly() {
    let t0 = Instant::now();
    let script = format!("if [ \"$ACCIO_RANK\" = 2 ]; then exit 3; fi; exec {ACCIO} world-check");
    let (ok, _, err) = accio(
        &["run", "-n", "4", "--timeout", "30", "sh", "-c", &script],
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains("rank 2 exited with status 3 before joining the world"),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}

#[test]
fn a_rank_failing_later_ends_the_run_with_its_status() {
    // Every rank joins the world (as every MPI rank calls MPI_Init); rank 1 then fails.
    let script = format!("{ACCIO} world-check --bytes 64 >/dev/null || exit 9; [ \"$ACCIO_RANK\" = 1 ] && exit 5; exec sleep 30");
    let t0 = Instant::now();
    let (ok, _, err) = accio(&["run", "-n", "2", "sh", "-c", &script], &[]);
    assert!(!ok);
    assert!(
        err.contains("rank 1 exited with status 5; the other ranks were ended"),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10));
}

#[test]
fn without_a_launcher_the_error_says_how_to_start() {
    let (ok, _, err) = accio(&["world-check"], &[]);
    assert!(!ok);
    assert!(
        err.contains("ACCIO_RANK: not set: start the program with `accio run -n N`"),
        "{err}"
    );
}

#[test]
fn bench_matrix_measures_every_ordered_pair_and_explains_the_choice() {
    let dir = std::env::temp_dir().join(format!("accio-matrix-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("m.json");
    let conf = dir.join("pairs.conf");
    let (ok, out, err) = accio(
        &[
            "run",
            "-n",
            "3",
            ACCIO,
            "bench",
            "matrix",
            "--sizes",
            "8,64K",
            "--reps",
            "2",
            "--json",
            json.to_str().unwrap(),
            "--write-config",
            conf.to_str().unwrap(),
        ],
        &[],
    );
    assert!(ok, "{out}\n{err}");
    for (a, b) in [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)] {
        assert!(
            out.contains(&format!(
                "| {a} -> {b} | shm | measured: shm 1.00x of the best in its worse direction "
            )),
            "{out}"
        );
    }
    assert!(
        out.contains("matrix stream_bw backend=tcp size=64K"),
        "{out}"
    );
    let text = std::fs::read_to_string(&json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let figs = v["figures"].as_array().unwrap();
    // 6 ordered pairs x 2 backends x 2 sizes x 2 metrics.
    assert_eq!(figs.len(), 48, "{text}");
    assert!(figs
        .iter()
        .all(|f| f["params"]["src"].as_str().unwrap().starts_with('r')));
    let c = std::fs::read_to_string(&conf).unwrap();
    assert_eq!(c.lines().filter(|l| !l.starts_with('#')).count(), 3, "{c}");
    std::fs::remove_dir_all(&dir).unwrap();
}
