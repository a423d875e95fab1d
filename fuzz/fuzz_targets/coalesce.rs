//! Fuzzes what the coalescing layer decodes from a peer: cache messages (pushed ways,
//! flushes, acknowledgements) and aggregated batches, plain and checked.
//!
//! Run: `cargo +nightly fuzz run coalesce -- -max_total_time=60` from the repository root.
#![no_main]

use accio_coalesce::Deaggregator;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = accio_coalesce::fuzzing::cache_message(data);
    for mut de in [
        Deaggregator::new(0),
        Deaggregator::new(0).checked(true).targets(0..1 << 20),
    ] {
        if let Ok(batch) = de.unpack(data) {
            for m in batch {
                // Every delivered message must lie inside the input it came from.
                assert!(m.data.len() <= data.len());
            }
        }
    }
});
