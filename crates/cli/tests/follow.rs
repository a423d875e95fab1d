//! `accio inspect --follow`: a second process sees each block while the run goes on, and
//! stops when the writer closes the file.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use accio_bench::merge::service::{ContainerSink, Merger, Producer};

#[test]
fn inspect_follow_prints_blocks_during_the_run_and_ends_at_close() {
    let dir = std::env::temp_dir().join(format!("accio-cli-follow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("out.accio");
    let sink = ContainerSink::create(&path, Default::default()).unwrap();
    let merger = Merger::builder()
        .budget(4 << 20)
        .slot_bytes(1 << 20)
        .listen(
            &format!("shm://accio-cli-follow-{}", std::process::id()),
            Box::new(sink),
        )
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_accio"))
        .args(["inspect", "--follow", "--idle-exit", "30"])
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            tx.send(line.unwrap()).unwrap();
        }
    });
    let mut p = Producer::connect(&merger.addr().to_string()).unwrap();
    let mut lines = Vec::new();
    let next_line = |lines: &mut Vec<String>| {
        let l = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("a line from the follower");
        lines.push(l);
    };
    next_line(&mut lines); // the column names
    for seq in 0..5u64 {
        p.write_block(&vec![seq as u8; 100_000 + seq as usize])
            .unwrap();
        p.wait_acked().unwrap();
        // Seen by the other process before the next block is written.
        next_line(&mut lines);
        let cols: Vec<&str> = lines.last().unwrap().split('\t').collect();
        assert_eq!(cols[2], seq.to_string(), "{lines:?}");
        assert_eq!(cols[4], (100_000 + seq).to_string(), "{lines:?}");
    }
    p.finish().unwrap();
    merger.close().unwrap();
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    assert!(
        lines
            .last()
            .unwrap()
            .ends_with("closed; 5 block(s), 500010 bytes followed"),
        "{lines:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
