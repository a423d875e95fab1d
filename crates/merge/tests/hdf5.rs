//! The HDF5 sink, checked with h5py: mid-run (while the merger holds the file open), after
//! close, and after the merger was killed with SIGKILL.
//!
//! Skipped with a message where python3 or h5py is missing, unless
//! `ACCIO_REQUIRE_PEER_TOOLS=1` (`ci/hdf5.sh`) makes a missing tool a failure.
#![cfg(feature = "hdf5")]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use accio_merge::{Hdf5Sink, Merger, Producer, SyncPolicy};

mod common;
use common::{connect_as, payload, test_dir};

/// Length of block `seq` of producer `p`: varied, 0 included.
fn len_of(p: u32, seq: u64) -> usize {
    ((seq * 7919 + u64::from(p) * 131) % 40_000) as usize
}

/// Reads the file at argv[1] with h5py, checks every listed block's bytes against the
/// producers' pattern (`payload` in tests/common), prints the number of blocks.
const CHECK: &str = r#"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
assert f.attrs["accio_layout"] == "blocks-v1"
b = f["blocks"][:]
d = f["data"]
seen = {}
for p, seq, kind, off, ln in b.tolist():
    i = np.arange(ln, dtype=np.uint64)
    want = (((i ^ np.uint64(seq << 8) ^ np.uint64(p << 16)) * np.uint64(0x9E37)) & np.uint64(0xFF)).astype(np.uint8)
    got = d[off:off + ln]
    assert (got == want).all(), "block %d of producer %d" % (seq, p)
    assert kind == 0
    seen.setdefault(p, []).append(seq)
for p, s in seen.items():
    assert s == list(range(len(s))), "producer %d out of order" % p
print(len(b))
"#;

/// Runs CHECK on `path` with file locking off (the writer holds the lock mid-run); the
/// number of blocks h5py read, or `None` if the tools are missing and not required.
fn h5py_blocks(path: &Path) -> Option<u64> {
    let require = std::env::var("ACCIO_REQUIRE_PEER_TOOLS").is_ok_and(|v| v == "1");
    let probe = Command::new("python3")
        .args(["-c", "import h5py, numpy"])
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        assert!(
            !require,
            "python3 with h5py is required (ACCIO_REQUIRE_PEER_TOOLS=1); run ci/hdf5.sh"
        );
        eprintln!("skipped: python3 with h5py not found (run ci/hdf5.sh)");
        return None;
    }
    let out = Command::new("python3")
        .args(["-c", CHECK])
        .arg(path)
        .env("HDF5_USE_FILE_LOCKING", "FALSE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "h5py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap(),
    )
}

#[test]
fn hdf5_output_reads_in_h5py_during_the_run_and_after_close() {
    let path = test_dir().join("out.h5");
    let merger = Merger::builder()
        .budget(4 << 20)
        .slot_bytes(64 << 10)
        .listen(
            &format!("shm://accio-merge-h5-{}", std::process::id()),
            Box::new(Hdf5Sink::create(&path).unwrap()),
        )
        .unwrap();
    let a = merger.addr().to_string();
    let (producers, rounds, per_round) = (3u32, 3u64, 4u64);
    let mut ps: Vec<Producer> = (0..producers).map(|id| connect_as(&a, id)).collect();
    for round in 0..rounds {
        for (id, p) in ps.iter_mut().enumerate() {
            for seq in round * per_round..(round + 1) * per_round {
                p.write_block(&payload(id as u32, seq, len_of(id as u32, seq)))
                    .unwrap();
            }
            p.wait_acked().unwrap();
        }
        // Mid-run: every acknowledged block is there.
        if let Some(n) = h5py_blocks(&path) {
            assert_eq!(n, u64::from(producers) * (round + 1) * per_round);
        }
    }
    for p in ps {
        p.finish().unwrap();
    }
    let s = merger.close().unwrap();
    let total = u64::from(producers) * rounds * per_round;
    assert_eq!(s.sink.blocks, total);
    if let Some(n) = h5py_blocks(&path) {
        assert_eq!(n, total);
    }
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
#[ignore = "entry point of the merger process of the crash test"]
fn hdf5_merger_child() {
    let var = |k: &str| std::env::var(k).unwrap();
    let m = Merger::builder()
        .budget(4 << 20)
        .slot_bytes(64 << 10)
        .sync(SyncPolicy::Never)
        .listen(
            &var("ADDR"),
            Box::new(Hdf5Sink::create(var("PATH_OUT")).unwrap()),
        )
        .unwrap();
    println!("CHILD:ready");
    std::thread::sleep(Duration::from_secs(60));
    drop(m);
}

#[test]
fn hdf5_output_reads_in_h5py_after_the_merger_is_killed() {
    use std::io::{BufRead, BufReader};
    let path = test_dir().join("killed.h5");
    let addr = format!("shm://accio-merge-h5k-{}", std::process::id());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "hdf5_merger_child", "--ignored", "--nocapture"])
        .env("ADDR", &addr)
        .env("PATH_OUT", &path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.trim_end().ends_with("CHILD:ready") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the merger exited");
    }
    let (producers, blocks) = (3u32, 10u64);
    let mut ps: Vec<Producer> = (0..producers).map(|id| connect_as(&addr, id)).collect();
    for (id, p) in ps.iter_mut().enumerate() {
        for seq in 0..blocks {
            p.write_block(&payload(id as u32, seq, len_of(id as u32, seq)))
                .unwrap();
        }
        assert_eq!(p.wait_acked().unwrap(), blocks);
    }
    // SIGKILL with every block acknowledged (flushed): h5py reads them all.
    child.kill().unwrap();
    child.wait().unwrap();
    if let Some(n) = h5py_blocks(&path) {
        assert_eq!(n, u64::from(producers) * blocks);
    }
    drop(ps);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}
