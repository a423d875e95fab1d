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
    // The choice follows the figures it printed: the backend chosen for each pair is the
    // one 1.00x of the best in its worse direction. Which backend that is, is the
    // measurement's finding (shm measured slower than tcp on a busy machine), not this
    // test's.
    for (a, b) in [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)] {
        assert!(
            ["shm", "tcp"].iter().any(|x| out.contains(&format!(
                "| {a} -> {b} | {x} | measured: {x} 1.00x of the best in its worse direction "
            ))),
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

/// `accio run ARGS`, limited to CPU 0 (so its rank cap is 64 whatever the machine).
fn accio_on_one_cpu(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(ACCIO);
    c.args(args).env_remove("ACCIO_OVERSUBSCRIBE");
    for (k, v) in env {
        c.env(k, v);
    }
    // SAFETY: the closure only calls sched_setaffinity, which is async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = c.output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn more_than_64_ranks_per_cpu_are_refused_unless_forced() {
    let (code, err) = accio_on_one_cpu(&["run", "-n", "65", "true"], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("65 ranks: more than 64 per CPU this process may run on (1 CPUs, so at most 64); pass --oversubscribe"),
        "{err}"
    );
    // `demo laplace` starts `accio run` itself: the same cap, before any rank starts.
    let (code, err) = accio_on_one_cpu(&["demo", "laplace", "--ranks", "100000"], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("100000 ranks: more than 64 per CPU"), "{err}");
    // Forced, the ranks start (and fail as they never join the world, each named).
    for (args, env) in [
        (&["run", "-n", "65", "--oversubscribe", "true"][..], &[][..]),
        (
            &["run", "-n", "65", "true"][..],
            &[("ACCIO_OVERSUBSCRIBE", "1")][..],
        ),
    ] {
        let (code, err) = accio_on_one_cpu(args, env);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("exited with status 0 before joining the world"),
            "{err}"
        );
    }
    let (code, err) = accio_on_one_cpu(&["run", "-n", "0", "true"], &[]);
    assert_eq!(code, Some(2), "{err}");
}

/// Starts `accio run -n 2` of `script` (a shell script that writes its rendezvous address
/// and pid to the file `$OUT`), waits until both ranks wrote it, sends `sig` to the
/// launcher, and checks what it left behind.
fn signal_the_launcher(script: &str, sig: libc::c_int, tag: &str) {
    let out = std::env::temp_dir().join(format!("accio-run-sig-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_file(&out);
    let mut run = Command::new(ACCIO)
        .args(["run", "-n", "2", "--timeout", "30", "sh", "-c", script])
        .env("OUT", &out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let lines = loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        if text.lines().count() == 2 {
            break text;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the ranks never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    // Give the ranks a moment to get where the script leaves them.
    std::thread::sleep(Duration::from_millis(300));
    let sock = lines
        .split_whitespace()
        .next()
        .unwrap()
        .strip_prefix("unix:")
        .unwrap()
        .to_string();
    let pids: Vec<i32> = lines
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect();
    assert!(std::path::Path::new(&sock).exists());
    // SAFETY: signalling our own child.
    unsafe { libc::kill(run.id() as i32, sig) };
    let status = run.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut run.stderr.take().unwrap(), &mut err).unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(sig), "{status:?} {err}");
    assert!(err.contains(&format!("ended by signal {sig}")), "{err}");
    assert!(!std::path::Path::new(&sock).exists(), "{sock} left behind");
    let unix = std::fs::read_to_string("/proc/net/unix").unwrap();
    assert!(!unix.contains(&sock), "{sock} still in /proc/net/unix");
    for p in pids {
        // The ranks were ended (and reaped by the launcher).
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(p, 0) } == 0;
        assert!(!alive, "rank process {p} outlived the launcher");
    }
    std::fs::remove_file(&out).unwrap();
}

#[test]
fn sigterm_or_sigint_ends_the_ranks_and_removes_the_rendezvous_socket() {
    // During the bootstrap: the ranks never join.
    let waiting = "echo \"$ACCIO_RENDEZVOUS $$\" >> \"$OUT\"; exec sleep 30";
    signal_the_launcher(waiting, libc::SIGTERM, "boot");
    // After it: the ranks joined the world and run.
    let running = format!(
        "{ACCIO} world-check --bytes 64 >/dev/null || exit 9; \
         echo \"$ACCIO_RENDEZVOUS $$\" >> \"$OUT\"; exec sleep 30"
    );
    signal_the_launcher(&running, libc::SIGINT, "run");
}

#[test]
fn each_ranks_stderr_lines_arrive_whole_and_prefixed_with_its_rank() {
    // Every line is written in three pieces, 1 ms apart: unprefixed, the ranks'
    // pieces interleaved mid-line.
    let script = "for i in $(seq 1 40); do printf \"error: rank $ACCIO_RANK \" >&2; \
                  sleep 0.001; printf \"line $i \" >&2; printf \"end\\n\" >&2; done";
    let (ok, _, err) = accio(&["run", "-n", "3", "sh", "-c", script], &[]);
    assert!(!ok, "the ranks never joined: {err}");
    let mut seen = [0usize; 3];
    for l in err.lines().filter(|l| l.starts_with("[rank")) {
        let r: usize = l[6..7].parse().unwrap();
        let i = seen[r] + 1;
        assert_eq!(
            l,
            format!("[rank {r}] error: rank {r} line {i} end"),
            "{err}"
        );
        seen[r] = i;
    }
    assert_eq!(seen, [40, 40, 40], "{err}");
}

#[test]
fn every_job_gives_its_ranks_a_fresh_tcp_secret() {
    let job = |env: &[(&str, &str)]| {
        let (_, out, err) = accio(
            &[
                "run",
                "-n",
                "2",
                "sh",
                "-c",
                &format!(
                    "echo \"$ACCIO_TCP_SECRET\"; exec {ACCIO} world-check --bytes 64 >/dev/null"
                ),
            ],
            env,
        );
        let secrets: Vec<String> = out.lines().map(str::to_string).collect();
        assert_eq!(secrets.len(), 2, "{out}\n{err}");
        assert_eq!(
            secrets[0], secrets[1],
            "the ranks of one job hold one secret"
        );
        secrets[0].clone()
    };
    let (a, b) = (job(&[]), job(&[]));
    assert_eq!(a.len(), 64, "{a}");
    assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
    assert_ne!(a, b, "two jobs got the same secret");
    // One already set is passed on.
    assert_eq!(
        job(&[("ACCIO_TCP_SECRET", "the caller's own secret, 16+")]),
        "the caller's own secret, 16+"
    );
}

/// `accio run -n 2 accio world-check` runs this accio, with no `accio` on PATH at all.
#[test]
fn the_program_accio_is_this_accio_without_path() {
    let out = std::process::Command::new(ACCIO)
        .args(["run", "-n", "2", "accio", "world-check", "--bytes", "64"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
}

/// The CPU list world-check prints for each rank: `rank R of N on NODE (cpus LIST), ...`.
fn cpus_of_ranks(out: &str) -> Vec<(usize, String)> {
    let mut v: Vec<(usize, String)> = out
        .lines()
        .filter(|l| l.contains(" (cpus "))
        .map(|l| {
            let rank = l["rank ".len()..]
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let cpus = l
                .split(" (cpus ")
                .nth(1)
                .unwrap()
                .split(')')
                .next()
                .unwrap();
            (rank, cpus.to_string())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn ranks_are_pinned_one_per_cpu_when_there_is_one_for_each() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    if cpus < 2 {
        eprintln!("skipped: one CPU, no two ranks can be pinned apart");
        return;
    }
    // Default (auto) with a CPU per rank, and --bind-to core: each rank on its own CPU.
    for extra in [&[][..], &["--bind-to", "core"][..]] {
        let mut args = vec!["run", "-n", "2"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[ACCIO, "world-check", "--bytes", "4096"]);
        let (ok, out, err) = accio(&args, &[]);
        assert!(ok, "{out}\n{err}");
        let got = cpus_of_ranks(&out);
        assert_eq!(got.len(), 2, "{out}");
        assert!(
            got[0].1.parse::<usize>().is_ok(),
            "rank 0 not on one CPU: {out}"
        );
        assert!(
            got[1].1.parse::<usize>().is_ok(),
            "rank 1 not on one CPU: {out}"
        );
        assert_ne!(got[0].1, got[1].1, "two ranks on one CPU: {out}");
    }
    // --bind-to none, and (auto) more ranks than CPUs: nobody is pinned.
    let more = (cpus + 1).to_string();
    for args in [
        vec!["run", "-n", "2", "--bind-to", "none"],
        vec!["run", "-n", more.as_str()],
    ] {
        let mut args = args.clone();
        args.extend_from_slice(&[ACCIO, "world-check", "--bytes", "4096"]);
        let (ok, out, err) = accio(&args, &[]);
        assert!(ok, "{out}\n{err}");
        for (r, list) in cpus_of_ranks(&out) {
            assert!(
                list.parse::<usize>().is_err(),
                "rank {r} pinned to {list}: {out}"
            );
        }
    }
    // Asked to pin more ranks than there are CPUs: a usage error before anything starts.
    let (code, err) = accio_on_one_cpu(&["run", "-n", "2", "--bind-to", "core", "true"], &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--bind-to core: 2 ranks, but 1 CPU(s) to pin them to; pass --bind-to none"),
        "{err}"
    );
}
