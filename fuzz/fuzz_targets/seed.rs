//! The seed image shared by the container targets, and the edits they make to it.

use std::sync::OnceLock;

use accio_merge::container::{BlockKind, ContainerOptions, ContainerWriter, Rest};

/// A valid image: 3 producers, 4 blocks each of assorted sizes and kinds, 64-byte alignment.
pub fn seed() -> &'static [u8] {
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
        w.commit_reserved(at, room, 5, 0, BlockKind::Raw, 70, crc, Rest::Hole)
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
pub fn reseal(img: &mut [u8]) {
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

/// The seed image edited by `data`: byte flips (5 bytes each: a little-endian offset and
/// a mask), then a cut (the byte left over, as a fraction of 255), then, with `seal`,
/// every header checksum recomputed so that lying fields get past the checksums.
pub fn edit(data: &[u8], seal: bool) -> Vec<u8> {
    let mut img = seed().to_vec();
    let mut edits = data.chunks_exact(5);
    for e in &mut edits {
        let at = u32::from_le_bytes([e[0], e[1], e[2], e[3]]) as usize % img.len();
        img[at] ^= e[4];
    }
    let tail = edits.remainder();
    if let Some(&cut) = tail.first() {
        let keep = img.len() * cut as usize / 255;
        img.truncate(keep.max(1));
    }
    if seal {
        reseal(&mut img);
    }
    img
}
