use super::*;

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "accio-merge-ct-{}-{}",
        std::process::id(),
        std::thread::current()
            .name()
            .unwrap_or("t")
            .replace("::", "-")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn payload(p: u32, seq: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64 * 31 + seq * 7 + u64::from(p) * 13) as u8)
        .collect()
}

/// Three producers, interleaved blocks of assorted sizes; returns (producer, seq, len).
fn write_sample(path: &std::path::Path, align: u32) -> Vec<(u32, u64, usize)> {
    let w = ContainerWriter::create(path, ContainerOptions { align }).unwrap();
    let mut written = Vec::new();
    let sizes = [0usize, 1, 63, 64, 4095, 4096, 4097, 70_000];
    for (i, &len) in sizes.iter().enumerate() {
        for p in 0..3u32 {
            let seq = i as u64;
            let kind = if p == 1 {
                BlockKind::Records
            } else {
                BlockKind::Raw
            };
            let e = w.append(p, seq, kind, &payload(p, seq, len)).unwrap();
            assert_eq!(e.offset % u64::from(align), 0);
            written.push((p, seq, len));
        }
    }
    let s = w.finish(false).unwrap();
    assert_eq!(s.blocks, written.len() as u64);
    assert_eq!(std::fs::metadata(path).unwrap().len(), s.file_bytes);
    written
}

fn check_blocks(r: &ContainerReader, expect: &[(u32, u64, usize)]) {
    let got: Vec<_> = r
        .blocks()
        .iter()
        .map(|b| (b.header.producer, b.header.seq, b.header.len as usize))
        .collect();
    assert_eq!(got, expect);
    for b in r.blocks() {
        let data = r.read_payload(b).unwrap();
        assert_eq!(
            data,
            payload(b.header.producer, b.header.seq, b.header.len as usize)
        );
    }
}

