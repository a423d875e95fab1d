//! The `accio` binary's exports and exit codes, as a user or a CI job meets them: `--json -`
//! on stdout (and no file named `-`), `--export-csv` / `--export-markdown`, `--strict`, and
//! 2 for a usage error.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A fresh working directory for one test, removed at the end.
struct Cwd(PathBuf);

impl Cwd {
    fn new(name: &str) -> Cwd {
        let d = std::env::temp_dir().join(format!("accio-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Cwd(d)
    }

    fn accio(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_accio"))
            .args(args)
            .current_dir(&self.0)
            .output()
            .unwrap()
    }
}

impl Drop for Cwd {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const MEM: [&str; 8] = [
    "bench",
    "mem",
    "--sizes",
    "64K",
    "--threads",
    "1",
    "--samples",
    "3",
];

#[test]
fn json_dash_goes_to_stdout_and_nothing_else_does() {
    let cwd = Cwd::new("json");
    let out = cwd.accio(&[&MEM[..], &["--json", "-"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["schema"], "accio-results");
    assert_eq!(v["figures"].as_array().unwrap().len(), 1);
    assert_eq!(v["figures"][0]["metric"], "memcpy");
    assert!(!cwd.0.join("-").exists(), "a file named - was created");
}

#[test]
fn csv_and_markdown_exports_hold_the_figures() {
    let cwd = Cwd::new("csv");
    let out = cwd.accio(
        &[
            &MEM[..],
            &["--export-csv", "-", "--export-markdown", "r.md"],
        ]
        .concat(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2, "{csv}");
    assert!(
        lines[0].starts_with("bench,metric,label,unit,median"),
        "{csv}"
    );
    assert!(
        lines[1].starts_with("mem,memcpy,mem memcpy 64K x1,GB/s,"),
        "{csv}"
    );
    let md = std::fs::read_to_string(cwd.0.join("r.md")).unwrap();
    assert!(md.starts_with("# ") && md.contains("## Memory"), "{md}");
}

#[test]
fn strict_fails_a_run_with_warnings_and_usage_errors_exit_2() {
    let cwd = Cwd::new("strict");
    let dir = cwd.0.join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap();
    // One repeat is always warned about: min and max say little below 3.
    let fs = [
        "bench",
        "fs",
        dir,
        "--file-size",
        "1M",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--modes",
        "write",
    ];
    let plain = cwd.accio(&fs);
    assert_eq!(
        plain.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let strict = cwd.accio(&[&fs[..], &["--strict"]].concat());
    assert_eq!(strict.status.code(), Some(1));
    let err = String::from_utf8_lossy(&strict.stderr);
    assert!(err.contains("--strict"), "{err}");
    let usage = cwd.accio(&["bench", "mem", "--no-such-flag"]);
    assert_eq!(usage.status.code(), Some(2));
}
