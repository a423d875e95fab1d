//! Blocks from GPU memory (`Producer::write_device`): on a machine with a GPU (the GPU
//! machine runs this binary: `ci/device.sh`) every block reaches the file with its bytes,
//! in both write modes, over shm and tcp, for sizes around the staging chunk; elsewhere
//! the call names what is missing and nothing reaches the file.

use accio_device::{DeviceBuffer, CHUNK};
use accio_merge::container::{ContainerOptions, ContainerReader};
use accio_merge::{ContainerSink, MergeError, Merger, Producer, WriteMode};

mod common;
use common::payload;

#[test]
fn blocks_from_device_memory_reach_the_file_unchanged() {
    let slot = 4 * CHUNK;
    let gpu = match DeviceBuffer::alloc(0, slot) {
        Ok(b) => Some(b),
        Err(e) if e.is_unavailable() => {
            eprintln!("skipped the copies: no CUDA device ({e})");
            None
        }
        Err(e) => panic!("{e}"),
    };
    let dir = common::test_dir();
    let lens = [1, 4096, CHUNK - 1, CHUNK + 1, 3 * CHUNK + 7, slot];
    for (i, (backend, mode)) in [
        ("shm", WriteMode::Auto),
        ("shm", WriteMode::Copy),
        ("tcp", WriteMode::Copy),
    ]
    .into_iter()
    .enumerate()
    {
        let path = dir.join(format!("device-{i}.accio"));
        let addr = match backend {
            "shm" => format!("shm://accio-device-{}-{i}", std::process::id()),
            _ => "tcp://127.0.0.1:0".into(),
        };
        let sink = ContainerSink::create(&path, ContainerOptions::default()).unwrap();
        let m = Merger::builder()
            .budget(8 * slot)
            .slot_bytes(slot)
            .write_mode(mode)
            .listen(&addr, Box::new(sink))
            .unwrap();
        let mut p = Producer::connect(&m.addr().to_string()).unwrap();
        let mut written = Vec::new();
        match &gpu {
            Some(b) => {
                for (seq, &len) in lens.iter().enumerate() {
                    let bytes = payload(7, seq as u64, len);
                    b.write(0, &bytes).unwrap();
                    p.write_device(&b.range().sub(0, len).unwrap()).unwrap();
                    written.push(bytes);
                }
                // Larger than a buffer: refused before any copy.
                let too_big = DeviceBuffer::alloc(0, slot + 1).unwrap();
                match p.write_device(&too_big.range()) {
                    Err(MergeError::TooLarge { len, limit, .. }) => {
                        assert_eq!((len, limit), (slot + 1, slot))
                    }
                    other => panic!("{other:?}"),
                }
            }
            None => {
                // No device range can be made here; the check names the cause.
                let host = [0u8; 64];
                let e = accio_device::device_range(host.as_ptr() as u64, 64).unwrap_err();
                assert!(e.is_unavailable(), "{e}");
                let e = MergeError::from(e).to_string();
                assert!(e.starts_with("block from device memory: "), "{e}");
            }
        }
        p.finish().unwrap();
        m.close().unwrap();
        let r = ContainerReader::open(&path).unwrap();
        let v = r.verify().unwrap();
        assert!(v.is_whole(), "{backend} {}: {:?}", mode.name(), v.problems);
        assert_eq!(r.blocks().len(), written.len());
        for (b, want) in r.blocks().iter().zip(&written) {
            assert!(
                r.read_payload(b).unwrap() == *want,
                "block {} changed",
                b.header.seq
            );
        }
        std::fs::remove_file(&path).unwrap();
    }
}
