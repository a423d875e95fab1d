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

use accio_merge::container::{split_records, BlockKind, ContainerReader, Layout};
use accio_merge::wire::Msg;
use libfuzzer_sys::fuzz_target;

mod seed;
use seed::edit;

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
        1 | 2 => exercise(edit(rest, mode % 4 == 2)),
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
