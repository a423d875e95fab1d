//! Fuzzes `recover` (issue 29): a container image cut anywhere, or edited (byte flips and a
//! cut, optionally with every header checksum re-sealed), recovered in memory. Holds it to
//! its contract:
//! - a failed recovery leaves the image byte for byte as it was;
//! - a recovered image opens through its index, which lists exactly the blocks recovered,
//!   and `verify` finds no problem with the index (only damage left inside the file, or a
//!   producer's sequence with a gap, which recovery cannot mend);
//! - a cut alone (no edit) recovers to an image `verify` finds whole, holding every block
//!   that was whole before the cut;
//! - recovering a whole image again changes nothing.
//!
//! Run: `cargo +nightly fuzz run recover -- -max_total_time=60` from the repository root.
#![no_main]

use accio_merge::container::{recover_image, ContainerReader, Layout};
use libfuzzer_sys::fuzz_target;

mod seed;
use seed::{edit, seed};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let cut_only = mode % 3 == 0;
    let img = if cut_only {
        let mut c = [0u8; 4];
        for (d, s) in c.iter_mut().zip(rest) {
            *d = *s;
        }
        let cut = u32::from_le_bytes(c) as usize % (seed().len() + 1);
        seed()[..cut].to_vec()
    } else {
        edit(rest, mode % 3 == 2)
    };
    let before = img.clone();
    let mut img = img;
    let rec = match recover_image(&mut img) {
        Ok(rec) => rec,
        Err(e) => {
            assert!(img == before, "a failed recovery ({e}) changed the image");
            return;
        }
    };
    let r = ContainerReader::from_bytes(img.clone()).expect("a recovered image opens");
    if rec.already_whole {
        // Nothing to recover (an indexed image that verifies whole): untouched.
        assert!(img == before, "recovering a whole image changed it");
        assert!(matches!(r.layout(), Layout::Indexed { .. }));
        assert!(r.verify().expect("a whole image verifies").is_whole());
        return;
    }
    assert!(
        matches!(r.layout(), Layout::Indexed { clean: false, .. }),
        "a recovered image is not read through its index: {:?}",
        r.layout()
    );
    assert_eq!(r.blocks().len() as u64, rec.blocks);
    let v = r.verify().expect("a recovered image verifies");
    for p in &v.problems {
        assert!(
            p.starts_with("damaged bytes at") || p.starts_with("producer "),
            "recovered image: {p}"
        );
    }
    if cut_only {
        assert!(
            v.is_whole(),
            "a cut image recovered not whole: {:?}",
            v.problems
        );
        let all = ContainerReader::from_bytes(seed().to_vec()).unwrap();
        let whole: Vec<_> = all
            .blocks()
            .iter()
            .filter(|b| b.payload_offset(all.header().align) + b.header.len <= before.len() as u64)
            .copied()
            .collect();
        assert_eq!(
            r.blocks(),
            &whole[..],
            "a block whole before the cut was lost"
        );
    }
    if v.is_whole() {
        let mut again = img.clone();
        assert!(recover_image(&mut again).unwrap().already_whole);
        assert!(again == img, "recovering a whole image changed it");
    }
});