#[test]
fn closed_file_reads_through_its_index_and_verifies_whole() {
    for align in [64, 4096] {
        let path = tmp(&format!("closed-{align}"));
        let written = write_sample(&path, align);
        let r = ContainerReader::open(&path).unwrap();
        assert_eq!(
            r.layout(),
            &Layout::Indexed {
                clean: true,
                data_end: r.blocks().last().unwrap().end(align)
            }
        );
        check_blocks(&r, &written);
        let v = r.verify().unwrap();
        assert!(v.is_whole(), "{:?}", v.problems);
        assert_eq!(v.producers[&1].blocks, 8);
        assert_eq!(
            v.producers[&2].bytes,
            written.iter().map(|w| w.2 as u64).sum::<u64>() / 3
        );
        if align == 4096 {
            // Payloads are page-aligned in the file.
            assert!(r
                .blocks()
                .iter()
                .all(|b| b.payload_offset(align) % 4096 == 0));
        }
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}

#[test]
fn file_cut_at_any_point_keeps_every_complete_block() {
    let path = tmp("cut");
    let written = write_sample(&path, 64);
    let full = std::fs::read(&path).unwrap();
    let complete = ContainerReader::open(&path).unwrap().blocks().to_vec();
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    // Every cut point inside the data area, in steps that hit headers, payloads, padding.
    let data_end = complete.last().unwrap().end(64);
    for cut in (64..=data_end as usize + 70).step_by(37) {
        let r = ContainerReader::from_bytes(full[..cut].to_vec()).unwrap();
        let expect: Vec<_> = complete
            .iter()
            .zip(&written)
            .filter(|(b, _)| b.payload_offset(64) + b.header.len <= cut as u64)
            .map(|(_, w)| *w)
            .collect();
        check_blocks(&r, &expect);
        let v = r.verify().unwrap();
        assert!(!v.is_whole(), "cut at {cut} must not verify whole");
        assert_eq!(v.blocks as usize, expect.len());
    }
}

#[test]
fn recover_adds_an_index_and_then_the_file_verifies_whole() {
    let path = tmp("recover");
    let written = write_sample(&path, 4096);
    let r = ContainerReader::open(&path).unwrap();
    let data_end = r.blocks().last().unwrap().end(4096);
    // Crash: no index, and half of a further block.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(data_end).unwrap();
    drop(f);
    let w_extra = {
        let mut bytes = std::fs::read(&path).unwrap();
        let h = BlockHeader {
            producer: 0,
            kind: BlockKind::Raw,
            seq: 8,
            len: 10_000,
            payload_crc: 1,
        };
        bytes.extend_from_slice(&h.encode());
        bytes.resize(bytes.len() + 4096 - 64 + 3000, 0xAB);
        bytes
    };
    std::fs::write(&path, &w_extra).unwrap();
    let before = ContainerReader::open(&path).unwrap();
    assert!(matches!(before.layout(), Layout::Scanned { .. }));
    let v = before.verify().unwrap();
    assert!(!v.is_whole());
    assert!(v.problems[0].contains("not closed"), "{:?}", v.problems);
    let rec = recover(&path).unwrap();
    assert!(!rec.already_whole);
    assert_eq!(rec.blocks, written.len() as u64);
    assert_eq!(rec.truncated_bytes, w_extra.len() as u64 - data_end);
    assert!(rec.damage.is_empty());
    let after = ContainerReader::open(&path).unwrap();
    assert_eq!(
        after.layout(),
        &Layout::Indexed {
            clean: false,
            data_end
        }
    );
    check_blocks(&after, &written);
    assert!(after.verify().unwrap().is_whole());
    assert!(recover(&path).unwrap().already_whole);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn damaged_block_in_the_middle_is_skipped_and_reported() {
    let path = tmp("damaged");
    let written = write_sample(&path, 64);
    let r = ContainerReader::open(&path).unwrap();
    let victim = r.blocks()[10];
    let mut bytes = std::fs::read(&path).unwrap();
    // Flip a payload byte: the header is fine, the checksum is not.
    bytes[victim.payload_offset(64) as usize] ^= 0xFF;
    let r = ContainerReader::from_bytes(bytes.clone()).unwrap();
    let v = r.verify().unwrap();
    assert!(!v.is_whole());
    assert!(v
        .problems
        .iter()
        .any(|p| p.contains("payload checksum mismatch")));
    assert!(v
        .problems
        .iter()
        .any(|p| p.contains("index lists 24 blocks")));
    assert!(v
        .problems
        .iter()
        .any(|p| p.contains(&format!("producer {}", victim.header.producer))));
    // Destroy a header instead: the scan finds the next block by its magic.
    bytes[victim.payload_offset(64) as usize] ^= 0xFF;
    bytes[victim.offset as usize + 9] ^= 0xFF;
    let len = bytes.len();
    bytes.truncate(len - 64); // and lose the trailer
    let r = ContainerReader::from_bytes(bytes).unwrap();
    let expect: Vec<_> = written
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 10)
        .map(|(_, w)| *w)
        .collect();
    check_blocks(&r, &expect);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn records_split_and_reject_a_lying_length() {
    let mut p = Vec::new();
    for r in [&b"ab"[..], b"", b"xyz"] {
        p.extend_from_slice(&(r.len() as u32).to_le_bytes());
        p.extend_from_slice(r);
    }
    assert_eq!(
        split_records(&p).unwrap(),
        vec![&b"ab"[..], &b""[..], &b"xyz"[..]]
    );
    p[6] = 200;
    assert!(split_records(&p)
        .unwrap_err()
        .contains("declares 200 bytes"));
}

#[test]
fn garbage_is_refused_with_a_reason_not_a_panic() {
    let e = ContainerReader::from_bytes(b"hello".to_vec()).unwrap_err();
    assert!(e.to_string().contains("shorter than"), "{e}");
    let e = ContainerReader::from_bytes(vec![7u8; 200]).unwrap_err();
    assert!(e.to_string().contains("bad magic"), "{e}");
}

/// Reserves a 64 KiB room, writes `payload(0, seq, len)` into it as a producer in place
/// would (`pwrite` at the payload offset) and commits it.
fn reserve_write_commit(w: &ContainerWriter, seq: u64, len: usize) -> crate::Result<()> {
    write_in_room(w, 64 << 10, seq, len).map(|_| ())
}

/// [`reserve_write_commit`] into a room of `room` payload bytes (its rest a hole); returns
/// where the block starts.
fn write_in_room(w: &ContainerWriter, room: u64, seq: u64, len: usize) -> crate::Result<u64> {
    use std::os::unix::fs::FileExt;
    let start = w.reserve(room)?;
    let at = block_extent(start, 0, w.align()).0;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(w.path())
        .unwrap();
    // Inside room the writer claimed: never short of space.
    f.write_all_at(&payload(0, seq, len), at).unwrap();
    let crc = crate::checksum::crc32c(&payload(0, seq, len));
    w.commit_reserved(
        start,
        room,
        0,
        seq,
        BlockKind::Raw,
        len as u64,
        crc,
        Rest::Hole,
    )?;
    Ok(start)
}

#[test]
fn room_claimed_by_populating_holds_blocks_written_in_place() {
    for mode in [
        ClaimMode::Populate,
        ClaimMode::Fallocate,
        ClaimMode::HeaderPages,
    ] {
        let path = tmp(&format!("claim-{}", mode.name()));
        let w = ContainerWriter::create(&path, ContainerOptions { align: 4096 }).unwrap();
        w.set_claim_mode(mode);
        // 40 rooms of 64 KiB: several claims of 8 rooms ahead.
        for seq in 0..40 {
            reserve_write_commit(&w, seq, 60_000 + seq as usize).unwrap();
        }
        // Where populating works (Linux 5.14 on), the writer keeps it.
        let kept = w.claim_mode();
        assert!(kept == mode || mode == ClaimMode::Populate, "{kept:?}");
        w.finish(false).unwrap();
        let r = ContainerReader::open(&path).unwrap();
        assert_eq!(r.blocks().len(), 40);
        for b in r.blocks() {
            assert_eq!(
                r.read_payload(b).unwrap(),
                payload(0, b.header.seq, 60_000 + b.header.seq as usize)
            );
        }
        assert!(r.verify().unwrap().is_whole());
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}

#[test]
fn a_kernel_without_populate_falls_back_to_fallocate() {
    let path = tmp("no-populate");
    let w = ContainerWriter::create(&path, ContainerOptions { align: 4096 }).unwrap();
    w.set_claim_mode(ClaimMode::Populate);
    w.simulate_no_populate();
    for seq in 0..20 {
        reserve_write_commit(&w, seq, 50_000).unwrap();
    }
    assert_eq!(w.claim_mode(), ClaimMode::Fallocate);
    w.finish(false).unwrap();
    let r = ContainerReader::open(&path).unwrap();
    assert_eq!(r.blocks().len(), 20);
    for b in r.blocks() {
        assert_eq!(r.read_payload(b).unwrap(), payload(0, b.header.seq, 50_000));
    }
    assert!(r.verify().unwrap().is_whole());
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn populating_a_full_file_system_reports_no_space_not_a_signal() {
    use std::process::Command;
    let dir = tmp("smallfs");
    std::fs::create_dir_all(&dir).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&dir)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
        return;
    }
    let path = dir.join("out.accio");
    let w = ContainerWriter::create(&path, ContainerOptions { align: 4096 }).unwrap();
    w.set_claim_mode(ClaimMode::Populate);
    let mut committed = 0u64;
    let err = loop {
        match reserve_write_commit(&w, committed, 60_000) {
            Ok(()) => committed += 1,
            Err(e) => break e,
        }
        assert!(committed < 100, "1 MiB never filled");
    };
    // The populate failed (no space for its faults); `fallocate` gave the real error.
    assert!(err.is_no_space(), "{err}");
    assert!(err.to_string().contains("No space left on device"), "{err}");
    assert!(committed > 0);
    drop(w);
    // Every block committed before is whole; nothing torn is reported as a block.
    let r = ContainerReader::open(&path).unwrap();
    assert_eq!(r.blocks().len() as u64, committed);
    for b in r.blocks() {
        assert_eq!(r.read_payload(b).unwrap(), payload(0, b.header.seq, 60_000));
    }
    drop(r);
    let _ = Command::new("umount").arg("-l").arg(&dir).status();
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

/// A closed file with every kind of range: blocks of assorted sizes (the issue's
/// 15610-byte block among them), a hole where room was given back, and a short block
/// written in place with a hole after it. Returns the file's bytes.
fn sample_with_holes(path: &std::path::Path, align: u32) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let w = ContainerWriter::create(path, ContainerOptions { align }).unwrap();
    let a = u64::from(align);
    for (i, &len) in [15610usize, 0, 1, 63, 64, 4095, 4096, 4097]
        .iter()
        .enumerate()
    {
        for p in 0..2u32 {
            w.append(p, i as u64, BlockKind::Raw, &payload(p, i as u64, len))
                .unwrap();
        }
        if i == 2 {
            let at = w.reserve(4 * a).unwrap();
            w.abandon_reserved(at, 4 * a, false).unwrap();
        }
        if i == 4 {
            let room = 4 * a;
            let at = w.reserve(room).unwrap();
            let data = payload(7, i as u64, 100);
            let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            f.write_all_at(&data, block_extent(at, 0, align).0).unwrap();
            let crc = crate::checksum::crc32c(&data);
            w.commit_reserved(
                at,
                room,
                7,
                i as u64 - 4,
                BlockKind::Raw,
                100,
                crc,
                Rest::Hole,
            )
            .unwrap();
        }
    }
    w.finish(false).unwrap();
    std::fs::read(path).unwrap()
}

/// Cut points of `full`: a regular sample plus both sides of every boundary (block
/// headers, payload ends, padding ends, holes, index, trailer).
fn cut_points(full: &[u8], align: u32, step: usize) -> std::collections::BTreeSet<usize> {
    let r = ContainerReader::from_bytes(full.to_vec()).unwrap();
    let mut cuts: std::collections::BTreeSet<usize> = (0..=full.len()).step_by(step).collect();
    let Layout::Indexed { data_end, .. } = *r.layout() else {
        panic!("sample not closed")
    };
    let mut marks = vec![
        64,
        r.header().first_block(),
        data_end,
        full.len() as u64 - 64,
    ];
    for b in r.blocks() {
        let p = b.payload_offset(align);
        marks.extend([b.offset, b.offset + 64, p, p + b.header.len, b.end(align)]);
    }
    for m in marks {
        for d in [-1i64, 0, 1] {
            let c = m as i64 + d;
            if (0..=full.len() as i64).contains(&c) {
                cuts.insert(c as usize);
            }
        }
    }
    cuts
}

#[test]
fn recover_after_a_cut_anywhere_verifies_whole_with_every_whole_block_or_changes_nothing() {
    for (align, step) in [(64u32, 7usize), (4096, 97)] {
        let path = tmp(&format!("cuts-{align}"));
        let full = sample_with_holes(&path, align);
        let blocks = ContainerReader::from_bytes(full.clone())
            .unwrap()
            .blocks()
            .to_vec();
        assert_eq!(blocks.len(), 17);
        let cuts = cut_points(&full, align, step);
        assert!(cuts.len() > 300, "{}", cuts.len());
        for cut in cuts {
            let mut img = full[..cut].to_vec();
            match recover_image(&mut img) {
                Ok(rec) => {
                    let whole: Vec<_> = blocks
                        .iter()
                        .filter(|b| b.payload_offset(align) + b.header.len <= cut as u64)
                        .copied()
                        .collect();
                    assert_eq!(rec.blocks, whole.len() as u64, "cut at {cut}");
                    let r = ContainerReader::from_bytes(img).unwrap();
                    let v = r.verify().unwrap();
                    assert!(v.is_whole(), "cut at {cut}: {:?}", v.problems);
                    assert_eq!(r.blocks(), &whole[..], "cut at {cut}");
                }
                Err(e) => {
                    // Only a cut file header cannot be recovered.
                    assert!(cut < 64, "cut at {cut}: {e}");
                    assert_eq!(
                        img,
                        full[..cut],
                        "cut at {cut}: a failed recover changed it"
                    );
                }
            }
        }
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}

/// Fails its `fail_at`-th call with `ENOSPC` (a write writes half its bytes first).
struct Failing<'a> {
    inner: super::reader::MemoryTarget<'a>,
    calls: usize,
    fail_at: usize,
}

impl Failing<'_> {
    fn fails(&mut self) -> bool {
        self.calls += 1;
        self.calls == self.fail_at
    }
}

fn no_space() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::ENOSPC)
}

