//! Fuzzes what the owner of a device window on the `mpi` backend does with a peer's
//! requests, and what an initiator makes of the owner's answers
//! (`accio_mpi::device_wire`): the input is cut into messages, each handled by one owner
//! (whose failure state carries over) on two windows of host memory behind the device
//! trait. Nothing may panic; a copy outside a window panics in the test memory; every
//! answer is one an initiator parses, no longer than the protocol allows; and bytes
//! outside the written ranges never change.
//!
//! Run: `cargo +nightly fuzz run mpi_device -- -max_total_time=60` from the repository root.
#![no_main]

use std::sync::{Arc, Mutex};

use accio_core::{Access, DeviceMemory, DeviceShare, Error, Result, Side, WindowDesc, WindowTable};
use accio_mpi::device_wire::{parse_answer, Head, Owner, HEADER, MAX_MESSAGE, MAX_REASON};
use libfuzzer_sys::fuzz_target;

/// Host memory behind the device trait; a copy outside it panics. A write whose first
/// byte is 0xEE fails, as a driver's copy may.
#[derive(Debug)]
struct Mem(Mutex<Vec<u8>>);

impl DeviceMemory for Mem {
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn kind(&self) -> &'static str {
        "fuzz"
    }
    fn device(&self) -> u32 {
        0
    }
    fn address(&self) -> u64 {
        0
    }
    fn read(&self, at: usize, dst: &mut [u8]) -> Result<()> {
        dst.copy_from_slice(&self.0.lock().unwrap()[at..at + dst.len()]);
        Ok(())
    }
    fn write(&self, at: usize, src: &[u8]) -> Result<()> {
        if src.first() == Some(&0xEE) {
            return Err(Error::invalid("device write", "the fuzz driver fails"));
        }
        self.0.lock().unwrap()[at..at + src.len()].copy_from_slice(src);
        Ok(())
    }
    fn share(&self) -> Result<DeviceShare> {
        Err(Error::invalid("share", "fuzz memory"))
    }
}

fuzz_target!(|data: &[u8]| {
    // A read-write window of 4 KiB at 0x1000 and a read-only one of 64 bytes at 0x3000.
    let rw = Arc::new(Mem(Mutex::new(vec![0; 4096])));
    let ro = Arc::new(Mem(Mutex::new(vec![7; 64])));
    let mut table = WindowTable::default();
    let w = |offset, len, access| WindowDesc {
        offset,
        len,
        access,
    };
    table
        .insert(w(0x1000, 4096, Access::READ_WRITE), rw.clone() as Arc<dyn DeviceMemory>)
        .unwrap();
    table
        .insert(w(0x3000, 64, Access::READ), ro.clone() as Arc<dyn DeviceMemory>)
        .unwrap();
    let find = |off: u64, len: u64, need: Access| -> Result<(Arc<dyn DeviceMemory>, usize)> {
        let (d, m) = table.find(off, len, need, Side::Local, &"mpi://0:1")?;
        Ok((m.clone(), (off - d.offset) as usize))
    };
    let mut owner = Owner::default();
    // Messages: a 2-byte length, then that many bytes (what is left, at the end).
    let mut rest = data;
    while !rest.is_empty() {
        let n = match rest {
            [a, b, tail @ ..] => {
                rest = tail;
                usize::from(u16::from_le_bytes([*a, *b]))
            }
            _ => std::mem::take(&mut rest).len(),
        };
        let (msg, tail) = rest.split_at(n.min(rest.len()));
        rest = tail;
        // An initiator reading these bytes as an answer: parsed or refused, never a panic.
        let seq = Head::decode(msg).map_or(0, |h| h.seq);
        let _ = parse_answer(msg, seq);
        if let Some(a) = owner.handle(msg, &find, &mut |n| Vec::with_capacity(n)) {
            let h = Head::decode(&a).expect("an answer has a header");
            assert!(a.len() <= MAX_MESSAGE.max(HEADER + MAX_REASON));
            assert_eq!(parse_answer(&a, h.seq), Ok(h), "an answer the initiator refuses");
        }
    }
    assert!(ro.0.lock().unwrap().iter().all(|&b| b == 7), "a read-only window was written");
});
