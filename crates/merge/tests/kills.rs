//! Random SIGKILLs of the merger or of producers during runs, with a follower reading the
//! file all along. After every run: no block the merger acknowledged is lost, no torn
//! block passes `verify` as whole (every payload is compared with what its producer
//! wrote), and every block the follower returned is one the recovered file keeps.
//!
//! `ACCIO_MERGE_KILLS` sets how many kills (default 20, the CI size; `scripts/kill-merge.sh`
//! runs 200), `ACCIO_MERGE_KILL_SEED` the random seed (printed, to replay a failure).
//! Runs alternate between producers writing in place and the copying merger; every other
//! in-place run writes into /dev/shm (tmpfs), where the producers, writing beside each
//! other, insert their pages (`UFFDIO_COPY`) instead of `pwrite`-ing them. Those runs have
//! 1 MiB slots, and in every other one of them the producers split each whole-slot block
//! between a `pwrite` and a helper thread inserting pages (as a lone producer does), so
//! kills land in that too.
//!
//! Child processes are this test binary re-run on the ignored test `kill_child`, with
//! `ACCIO_MERGE_CHILD` naming the role.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use accio_merge::container::{recover, ContainerReader, Follower, IndexEntry};
use accio_merge::{ContainerSink, Merger, SyncPolicy, WriteMode};

mod common;
use common::{connect_as, payload, test_dir, userfaultfd_available};

/// The slot size: 1 MiB on tmpfs (`big`), where whole-slot blocks can be split, else
/// 64 KiB.
fn slot(big: bool) -> usize {
    if big {
        1 << 20
    } else {
        64 << 10
    }
}

/// Payload length of block `seq`: varied, every seventh a whole slot, the others short
/// (rooms get tails).
fn len_of(p: u32, seq: u64, big: bool) -> usize {
    if seq % 7 == 3 {
        return slot(big);
    }
    1 + ((seq.wrapping_mul(7919) + u64::from(p) * 104_729) % (16 << 10)) as usize
}

/// xorshift64*: enough randomness for kill times, reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
#[ignore = "entry point of the child processes of the kill test"]
fn kill_child() {
    let var = |k: &str| std::env::var(k).unwrap();
    let big = var("BIG") == "1";
    match var("ACCIO_MERGE_CHILD").as_str() {
        // A merger into PATH_OUT; closes once PRODUCERS producers are done (or lost).
        "merger" => {
            let sink = ContainerSink::create(var("PATH_OUT"), Default::default()).unwrap();
            let m = Merger::builder()
                .budget(8 * slot(big))
                .slot_bytes(slot(big))
                .sync(SyncPolicy::Never)
                .write_mode(var("MODE").parse().unwrap())
                .on_event(|_| {})
                .listen(&var("ADDR"), Box::new(sink))
                .unwrap();
            println!("CHILD:ready");
            // Closes when the test says so (every producer process has exited by then).
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).unwrap();
            m.close_within(Duration::from_secs(5)).unwrap();
            println!("CHILD:closed");
        }
        // Writes BLOCKS blocks, printing each acknowledgement count as it grows.
        "producer" => {
            let id: u32 = var("ID").parse().unwrap();
            let blocks: u64 = var("BLOCKS").parse().unwrap();
            let mut p = connect_as(&var("ADDR"), id);
            let mut told = 0;
            let mut out = std::io::stdout();
            writeln!(out, "UP").unwrap();
            for seq in 0..blocks {
                if p.write_block(&payload(id, seq, len_of(id, seq, big)))
                    .is_err()
                {
                    break;
                }
                // Paced, so that runs last long enough for kills to land mid-run.
                std::thread::sleep(Duration::from_micros(300));
                if p.acked() > told {
                    told = p.acked();
                    writeln!(out, "ACK {told}").unwrap();
                }
            }
            if let Ok(n) = p.wait_acked() {
                writeln!(out, "ACK {n}").unwrap();
                if let Ok(s) = p.finish() {
                    writeln!(out, "DONE {}", s.inserted_blocks).unwrap();
                }
            }
            out.flush().unwrap();
        }
        _ => {}
    }
}

/// A child process whose output lines arrive on a channel.
struct Kid {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Kid {
    fn spawn(role: &str, env: &[(&str, String)]) -> Kid {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "kill_child", "--ignored", "--nocapture"])
            .env("ACCIO_MERGE_CHILD", role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines() {
                let Ok(l) = l else { break };
                // The harness may have printed "test kill_child ... " on the same line.
                let l = l.rsplit("... ").next().unwrap_or("").trim().to_string();
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Kid { child, lines }
    }

    fn expect(&mut self, what: &str) {
        let want = format!("CHILD:{what}");
        loop {
            let l = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("child never said {what}"));
            if l.ends_with(&want) {
                return;
            }
        }
    }

