//! `accio bench device` and `accio info` on a machine without a usable GPU (CI's): one line
//! that says why, exit status 0, no figures. On a GPU machine they measure; this test then
//! says it skipped.

use std::process::Command;

fn accio(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_accio"))
        .args(args)
        .output()
        .expect("running accio")
}

#[test]
fn without_a_gpu_bench_device_says_why_in_one_line_and_exits_0() {
    let dir = tempfile_dir();
    let json = dir.join("device.json");
    let out = accio(&["bench", "device", "--json", json.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stderr.contains("device: skipped:") {
        eprintln!("skipped: a CUDA device is usable here");
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let line = stderr.trim();
    assert!(
        line.contains("no NVIDIA GPU on PCI")
            || line.contains("no CUDA driver")
            || line.contains("no CUDA device")
            || line.contains("built without the cuda feature"),
        "{line}"
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["figures"].as_array().map(Vec::len), Some(0));
    std::fs::remove_dir_all(&dir).ok();

    // Bad arguments are refused even where there is nothing to measure.
    let out = accio(&["bench", "device", "--sizes", "2G"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sizes"));
}

#[test]
fn info_says_there_are_no_gpus_in_one_line() {
    let out = accio(&["info"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines().skip_while(|l| *l != "GPUs");
    assert_eq!(lines.next(), Some("GPUs"), "{text}");
    let next = lines.next().unwrap_or_default();
    if next.starts_with("None") {
        assert_eq!(next, "None on PCI (no display-class device in sysfs).");
    } else {
        eprintln!("skipped: this machine has GPUs on PCI");
    }
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("accio-device-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
