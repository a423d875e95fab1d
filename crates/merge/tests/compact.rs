//! A merged file holds its data: its size is the data plus the container's own overhead
//! (`docs/FORMAT.md`, "Size"), whatever the block sizes and the write mode, and no room a
//! producer did not fill is allocated.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use accio_merge::container::{ContainerOptions, ContainerReader};
use accio_merge::{ContainerSink, Merger, Producer, WriteMode};

mod common;
use common::payload;

/// The size a closed container of these blocks must have at most: the file header's page,
/// each block's header and payload rounded up to the alignment, the index and trailer.
fn bound(align: u64, lens: &[u64]) -> u64 {
    let round = |x: u64| x.div_ceil(align) * align;
    let data: u64 = lens.iter().map(|&l| align + round(l)).sum();
    round(64) + data + 32 + 48 * lens.len() as u64 + 64
}

/// Folders on the file systems users merge into: the test folder (a local disk here) and
/// /dev/shm (tmpfs), where present.
fn folders(name: &str) -> Vec<PathBuf> {
    let mut v = vec![common::test_dir()];
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        let d = shm.join(format!("accio-compact-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        v.push(d);
    }
    v
}

/// Checks the closed file at `path` against the blocks written (`lens`, in any order):
/// whole, no holes, size within the bound, nothing allocated past it.
fn check(path: &Path, lens: &[u64]) {
    let r = ContainerReader::open(path).unwrap();
    let v = r.verify().unwrap();
    assert!(v.is_whole(), "{}: {:?}", path.display(), v.problems);
    assert!(
        v.holes.is_empty(),
        "{}: {} hole(s) where nothing went missing: {:?}",
        path.display(),
        v.holes.len(),
        &v.holes[..v.holes.len().min(8)]
    );
    assert_eq!(v.blocks, lens.len() as u64);
    assert_eq!(v.bytes, lens.iter().sum::<u64>());
    let meta = std::fs::metadata(path).unwrap();
    let max = bound(4096, lens);
    assert!(
        meta.len() <= max,
        "{}: {} bytes for {} bytes of data (at most {max})",
        path.display(),
        meta.len(),
        v.bytes
    );
    // Allocated: at most the size rounded to the file system's block, and one block more
    // (a file system may keep the last one whole).
    let allocated = meta.blocks() * 512;
    let fs_block = meta.blksize().max(4096);
    assert!(
        allocated <= max.div_ceil(fs_block) * fs_block + fs_block,
        "{}: {allocated} bytes allocated for a file of {} (at most {max})",
        path.display(),
        meta.len()
    );
}

fn merger(addr: &str, path: &Path, slot: usize, mode: WriteMode) -> Merger {
    let sink = ContainerSink::create(path, ContainerOptions::default()).unwrap();
    Merger::builder()
        .budget(64 * slot)
        .slot_bytes(slot)
        .write_mode(mode)
        .listen(addr, Box::new(sink))
        .unwrap()
}

/// The first case: 100 blocks of 8,000 bytes from one producer (Python's
/// `Producer.write` does this), default 2 MiB slots.
#[test]
fn one_producer_of_small_blocks_gives_a_file_of_their_size() {
    for (i, dir) in folders("one").into_iter().enumerate() {
        for mode in [WriteMode::Auto, WriteMode::Copy] {
            let path = dir.join(format!("small-{}.accio", mode.name()));
            let addr = format!(
                "shm://accio-compact-{}-{i}-{}",
                std::process::id(),
                mode.name()
            );
            let m = merger(&addr, &path, 2 << 20, mode);
            let mut p = Producer::connect(&addr).unwrap();
            for seq in 0..100 {
                p.write_block(&payload(0, seq, 8000)).unwrap();
            }
            p.finish().unwrap();
            m.close().unwrap();
            check(&path, &[8000; 100]);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// The second case, scaled down: threads each filling buffers and committing
/// them short (`TParallelMergingFile::Write`: whatever was filled), with sizes that vary,
/// so rooms asked for one size get blocks of another.
#[test]
fn threads_committing_short_buffers_give_a_file_of_their_size() {
    const THREADS: u32 = 4;
    let len_of = |p: u32, seq: u64| -> usize {
        [16_000, 16_000, 16_000, 3, 100_000, 256 << 10, 0, 40_000]
            [((seq + u64::from(p)) % 8) as usize]
    };
    for (i, dir) in folders("threads").into_iter().enumerate() {
        let path = dir.join("threads.accio");
        let addr = format!("shm://accio-compact-{}-t{i}", std::process::id());
        let m = merger(&addr, &path, 256 << 10, WriteMode::Auto);
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let addr = addr.clone();
                std::thread::spawn(move || {
                    let mut p = common::connect_as(&addr, t);
                    let mut lens = Vec::new();
                    for seq in 0..60u64 {
                        let data = payload(t, seq, len_of(t, seq));
                        if seq % 3 == 0 {
                            p.write_block(&data).unwrap();
                        } else {
                            let mut b = p.buffer().unwrap();
                            b.as_mut_slice()[..data.len()].copy_from_slice(&data);
                            b.commit(data.len()).unwrap();
                        }
                        lens.push(data.len() as u64);
                    }
                    p.finish().unwrap();
                    lens
                })
            })
            .collect();
        let lens: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        m.close().unwrap();
        check(&path, &lens);
        let r = ContainerReader::open(&path).unwrap();
        for b in r.blocks() {
            let (p, seq) = (b.header.producer, b.header.seq);
            assert_eq!(r.read_payload(b).unwrap(), payload(p, seq, len_of(p, seq)));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