    fn kill9(&mut self) {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one run ended with.
struct Outcome {
    kills: usize,
}

/// What the producer processes said: per producer, blocks acknowledged, whether it
/// finished and how many of its blocks it inserted, whether it started.
struct Seen {
    acked: Vec<u64>,
    done: Vec<bool>,
    inserted: Vec<u64>,
    up: Vec<bool>,
}

impl Seen {
    fn new(producers: usize) -> Seen {
        Seen {
            acked: vec![0; producers],
            done: vec![false; producers],
            inserted: vec![0; producers],
            up: vec![false; producers],
        }
    }

    fn absorb(&mut self, kids: &mut [Kid]) {
        for (i, k) in kids.iter_mut().enumerate() {
            while let Ok(l) = k.lines.try_recv() {
                if let Some(n) = l.strip_prefix("ACK ") {
                    self.acked[i] = self.acked[i].max(n.parse().unwrap());
                } else if let Some(n) = l.strip_prefix("DONE ") {
                    self.done[i] = true;
                    self.inserted[i] = n.parse().unwrap();
                } else if l == "UP" {
                    self.up[i] = true;
                }
            }
        }
    }
}

fn one_run(run: usize, rng: &mut Rng) -> Outcome {
    let mode = if run.is_multiple_of(2) {
        WriteMode::Direct
    } else {
        WriteMode::Copy
    };
    let shm = std::path::Path::new("/dev/shm");
    let on_tmpfs = run.is_multiple_of(4) && shm.is_dir();
    let dir = if on_tmpfs {
        shm.to_path_buf()
    } else {
        test_dir()
    };
    let path = dir.join(format!(
        "accio-merge-kills-{}-run-{run}.accio",
        std::process::id()
    ));
    let big = on_tmpfs;
    // Every other tmpfs run: whole-slot blocks split, however many producers are left.
    let split = on_tmpfs && run.is_multiple_of(8);
    let label = format!(
        "{}{}",
        mode.name(),
        match (on_tmpfs, split) {
            (true, true) => " on tmpfs, split",
            (true, false) => " on tmpfs",
            _ => "",
        }
    );
    let addr = format!("shm://accio-merge-kills-{}-{run}", std::process::id());
    let producers = 4u32;
    let blocks = 300u64;
    let mut merger = Kid::spawn(
        "merger",
        &[
            ("ADDR", addr.clone()),
            ("PATH_OUT", path.display().to_string()),
            ("MODE", mode.name().to_string()),
            ("BIG", u8::from(big).to_string()),
        ],
    );
    merger.expect("ready");
    // The follower reads the file from the start of the run to its end.
    let stop = Arc::new(AtomicBool::new(false));
    let followed = Arc::new(Mutex::new(Vec::<IndexEntry>::new()));
    let follower = {
        let (stop, followed, path) = (stop.clone(), followed.clone(), path.clone());
        std::thread::spawn(move || {
            let mut f = Follower::open(&path, Duration::from_secs(10)).unwrap();
            loop {
                let last_look = stop.load(Ordering::SeqCst);
                while let Some((b, data)) = f.try_next().unwrap() {
                    assert_eq!(
                        data,
                        payload(
                            b.header.producer,
                            b.header.seq,
                            len_of(b.header.producer, b.header.seq, big)
                        ),
                        "the follower returned a block with wrong bytes"
                    );
                    followed.lock().unwrap().push(b);
                }
                if last_look || f.is_closed() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let mut kids: Vec<Kid> = (0..producers)
        .map(|id| {
            Kid::spawn(
                "producer",
                &[
                    ("ADDR", addr.clone()),
                    ("ID", id.to_string()),
                    ("BLOCKS", blocks.to_string()),
                    ("BIG", u8::from(big).to_string()),
                    (
                        "ACCIO_MERGE_IN_PLACE",
                        (if split { "split" } else { "auto" }).into(),
                    ),
                ],
            )
        })
        .collect();
    // The plan: the merger (one run in three), or one or two producers, at random times.
    let kill_merger = rng.below(3) == 0;
    let victims: BTreeSet<u32> = if kill_merger {
        BTreeSet::new()
    } else {
        (0..=rng.below(2))
            .map(|_| rng.below(u64::from(producers)) as u32)
            .collect()
    };
    let mut seen = Seen::new(producers as usize);
    let start = Instant::now();
    let mut kills = 0;
    let kill_at: Vec<Duration> = (0..victims.len().max(1))
        .map(|_| Duration::from_millis(5 + rng.below(80)))
        .collect();
    let mut sorted = kill_at.clone();
    sorted.sort();
    for (k, at) in sorted.iter().enumerate() {
        while start.elapsed() < *at {
            seen.absorb(&mut kids);
            std::thread::sleep(Duration::from_millis(1));
        }
        seen.absorb(&mut kids);
        // Only a kill that lands while its victim is at work counts.
        if kill_merger {
            if (0..seen.up.len()).any(|i| seen.up[i] && !seen.done[i]) {
                kills += 1;
            }
            merger.kill9();
        } else {
            let v = *victims.iter().nth(k).unwrap() as usize;
            if seen.up[v] && !seen.done[v] {
                kills += 1;
            }
            kids[v].kill9();
        }
    }
    // Let everyone else finish (or fail, the merger being dead), then read what they said.
    for k in kids.iter_mut() {
        let _ = k.child.wait();
    }
    std::thread::sleep(Duration::from_millis(20));
    seen.absorb(&mut kids);
    if !kill_merger {
        let stdin = merger.child.stdin.as_mut().unwrap();
        writeln!(stdin, "close").unwrap();
        merger.expect("closed");
        let _ = merger.child.wait();
    }
    stop.store(true, Ordering::SeqCst);
    follower.join().unwrap();

    if kill_merger {
        recover(&path).unwrap();
    }
    let r = ContainerReader::open(&path).unwrap();
    let v = r.verify().unwrap();
    assert!(
        v.is_whole(),
        "run {run} ({}): {:?}",
        mode.name(),
        v.problems
    );
    let mut have: BTreeMap<u32, u64> = BTreeMap::new();
    for b in r.blocks() {
        let (p, seq) = (b.header.producer, b.header.seq);
        // Whole means whole: the bytes are the ones the producer wrote.
        assert_eq!(
            r.read_payload(b).unwrap(),
            payload(p, seq, len_of(p, seq, big)),
            "run {run}: block {seq} of producer {p} verified whole with wrong bytes"
        );
        *have.entry(p).or_default() += 1;
    }
    for (p, &n) in seen.acked.iter().enumerate() {
        let got = have.get(&(p as u32)).copied().unwrap_or(0);
        assert!(
            got >= n,
            "run {run} ({}): producer {p} had {n} blocks acknowledged, the file keeps {got}",
            mode.name()
        );
        if seen.done[p] {
            assert_eq!(got, blocks, "run {run}: producer {p} finished");
        }
    }
    // By identity and checksum, not offset: closing compacts the file, so a block the
    // follower read where it was written may lie lower in the final file.
    let kept: BTreeSet<(u32, u64, u64, u32)> = r
        .blocks()
        .iter()
        .map(|b| {
            (
                b.header.producer,
                b.header.seq,
                b.header.len,
                b.header.payload_crc,
            )
        })
        .collect();
    for b in followed.lock().unwrap().iter() {
        let h = &b.header;
        assert!(
            kept.contains(&(h.producer, h.seq, h.len, h.payload_crc)),
            "run {run} ({}): the follower returned block {} of producer {} (read at {:#x}), \
             which the recovered file does not keep",
            mode.name(),
            h.seq,
            h.producer,
            b.offset
        );
    }
    // In the split runs, each producer that finished split every whole-slot block.
    if split && userfaultfd_available() {
        let whole = (0..blocks).filter(|s| s % 7 == 3).count() as u64;
        for (p, &n) in seen.inserted.iter().enumerate() {
            assert!(
                !seen.done[p] || n == whole,
                "run {run}: producer {p} inserted {n} blocks, not its {whole} whole-slot ones"
            );
        }
    }
    std::fs::remove_file(&path).unwrap();
    eprintln!(
        "run {run} ({label}): {} killed, {kills} mid-run; acknowledged {:?}, kept {have:?}, \
         inserted {:?}, followed {}",
        if kill_merger {
            "merger".to_string()
        } else {
            format!("producers {victims:?}")
        },
        seen.acked,
        seen.inserted,
        followed.lock().unwrap().len()
    );
    Outcome { kills }
}

#[test]
fn random_kills_lose_no_acknowledged_block_and_pass_no_torn_one() {
    let want: usize = std::env::var("ACCIO_MERGE_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let seed = std::env::var("ACCIO_MERGE_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("kill test: {want} kills, ACCIO_MERGE_KILL_SEED={seed}");
    let mut rng = Rng(seed);
    let (mut kills, mut run) = (0, 0);
    while kills < want {
        kills += one_run(run, &mut rng).kills;
        run += 1;
    }
    eprintln!("kill test: {kills} kills in {run} runs, every check held");
    let _ = std::fs::remove_dir_all(test_dir());
}
