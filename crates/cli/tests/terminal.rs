//! accio in a real terminal (tmux): the headline table at 80 and 120 columns (`accio report`
//! prints the summary of a saved run, so the text is the same on every machine), and at 80
//! columns the progress, warnings and tables of a bench, `accio demo laplace`, `accio
//! compare`, `accio info` and `--help`: no line wrapped by the terminal, every figure still
//! there. Skipped with a message where tmux is missing (CI installs it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// tmux on a server of this test's own (`-L`): the user's server, or another test run's
/// being shut down beside it, cannot get in the way ("server exited unexpectedly").
/// Each test has a server of its own (`tag`): the tests of this file run at once.
fn tmux_on(tag: &str, args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .args(["-L", &socket(tag)])
        .args(args)
        .output()
        .unwrap()
}

fn socket(tag: &str) -> String {
    format!("accio-test-{}-{tag}", std::process::id())
}

/// Ends a test's tmux server (and removes its socket) when dropped.
struct Server(&'static str);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = tmux_on(self.0, &["kill-server"]);
        // tmux leaves the socket file of a server whose last session ended.
        let dir = std::env::var_os("TMUX_TMPDIR").unwrap_or_else(|| "/tmp".into());
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let _ = std::fs::remove_file(
            std::path::Path::new(&dir)
                .join(format!("tmux-{uid}"))
                .join(socket(self.0)),
        );
    }
}

/// Runs `accio report FIXTURE --out DIR` in a tmux pane `cols` wide (and once into
/// `screen.txt`, no terminal) and returns the pane's lines (see [`pane`]).
fn screen(cols: u16, out: &Path) -> String {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../report/tests/data/quick-run.json");
    let accio = env!("CARGO_BIN_EXE_accio");
    let script = format!(
        "{accio} report {f} --out {o} > {o}/screen.txt 2>&1; {accio} report {f} --out {o}",
        f = fixture.display(),
        o = out.display(),
    );
    pane("report", cols, &script, out)
}

/// Whether tmux is here; prints why the test is skipped where it is not.
fn have_tmux() -> bool {
    if Command::new("tmux").arg("-V").output().is_err() {
        if std::env::var_os("ACCIO_REQUIRE_PEER_TOOLS").is_some() {
            panic!("tmux is required (ACCIO_REQUIRE_PEER_TOOLS is set)");
        }
        println!("skipped: tmux is not installed");
        return false;
    }
    true
}

#[test]
fn headline_table_fits_80_and_120_columns() {
    if !have_tmux() {
        return;
    }
    let _server = Server("report");
    let out: PathBuf = std::env::temp_dir().join(format!("accio-term-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    // The same summary into a file: no terminal, whole rows.
    let mut wide_rows = 0;
    for cols in [80u16, 120] {
        let s = screen(cols, &out);
        let file = std::fs::read_to_string(out.join("screen.txt")).unwrap();
        wide_rows = file.lines().filter(|l| l.chars().count() > 120).count();
        let long: Vec<&str> = s
            .lines()
            .filter(|l| l.chars().count() > usize::from(cols))
            .collect();
        assert!(
            long.is_empty(),
            "{cols} columns: rows wrapped:\n{}",
            long.join("\n")
        );
        // Every headline figure is still on screen, whatever the layout.
        for what in ["shm latency, 8 B", "tcp stream, 2M", "memcpy"] {
            assert!(s.contains(what), "{cols} columns: {what} missing:\n{s}");
        }
    }
    assert!(
        wide_rows > 0,
        "the fixture's table should be wider than 120 columns in a file"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

/// Runs `script` (sh) in a detached tmux pane `cols` wide, on the test's own server
/// `tag`, with room for the whole run in its history; waits for it to touch `done` in
/// `out`; returns every line it left, wrapped lines joined (`capture-pane -J`), so a line
/// the terminal wrapped comes back longer than the pane.
fn pane(tag: &'static str, cols: u16, script: &str, out: &Path) -> String {
    let done = out.join("done");
    let _ = std::fs::remove_file(&done);
    let cmd = format!("{script}; touch {}; sleep 60", done.display());
    let ok = tmux_on(
        tag,
        &[
            "-f",
            "/dev/null",
            "start-server",
            ";",
            "set-option",
            "-g",
            "history-limit",
            "50000",
            ";",
            "new-session",
            "-d",
            "-s",
            tag,
            "-x",
            &cols.to_string(),
            "-y",
            "50",
            &cmd,
        ],
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let start = Instant::now();
    while !done.exists() && start.elapsed() < Duration::from_secs(40) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let cap = tmux_on(
        tag,
        &["capture-pane", "-p", "-J", "-t", tag, "-S", "-", "-E", "-"],
    );
    let _ = tmux_on(tag, &["kill-session", "-t", tag]);
    assert!(done.exists(), "the commands did not finish in the terminal");
    String::from_utf8(cap.stdout).unwrap()
}

#[test]
fn every_line_of_a_bench_demo_compare_info_and_help_fits_80_columns() {
    if !have_tmux() {
        return;
    }
    let _server = Server("lines");
    let out: PathBuf = std::env::temp_dir().join(format!("accio-lines-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let accio = env!("CARGO_BIN_EXE_accio");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../report/tests/data/quick-run.json");
    // The fs bench on /dev/shm: progress lines, its tables and a warning (fresh tmpfs pages)
    // in a few tens of milliseconds; a small laplace; the saved run against itself.
    let script = format!(
        "cd {dir}; \
         {accio} bench fs /dev/shm --quick --modes write --threads 1 --file-size 4M; \
         {accio} demo laplace --grid 64x64 --iters 6 --ranks 2; \
         {accio} compare {fixture} {fixture}; \
         {accio} info; \
         {accio} bench --help; {accio} bench transport --help; {accio} demo laplace --help",
        dir = out.display(),
        fixture = fixture.display(),
    );
    let screen = pane("lines", 80, &script, &out);
    let long: Vec<&str> = screen.lines().filter(|l| l.chars().count() > 80).collect();
    assert!(
        long.is_empty(),
        "lines wider than 80 columns:\n{}",
        long.join("\n")
    );
    // Each command's output is there, whatever its layout.
    for what in [
        "fs: warning: fs /dev/shm:",
        "Summary (after Colfax 2014, Table 1)",
        "rank 0",
        "digest of the final grid",
        "figures compared",
        "File systems",
        "--reps <N>",
        "--checked",
    ] {
        assert!(screen.contains(what), "{what} missing:\n{screen}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}
