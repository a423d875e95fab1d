//! Fuzzes what accio-merge decodes from outside: container files (header, blocks, index,
//! trailer, the recovery scan), record payloads, and merge protocol messages.
//!
//! Random bytes rarely pass a magic number and a checksum, so most inputs are edits of a
//! valid container image instead: byte flips at chosen offsets and a cut, optionally
//! followed by re-sealing every header checksum so that lying lengths, sequence numbers and
//! index entries get past the checksums and reach the code behind them.
//!
//! Run: `cargo +nightly fuzz run container -- -max_total_time=60` from the repository root.
#![no_main]

use std::sync::OnceLock;

use accio_merge::container::{
    split_records, BlockKind, ContainerOptions, ContainerReader, ContainerWriter, Layout,
};
use accio_merge::wire::Msg;
use libfuzzer_sys::fuzz_target;

/// A valid image: 3 producers, 4 blocks each of assorted sizes and kinds, 64-byte alignment.
fn seed() -> &'static [u8] {
    static SEED: OnceLock<Vec<u8>> = OnceLock::new();
    SEED.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("accio-fuzz-seed-{}", std::process::id()));
        let w = ContainerWriter::create(&path, ContainerOptions { align: 64 }).unwrap();
        for seq in 0..4u64 {
            for p in 0..3u32 {
                let len = [0usize, 5, 70, 300][seq as usize] + p as usize;
                let mut payload = Vec::new();
                let kind = if p == 1 {
                    // Records: a 4-byte length and the bytes, repeated.
                    while payload.len() + 4 + 9 <= len.max(13) {
                        payload.extend_from_slice(&9u32.to_le_bytes());
                        payload.extend_from_slice(b"record!!!");
                    }
                    BlockKind::Records
                } else {
                    payload.extend((0..len).map(|i| (i as u8) ^ (seq as u8)));
                    BlockKind::Raw
                };
                w.append(p, seq, kind, &payload).unwrap();
            }
        }
        // Room written in place: a short block with a hole after it, a hole where a
        // producer gave its room back, and room still reserved (a killed merger's).
        let room = 256u64;
        let at = w.reserve(room).unwrap();
        let payload: Vec<u8> = (0..70u8).collect();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| {
                use std::os::unix::fs::FileExt;
                f.write_all_at(&payload, at + 64)
            })
            .unwrap();
        let crc = crc32c::crc32c(&payload);
        w.commit_reserved(at, room, 5, 0, BlockKind::Raw, 70, crc)
            .unwrap();
        let at = w.reserve(room).unwrap();
        w.abandon_reserved(at, room, false).unwrap();
        w.reserve(room).unwrap();
        w.finish(false).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        bytes
    })
}

/// Recomputes the checksum of every 64-byte header found at a 64-byte boundary (file
/// header, block headers) and of the trailer.
fn reseal(img: &mut [u8]) {
    let mut at = 0;
    while at + 64 <= img.len() {
        let magic = &img[at..at + 8];
        if magic == b"ACCIOMF\x01" || magic == b"ACCIOBLK" {
            let crc = crc32c::crc32c(&img[at..at + 60]);
            img[at + 60..at + 64].copy_from_slice(&crc.to_le_bytes());
        }
        at += 64;
    }
    if img.len() >= 64 {
        let t = img.len() - 64;
        if &img[t..t + 8] == b"ACCIOEND" {
            let crc = crc32c::crc32c(&img[t..t + 60]);
            img[t + 60..].copy_from_slice(&crc.to_le_bytes());
        }
    }
}

fn exercise(img: Vec<u8>) {
    let len = img.len() as u64;
    let Ok(r) = ContainerReader::from_bytes(img) else {
        return;
    };
    let scanned = matches!(r.layout(), Layout::Scanned { .. });
    for b in r.blocks() {
        assert!(b.offset < len, "block beyond the end of the file");
        match r.read_payload(b) {
            Ok(p) => {
                assert_eq!(p.len() as u64, b.header.len);
                if b.header.kind == BlockKind::Records {
                    let _ = split_records(&p);
                }
            }
            // A scan keeps only blocks whose payload checksum it verified.
            Err(e) => assert!(!scanned, "scanned block unreadable: {e}"),
        }
    }
    let _ = r.producers();
    if let Ok(v) = r.verify() {
        if v.is_whole() {
            for b in r.blocks() {
                assert!(r.read_payload(b).is_ok(), "whole file with a bad block");
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => exercise(rest.to_vec()),
        1 | 2 => {
            let mut img = seed().to_vec();
            let mut edits = rest.chunks_exact(5);
            for e in &mut edits {
                let at = u32::from_le_bytes([e[0], e[1], e[2], e[3]]) as usize % img.len();
                img[at] ^= e[4];
            }
            let tail = edits.remainder();
            if let Some(&cut) = tail.first() {
                let keep = img.len() * cut as usize / 255;
                img.truncate(keep.max(1));
            }
            if mode % 4 == 2 {
                reseal(&mut img);
            }
            exercise(img);
        }
        _ => {
            if let Ok(m) = Msg::decode(rest) {
                let mut out = Vec::new();
                m.encode(&mut out);
                assert_eq!(Msg::decode(&out).as_ref(), Ok(&m), "re-encoding changed it");
            }
            let _ = split_records(rest);
        }
    }
});
