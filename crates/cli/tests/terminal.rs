//! The headline table in a real terminal (tmux) of 80 and 120 columns: no row wrapped by the
//! terminal, every figure still there. `accio report` prints the summary of a saved run, so
//! the text is the same on every machine. Skipped with a message where tmux is missing (CI
//! installs it).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// tmux on a server of this test's own (`-L`): the user's server, or another test run's
/// being shut down beside it, cannot get in the way ("server exited unexpectedly").
fn tmux(args: &[&str]) -> std::process::Output {
    Command::new("tmux")
        .args(["-L", &socket()])
        .args(args)
        .output()
        .unwrap()
}

fn socket() -> String {
    format!("accio-test-{}", std::process::id())
}

/// Ends this test's tmux server (and removes its socket) when dropped.
struct Server;

impl Drop for Server {
    fn drop(&mut self) {
        let _ = tmux(&["kill-server"]);
        // tmux leaves the socket file of a server whose last session ended.
        let dir = std::env::var_os("TMUX_TMPDIR").unwrap_or_else(|| "/tmp".into());
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let _ = std::fs::remove_file(
            std::path::Path::new(&dir)
                .join(format!("tmux-{uid}"))
                .join(socket()),
        );
    }
}

/// Runs `accio report FIXTURE --out DIR` in a detached tmux session `cols` wide and returns
/// the screen with wrapped lines joined (`capture-pane -J`), so a row the terminal wrapped
/// comes back as one line longer than the terminal.
fn screen(cols: u16, out: &Path) -> String {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../report/tests/data/quick-run.json");
    let session = format!("accio-term-{}-{cols}", std::process::id());
    let done = out.join("done");
    let _ = std::fs::remove_file(&done);
    let cmd = format!(
        "{} report {} --out {} > {}/screen.txt 2>&1; {} report {} --out {}; touch {}; sleep 30",
        env!("CARGO_BIN_EXE_accio"),
        fixture.display(),
        out.display(),
        out.display(),
        env!("CARGO_BIN_EXE_accio"),
        fixture.display(),
        out.display(),
        done.display()
    );
    let ok = tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        &cols.to_string(),
        "-y",
        "200",
        &cmd,
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let start = Instant::now();
    while !done.exists() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let cap = tmux(&["capture-pane", "-p", "-J", "-t", &session, "-S", "0"]);
    let _ = tmux(&["kill-session", "-t", &session]);
    assert!(done.exists(), "accio report did not finish in the terminal");
    String::from_utf8(cap.stdout).unwrap()
}

#[test]
fn headline_table_fits_80_and_120_columns() {
    if Command::new("tmux").arg("-V").output().is_err() {
        if std::env::var_os("ACCIO_REQUIRE_PEER_TOOLS").is_some() {
            panic!("tmux is required (ACCIO_REQUIRE_PEER_TOOLS is set)");
        }
        println!("skipped: tmux is not installed");
        return;
    }
    let _server = Server;
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