impl super::reader::Target for Failing<'_> {
    fn write_at(&mut self, buf: &[u8], at: u64) -> std::io::Result<()> {
        if self.fails() {
            self.inner.write_at(&buf[..buf.len() / 2], at)?;
            return Err(no_space());
        }
        self.inner.write_at(buf, at)
    }
    fn allocate(&mut self, at: u64, len: u64) -> std::io::Result<()> {
        if self.fails() {
            return Err(no_space());
        }
        self.inner.allocate(at, len)
    }
    fn set_len(&mut self, len: u64) -> std::io::Result<()> {
        if self.fails() {
            return Err(no_space());
        }
        self.inner.set_len(len)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        if self.fails() {
            return Err(no_space());
        }
        Ok(())
    }
}

#[test]
fn recover_failing_at_any_step_leaves_the_file_byte_for_byte_as_it_was() {
    let path = tmp("failing");
    let full = sample_with_holes(&path, 4096);
    let r = ContainerReader::from_bytes(full.clone()).unwrap();
    let b = r.blocks().to_vec();
    // A cut in padding (the index goes past the end), one in a payload (the file
    // shrinks), and a destroyed header in the middle (a hole header is written too).
    let in_padding = full[..(b[0].payload_offset(4096) + b[0].header.len + 7) as usize].to_vec();
    let in_payload = full[..(b[12].payload_offset(4096) + 10) as usize].to_vec();
    let mut torn_header = full[..(b[14].payload_offset(4096) + 10) as usize].to_vec();
    torn_header[b[3].offset as usize + 20] ^= 0xFF;
    for image in [in_padding, in_payload, torn_header] {
        // The steps a recovery takes, counted by one that fails none.
        let mut done = image.clone();
        let mut all = Failing {
            inner: super::reader::MemoryTarget(&mut done),
            calls: 0,
            fail_at: usize::MAX,
        };
        let reader = ContainerReader::from_bytes(image.clone()).unwrap();
        super::reader::recover_into(&reader, &mut all).unwrap();
        let steps = all.calls;
        assert!(steps >= 5, "{steps}");
        // Whole, but for the block whose header was destroyed: its producer's sequence
        // has a gap, which no index can fill.
        let v = ContainerReader::from_bytes(done).unwrap().verify().unwrap();
        assert!(
            v.problems
                .iter()
                .all(|p| p.contains("1 block(s) missing from its sequence")),
            "{:?}",
            v.problems
        );
        // The last step, the sync after the cut, is the one that cannot be undone.
        for fail_at in 1..steps {
            let mut img = image.clone();
            let mut t = Failing {
                inner: super::reader::MemoryTarget(&mut img),
                calls: 0,
                fail_at,
            };
            let e = super::reader::recover_into(&reader, &mut t).unwrap_err();
            assert!(e.is_no_space(), "{e}");
            assert!(e.to_string().contains("recovery changed nothing"), "{e}");
            assert!(
                img == image,
                "step {fail_at} of {steps} failed and changed the file"
            );
        }
    }
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// Bytes served from memory, counting what is read.
struct Counting(
    super::reader::Bytes,
    std::sync::Arc<std::sync::atomic::AtomicU64>,
);

impl super::reader::Source for Counting {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_at(&self, buf: &mut [u8], at: u64) -> std::io::Result<()> {
        self.1
            .fetch_add(buf.len() as u64, std::sync::atomic::Ordering::Relaxed);
        self.0.read_at(buf, at)
    }
}

/// A file header (alignment 64) followed by `slots` 64-byte slots made by `slot(i)`.
fn crafted(slots: usize, slot: impl Fn(usize) -> [u8; 64]) -> Vec<u8> {
    let h = FileHeader {
        flags: 0,
        version: VERSION,
        align: 64,
        created_unix_ns: 0,
    };
    let mut img = h.encode().to_vec();
    for i in 0..slots {
        img.extend_from_slice(&slot(i));
    }
    img
}

#[test]
fn crafted_files_are_read_in_one_pass_whatever_their_headers_claim() {
    use super::reader::Source as _;
    let slots = 128 << 10; // 8 MiB of slots
    let header = |len: u64, crc: u32| {
        BlockHeader {
            producer: 1,
            kind: BlockKind::Raw,
            seq: 0,
            len,
            payload_crc: crc,
        }
        .encode()
    };
    let cases: [(&str, Vec<u8>); 3] = [
        // A block magic in every slot, every header checksum wrong.
        (
            "magic in every slot",
            crafted(slots, |i| {
                let mut s = [i as u8; 64];
                s[..8].copy_from_slice(b"ACCIOBLK");
                s
            }),
        ),
        // Good headers in every slot, each claiming more than the file holds.
        (
            "headers claiming 1 TiB",
            crafted(slots, |i| header(1 << 40, i as u32)),
        ),
        // Good headers over 64-byte payloads whose checksum is wrong: skipped by length.
        (
            "payloads with a wrong checksum",
            crafted(slots, |i| {
                if i % 2 == 0 {
                    header(64, 1)
                } else {
                    [0xA5; 64]
                }
            }),
        ),
    ];
    for (what, img) in cases {
        let size = img.len() as u64;
        let read = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let src = Counting(super::reader::Bytes(img.clone()), read.clone());
        assert_eq!(src.size(), size);
        let r = ContainerReader::from_source(Box::new(src), "<crafted>".into()).unwrap();
        assert!(r.blocks().is_empty(), "{what}");
        let v = r.verify().unwrap();
        assert!(!v.is_whole(), "{what}");
        let n = read.load(std::sync::atomic::Ordering::Relaxed);
        // Open (one scan) and verify (reusing it): about one pass.
        assert!(
            n <= size + size / 8,
            "{what}: read {n} bytes of a {size}-byte file"
        );
        let mut img = img;
        let rec = recover_image(&mut img).unwrap();
        assert_eq!(rec.blocks, 0, "{what}");
        assert!(ContainerReader::from_bytes(img)
            .unwrap()
            .verify()
            .unwrap()
            .is_whole());
    }
}

/// The scan's search for a sealed header inside a damaged range (four candidates at a time
/// with the `crc32` instruction) finds what a check of one slot at a time finds: every slot
/// holds a block magic, one in a few a good checksum too.
#[test]
fn the_four_lane_header_search_agrees_with_one_slot_at_a_time() {
    use super::reader::{first_sealed_header, first_sealed_header_portable};
    let sealed = BlockHeader {
        producer: 7,
        kind: BlockKind::Raw,
        seq: 3,
        len: 100,
        payload_crc: 0x1234_5678,
    }
    .encode();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..200 {
        let slots = 1 + (next() % 40) as usize;
        let step = [64usize, 128, 4096][round % 3];
        let mut buf: Vec<u8> = (0..slots * step + (next() % 64) as usize)
            .map(|_| next() as u8)
            .collect();
        for slot in 0..slots {
            let at = slot * step;
            if at + 64 > buf.len() {
                break;
            }
            if next() % 7 == 0 {
                buf[at..at + 64].copy_from_slice(&sealed);
            } else {
                buf[at..at + 8].copy_from_slice(b"ACCIOBLK");
            }
        }
        assert_eq!(
            first_sealed_header(&buf, step),
            first_sealed_header_portable(&buf, step),
            "round {round}: {slots} slots of {step}"
        );
    }
}

/// A file with holes of every kind between blocks written in place: larger than the block
/// after them, exactly its size, smaller (that block must go past the end first), and at
/// the end; with `pin`, room of a producer that vanished in the middle (a wall nothing
/// moves across). Returns its writer, not closed, and the blocks (seq, len).
fn write_holey(path: &std::path::Path, pin: bool) -> (ContainerWriter, Vec<(u64, usize)>) {
    let w = ContainerWriter::create(path, ContainerOptions::default()).unwrap();
    let (mut blocks, mut seq) = (Vec::new(), 0u64);
    // (room payload bytes, block length, or None for a room given back; room 12345: a
    // room its producer may still write)
    let plan: [(u64, Option<usize>); 12] = [
        (8192, Some(5000)),
        // A hole of two pages, then a block of exactly that extent (its new header goes
        // first), then one larger than the hole (it goes past the end first).
        (4096, None),
        (4096, Some(4096)),
        (40960, Some(40000)),
        (8192, None),
        (16384, Some(12000)),
        (12345, None),
        // A large hole: the blocks after it move clear of themselves, and tails of rooms.
        (65536, None),
        (16384, Some(12000)),
        (16384, Some(100)),
        (8192, Some(8000)),
        (32768, None),
    ];
    for (room, len) in plan {
        if room == 12345 && !pin {
            continue;
        }
        let wall = room == 12345;
        let room = if wall { 20480 } else { room };
        let Some(len) = len else {
            let start = w.reserve(room).unwrap();
            w.abandon_reserved(start, room, !wall).unwrap();
            continue;
        };
        write_in_room(&w, room, seq, len).unwrap();
        blocks.push((seq, len));
        seq += 1;
    }
    (w, blocks)
}

/// Compaction killed after any of its writes: the file scans to every block exactly once
/// with its bytes, and `recover` makes it whole. Left to finish, the file is its data and
/// overhead only.
#[test]
fn compaction_stopped_at_any_write_loses_nothing() {
    // Moving blocks by copying them (tmpfs and btrfs), and cutting the holes out where the
    // file system can (`FALLOC_FL_COLLAPSE_RANGE`: ext4, xfs; elsewhere this copies too).
    for collapse in [false, true] {
        for pin in [false, true] {
            stop_compaction_at_every_write(collapse, pin);
        }
    }
}

fn stop_compaction_at_every_write(collapse: bool, pin: bool) {
    let dir = tmp(&format!("compact-steps-{collapse}-{pin}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut steps = 0;
    loop {
        let path = dir.join(format!("f{steps}.accio"));
        let (w, expect) = write_holey(&path, pin);
        let stopped = w.stop_compacting_after(steps, collapse);
        let r = ContainerReader::open(&path).unwrap();
        let mut got: Vec<(u64, usize)> = r
            .blocks()
            .iter()
            .map(|b| (b.header.seq, b.header.len as usize))
            .collect();
        got.sort_unstable();
        assert_eq!(got, expect, "stopped after {steps} writes");
        for b in r.blocks() {
            let want = payload(0, b.header.seq, b.header.len as usize);
            assert_eq!(r.read_payload(b).unwrap(), want, "after {steps} writes");
        }
        let rec = crate::container::recover(&path).unwrap();
        assert_eq!(rec.blocks as usize, expect.len(), "after {steps} writes");
        let v = ContainerReader::open(&path).unwrap().verify().unwrap();
        assert!(v.is_whole(), "after {steps} writes: {:?}", v.problems);
        std::fs::remove_file(&path).unwrap();
        if !stopped {
            break;
        }
        steps += 1;
    }
    // Copying, every block after the first hole moved, one through the end of the data.
    assert!(collapse || steps > 12, "{steps}");
    // Left alone, the file is the data and overhead only: no holes.
    let path = dir.join("whole.accio");
    let (w, expect) = write_holey(&path, pin);
    let s = w.finish(false).unwrap();
    let data: u64 = expect
        .iter()
        .map(|&(_, l)| 4096 + (l as u64).div_ceil(4096) * 4096)
        .sum();
    let v = ContainerReader::open(&path).unwrap().verify().unwrap();
    assert!(v.is_whole(), "{v:?}");
    // With a wall, one hole: the wall, and what the blocks before it left joined to it.
    let wall: u64 = v.holes.iter().map(|h| h.len).sum();
    assert_eq!(v.holes.len(), usize::from(pin), "{:?}", v.holes);
    assert_eq!(
        s.file_bytes,
        4096 + data + wall + 32 + 48 * expect.len() as u64 + 64
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// Room of a producer that may still write (it vanished) stays in the file as a hole, and
/// nothing moves across it; its pages go back to the file system at close.
#[test]
fn pinned_room_stays_a_hole_and_is_not_allocated() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let dir = tmp("pinned");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pinned.accio");
    let w = ContainerWriter::create(&path, ContainerOptions::default()).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    write_in_room(&w, 8192, 0, 8000).unwrap();
    let room = 1 << 20;
    let pinned = w.reserve(room).unwrap();
    // Its producer wrote part of it, then vanished (its room may still be mapped).
    f.write_all_at(&vec![7u8; 300_000], block_extent(pinned, 0, w.align()).0)
        .unwrap();
    w.abandon_reserved(pinned, room, false).unwrap();
    write_in_room(&w, 8192, 1, 8000).unwrap();
    let s = w.finish(false).unwrap();
    let r = ContainerReader::open(&path).unwrap();
    let v = r.verify().unwrap();
    assert!(v.is_whole(), "{:?}", v.problems);
    assert_eq!(v.holes.len(), 1, "{:?}", v.holes);
    assert_eq!(v.holes[0].offset, pinned);
    assert_eq!(
        r.blocks()[1].offset,
        pinned + 4096 + room,
        "nothing moved across it"
    );
    let allocated = std::fs::metadata(&path).unwrap().blocks() * 512;
    assert!(
        allocated + room - 2 * 4096 <= s.file_bytes + 4096,
        "{allocated} bytes allocated for a file of {} with a hole of {room}",
        s.file_bytes
    );
    std::fs::remove_dir_all(dir).unwrap();
}
