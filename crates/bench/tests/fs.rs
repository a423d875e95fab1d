//! `bench fs` on real file systems: a tmpfs (mounted by the test when root, else a fresh
//! directory in /dev/shm), an ext4 file system in a loop device the test makes (skipped with
//! a printed reason where that is impossible: not root, no mkfs.ext4, no loop support), and
//! bad input. Sizes are a few MiB so that every test takes seconds; every mount is undone by
//! a guard, also when an assertion fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use accio_bench::fs::{CacheDrop, Engine, FsBench, FsError, FsOutcome, Mode, MAX_RESIDENT};
use accio_results::event::Event;
use accio_results::model::{CeilingSource, Figure, Recorder, Report};

const MIB: u64 = 1 << 20;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn sh(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A directory for one test, possibly with a file system mounted on it; undone on drop.
struct Scratch {
    dir: PathBuf,
    mounted: bool,
    image: Option<PathBuf>,
}

impl Scratch {
    fn dir(name: &str, parent: &Path) -> Scratch {
        let dir = parent.join(format!("accio-fs-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch {
            dir,
            mounted: false,
            image: None,
        }
    }

    /// A tmpfs of `size` with extra mount options when root; else a directory in /dev/shm
    /// (`None` when even that is missing).
    fn tmpfs(name: &str, size: &str, opts: &str) -> Option<Scratch> {
        if !is_root() {
            return Path::new("/dev/shm")
                .is_dir()
                .then(|| Scratch::dir(name, Path::new("/dev/shm")));
        }
        let mut s = Scratch::dir(name, &std::env::temp_dir());
        let o = format!(
            "size={size}{}{opts}",
            if opts.is_empty() { "" } else { "," }
        );
        sh("mount", &["-t", "tmpfs", "-o", &o, "tmpfs", s.path()]).ok()?;
        s.mounted = true;
        Some(s)
    }

    /// A 64 MiB ext4 in a loop device, or why there is none.
    fn ext4(name: &str) -> Result<Scratch, String> {
        if !is_root() {
            return Err("not root: cannot mount a loop device".into());
        }
        let mut s = Scratch::dir(name, &std::env::temp_dir());
        let img = s.dir.with_extension("img");
        s.image = Some(img.clone());
        let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
        f.set_len(64 * MIB).map_err(|e| e.to_string())?;
        let img = img.to_str().unwrap();
        sh("mkfs.ext4", &["-q", "-F", img])?;
        sh("mount", &["-o", "loop", img, s.path()])?;
        s.mounted = true;
        Ok(s)
    }

    fn path(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    /// Entries the bench may have left behind (ext4's lost+found is not ours).
    fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("accio-bench-fs"))
            .collect()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.mounted && sh("umount", &[self.path()]).is_err() {
            let _ = sh("umount", &["-l", self.path()]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(img) = &self.image {
            let _ = std::fs::remove_file(img);
        }
    }
}

/// A small, quick configuration.
fn small(paths: &[&str]) -> FsBench {
    FsBench::new(paths)
        .threads(&[1, 2])
        .file_size(4 * MIB)
        .record_size(MIB as usize)
        .repeats(3)
        .ceilings(false)
}

/// Runs `bench` with a JSON file and returns what the file says, and the outcome.
fn run(name: &str, bench: &FsBench) -> (Report, Result<FsOutcome, FsError>) {
    let json =
        std::env::temp_dir().join(format!("accio-fs-test-{name}-{}.json", std::process::id()));
    let mut rec = Recorder::new(Some(&json)).unwrap();
    let out = bench.run(&mut rec, &mut |e| eprintln!("{e:?}"));
    let report: Report = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    (report, out)
}

fn fs_figs<'a>(r: &'a Report, path: &'a str) -> Vec<&'a Figure> {
    r.figures
        .iter()
        .filter(|f| f.bench == "fs" && f.param_str("path") == path)
        .collect()
}

fn num(f: &Figure, k: &str) -> u64 {
    f.params[k].as_u64().unwrap()
}

#[test]
fn tmpfs_records_every_mode_with_bytes_ceilings_and_leaves_nothing() {
    let Some(t) = Scratch::tmpfs("tmpfs", "64M", "") else {
        println!("skipped: no tmpfs (not root and no /dev/shm)");
        return;
    };
    let (r, out) = run("tmpfs", &small(&[t.path()]).ceilings(true));
    let out = out.unwrap();
    assert!(out.failures.is_empty(), "{:?}", out.failures);
    let figs = fs_figs(&r, t.path());
    for mode in Mode::DEFAULT {
        for n in [1u64, 2] {
            let f = figs
                .iter()
                .find(|f| f.metric == mode.name() && num(f, "threads") == n)
                .unwrap_or_else(|| panic!("no {} x{n} figure", mode.name()));
            assert_eq!(num(f, "bytes"), n * 4 * MIB);
            assert_eq!(num(f, "file_size"), 4 * MIB);
            assert_eq!(num(f, "record_size"), MIB);
            assert_eq!(f.param_str("engine"), "psync");
            assert_eq!(f.params["memory_backed"], true);
            assert_eq!(f.param_str("fs_type"), "tmpfs");
            assert_eq!(f.summary.n, 3);
            assert!(f.summary.median > 0.0 && f.summary.min <= f.summary.max);
            // Memory-backed: every mode carries the copy ceiling of the same work measured
            // in this run: the same record size, bytes per thread, threads and direction.
            let c = f
                .ceiling
                .as_ref()
                .expect("memory-backed figures have a ceiling");
            assert_eq!(c.source, CeilingSource::Measured);
            let dir = if ["write", "write+sync", "overwrite"].contains(&f.metric.as_str()) {
                "into"
            } else {
                "out-of"
            };
            let mem = r
                .select("mem", "stream_copy")
                .find(|m| {
                    num(m, "threads") == n
                        && num(m, "record_size") == MIB
                        && num(m, "span") == 4 * MIB
                        && m.param_str("direction") == dir
                })
                .expect("the ceiling is also a mem figure");
            assert_eq!(c.value, mem.summary.median);
        }
    }
    let cold = figs.iter().find(|f| f.metric == "cold-read").unwrap();
    assert!(
        cold.method.as_deref().unwrap().contains("memory-backed"),
        "{:?}",
        cold.method
    );
    assert!(r.warnings.iter().any(|w| w.contains("fresh tmpfs pages")));
    assert!(t.leftovers().is_empty(), "left behind: {:?}", t.leftovers());
}

#[test]
fn ext4_loop_cold_read_drops_the_cache_and_says_how() {
    let e = match Scratch::ext4("ext4") {
        Ok(e) => e,
        Err(why) => {
            println!("skipped: no ext4 loop file system: {why}");
            return;
        }
    };
    let bench = small(&[e.path()]).threads(&[1]);
    let (r, out) = run("ext4", &bench.clone().ceilings(true));
    assert!(out.unwrap().failures.is_empty());
    let figs = fs_figs(&r, e.path());
    assert_eq!(figs.len(), 4, "one figure per mode");
    let f0 = figs[0];
    assert_eq!(
        (
            f0.param_str("fs_type").as_str(),
            f0.param_str("backing").as_str()
        ),
        ("ext4", "block")
    );
    assert!(f0.param_str("mount_source").starts_with("/dev/loop"));
    assert!(num(f0, "capacity_bytes") > 32 * MIB);
    let cold = figs.iter().find(|f| f.metric == "cold-read").unwrap();
    let method = cold.method.as_deref().unwrap();
    assert!(method.contains("drop_caches"), "{method}");
    let resident = cold.params["resident_after_drop"].as_f64().unwrap();
    assert!(
        resident <= MAX_RESIDENT || method.contains("O_DIRECT"),
        "{method}"
    );
    // write+sync and cold read are bounded by the device: no memcpy ceiling claimed; the
    // page-cache modes are copies and get one.
    for f in &figs {
        let device_bound = matches!(f.metric.as_str(), "write+sync" | "cold-read");
        assert_eq!(f.ceiling.is_none(), device_bound, "{}", f.metric);
    }
    assert!(e.leftovers().is_empty(), "left behind: {:?}", e.leftovers());

    // The unprivileged method, forced, on the same file system.
    let (r, out) = run(
        "ext4-fadvise",
        &bench
            .clone()
            .modes(&[Mode::ColdRead])
            .cache_drop(CacheDrop::Fadvise),
    );
    assert!(out.unwrap().failures.is_empty());
    let cold = fs_figs(&r, e.path())[0];
    let method = cold.method.as_deref().unwrap();
    assert!(method.contains("posix_fadvise"), "{method}");
    assert!(e.leftovers().is_empty());
}

#[test]
fn io_uring_and_direct_move_the_same_bytes() {
    let Some(t) = Scratch::tmpfs("uring", "64M", "") else {
        println!("skipped: no tmpfs");
        return;
    };
    let bench = small(&[t.path()])
        .threads(&[2])
        .engine(Engine::IoUring)
        .iodepth(3);
    let (r, out) = run("uring", &bench);
    match out {
        Ok(o) if o.failures.is_empty() => {
            let figs = fs_figs(&r, t.path());
            assert_eq!(figs.len(), 4);
            assert!(figs.iter().all(|f| f.param_str("engine") == "io_uring"
                && num(f, "iodepth") == 3
                && num(f, "bytes") == 8 * MIB));
        }
        Ok(o) => {
            let msg = o.failures[0].to_string();
            assert!(msg.contains("io_uring"), "{msg}");
            println!("skipped io_uring: {msg}");
        }
        Err(e) => panic!("{e}"),
    }
    match Scratch::ext4("direct") {
        Err(why) => println!("skipped O_DIRECT on ext4: {why}"),
        Ok(e) => {
            let (r, out) = run("direct", &small(&[e.path()]).threads(&[1]).direct(true));
            assert!(out.unwrap().failures.is_empty());
            let figs = fs_figs(&r, e.path());
            assert!(figs.iter().all(|f| f.params["direct"] == true));
            let cold = figs.iter().find(|f| f.metric == "cold-read").unwrap();
            assert!(cold.method.as_deref().unwrap().contains("O_DIRECT"));
            assert!(e.leftovers().is_empty());
        }
    }
}

#[test]
fn bad_paths_fail_clearly_and_the_others_are_still_measured() {
    let Some(good) = Scratch::tmpfs("good", "64M", "") else {
        println!("skipped: no tmpfs");
        return;
    };
    let base = Scratch::dir("bad", &std::env::temp_dir());
    let missing = base.dir.join("missing");
    let file = base.dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    // Read-only: a tmpfs mounted ro when root; a directory without write permission else.
    let ro = if is_root() {
        Scratch::tmpfs("ro", "1M", "ro")
    } else {
        let s = Scratch::dir("ro", &std::env::temp_dir());
        std::fs::set_permissions(&s.dir, std::os::unix::fs::PermissionsExt::from_mode(0o555))
            .unwrap();
        Some(s)
    };
    let ro = ro.expect("a read-only directory");
    let small_fs = Scratch::tmpfs("tiny", "2M", "").filter(|_| is_root());
    let mut paths = vec![
        missing.to_str().unwrap(),
        file.to_str().unwrap(),
        ro.path(),
        good.path(),
    ];
    if let Some(s) = &small_fs {
        paths.push(s.path());
    }
    let (r, out) = run("bad", &small(&paths).threads(&[1]).modes(&[Mode::Write]));
    let out = out.unwrap();
    let msgs: Vec<String> = out.failures.iter().map(|f| f.to_string()).collect();
    assert_eq!(out.failures.len(), paths.len() - 1, "{msgs:?}");
    assert!(
        msgs[0].starts_with(paths[0]) && msgs[0].contains("does not exist"),
        "{msgs:?}"
    );
    assert!(
        msgs[1].starts_with(paths[1]) && msgs[1].contains("not a directory"),
        "{msgs:?}"
    );
    assert!(
        msgs[2].starts_with(paths[2])
            && (msgs[2].contains("read-only") || msgs[2].contains("not writable")),
        "{msgs:?}"
    );
    if small_fs.is_some() {
        assert!(msgs[3].contains("not enough space"), "{msgs:?}");
    }
    assert_eq!(out.measured, vec![PathBuf::from(good.path())]);
    assert_eq!(fs_figs(&r, good.path()).len(), 1);
    // Each failure is also a warning in the JSON document.
    assert_eq!(
        r.warnings
            .iter()
            .filter(|w| w.contains("not measured"))
            .count(),
        out.failures.len()
    );
}

#[test]
fn enospc_mid_run_names_the_file_and_removes_it() {
    if !is_root() {
        println!("skipped: not root, cannot mount a small tmpfs");
        return;
    }
    let Some(t) = Scratch::tmpfs("full", "2M", "") else {
        println!("skipped: cannot mount tmpfs");
        return;
    };
    let bench = small(&[t.path()])
        .threads(&[1])
        .modes(&[Mode::Write])
        .check_space(false);
    let (_, out) = run("full", &bench);
    let out = out.unwrap();
    assert_eq!(out.failures.len(), 1);
    let msg = out.failures[0].to_string();
    assert!(
        msg.contains("/t0") && msg.contains("No space left"),
        "{msg}"
    );
    assert!(msg.contains("test files removed"), "{msg}");
    assert!(t.leftovers().is_empty(), "left behind: {:?}", t.leftovers());
}

#[test]
fn cancellation_stops_between_records_and_removes_files() {
    let Some(t) = Scratch::tmpfs("cancel", "64M", "") else {
        println!("skipped: no tmpfs");
        return;
    };
    let flag: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let bench = small(&[t.path()]).repeats(50).cancel_on(flag);
    let json = t.dir.with_extension("json");
    let mut rec = Recorder::new(Some(&json)).unwrap();
    let mut repeats_done = 0;
    let out = bench.run(&mut rec, &mut |e| {
        // Each repeat of a thread count is one unit of the plan.
        if let Event::Advanced(_) = e {
            repeats_done += 1;
            if repeats_done == 2 {
                flag.store(true, Ordering::SeqCst); // as the SIGINT handler would
            }
        }
    });
    std::fs::remove_file(&json).unwrap();
    assert!(matches!(out, Err(FsError::Interrupted)), "{out:?}");
    assert!(t.leftovers().is_empty(), "left behind: {:?}", t.leftovers());
}
