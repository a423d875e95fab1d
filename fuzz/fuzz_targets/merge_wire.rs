//! Fuzzes what the merger decodes from producers and producers from the merger: every
//! message of the merge protocol. A message that decodes must encode back to the same
//! bytes (no two encodings of one message, no field silently dropped; a failure's text,
//! made valid UTF-8, only decodes again); one that does not must fail with a reason, never
//! panic.
//!
//! Run: `cargo +nightly fuzz run merge_wire -- -max_total_time=60` from the repository root.
#![no_main]

use accio_merge::wire::Msg;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match Msg::decode(data) {
        Ok(m) => {
            let mut out = Vec::new();
            m.encode(&mut out);
            match &m {
                // Text is cut to its limit and made valid UTF-8 (lossy): it decodes again.
                Msg::Fail { .. } => assert!(Msg::decode(&out).is_ok()),
                _ => assert_eq!(out, data, "{m:?}"),
            }
        }
        Err(reason) => assert!(!reason.is_empty()),
    }
});
