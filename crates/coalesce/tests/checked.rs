//! Checked mode (seed 001, section 6.2) turns "valid data in the wrong place" into errors:
//! a line or message sent to the wrong node, or aimed outside the region its receiver
//! expects, is refused with an error naming the sender, the expected and the actual
//! destination or offset — and nothing of the offending transfer is applied.

mod common;

use std::ops::Range;
use std::time::Duration;

use accio::{Access, Endpoint};
use accio_coalesce::{
    AggConfig, Aggregator, Applier, CacheConfig, CheckError, CommCache, Deaggregator, Error,
    RemoteWindow,
};

use common::{pair, BACKENDS, WAIT};

const WINDOW: usize = 1 << 16;

/// Runs a checked applier for node `me` (accepting `region`) until the cache closes or it
/// refuses something; returns its result and the window's bytes.
fn checked_receiver(
    rx: Box<dyn Endpoint>,
    me: u32,
    region: Range<u64>,
) -> std::thread::JoinHandle<(accio_coalesce::Result<()>, Vec<u8>)> {
    std::thread::spawn(move || {
        let win = rx.register(WINDOW, Access::WRITE).unwrap();
        let mut a = Applier::new(&*rx, win.clone()).checked(me).region(region);
        a.announce().unwrap();
        let r = loop {
            match a.next_flush(Some(WAIT)) {
                Ok(Some(_)) => {}
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        let mut w = vec![0u8; WINDOW];
        win.read_at(0, &mut w).unwrap();
        (r, w)
    })
}

fn checked_cache<'e>(tx: &'e dyn Endpoint, sender: u32, dest: u32) -> CommCache<'e> {
    let remote = RemoteWindow::receive(tx, Some(WAIT)).unwrap();
    let cfg = CacheConfig::new()
        .checked(sender, dest)
        .flush_timeout(Some(Duration::from_secs(5)));
    CommCache::new(tx, remote, cfg).unwrap()
}

#[test]
fn checked_lines_land_where_their_metadata_says() {
    for backend in BACKENDS {
        let (tx, rx) = pair(backend);
        let receiver = checked_receiver(rx, 2, 0..WINDOW as u64);
        let mut cache = checked_cache(&*tx, 7, 2);
        for i in 0..100u64 {
            cache.insert(i * 640, &[i as u8 + 1; 64]).unwrap();
        }
        let s = cache.close().unwrap();
        let (r, w) = receiver.join().unwrap();
        r.unwrap();
        for i in 0..100usize {
            assert_eq!(w[i * 640], i as u8 + 1, "{backend}");
        }
        assert_eq!(
            s.rma_transfers, 0,
            "{backend}: checked lines always travel as messages"
        );
    }
}

#[test]
fn a_line_for_another_node_is_a_wrong_destination_error_and_is_not_applied() {
    for backend in BACKENDS {
        let (tx, rx) = pair(backend);
        let receiver = checked_receiver(rx, 3, 0..WINDOW as u64);
        // The sender believes it talks to node 2 (a mis-wired endpoint).
        let mut cache = checked_cache(&*tx, 1, 2);
        cache.insert(0x1040, &[9; 64]).unwrap();
        let flushed = cache.flush();
        let (r, w) = receiver.join().unwrap();
        let e = r.unwrap_err();
        match &e {
            Error::Check(CheckError::WrongDestination {
                sender,
                expected,
                actual,
                ..
            }) => assert_eq!((*sender, *expected, *actual), (1, 3, 2), "{backend}"),
            other => panic!("{backend}: expected a wrong-destination error, got {other:?}"),
        }
        let text = e.to_string();
        for want in ["sender 1", "destination 2", "receiver is 3", "0x1040"] {
            assert!(text.contains(want), "{backend}: {want:?} not in {text:?}");
        }
        assert!(w.iter().all(|&b| b == 0), "{backend}: nothing applied");
        assert!(
            flushed.is_err(),
            "{backend}: the sender's flush is not acknowledged"
        );
    }
}

#[test]
fn a_line_outside_the_expected_region_is_a_wrong_region_error_and_its_way_is_not_applied() {
    for backend in BACKENDS {
        let (tx, rx) = pair(backend);
        // This sender may only write the first 4 KiB (say, its halo strip).
        let receiver = checked_receiver(rx, 0, 0..4096);
        let mut cache = checked_cache(&*tx, 4, 0);
        cache.insert(0, &[5; 64]).unwrap(); // fine
        cache.insert(8192, &[6; 64]).unwrap(); // same way, outside the region
        let _ = cache.flush();
        let (r, w) = receiver.join().unwrap();
        let e = r.unwrap_err();
        match &e {
            Error::Check(CheckError::WrongRegion {
                sender,
                offset,
                region,
                ..
            }) => assert_eq!((*sender, *offset, region.clone()), (4, 8192, 0..4096)),
            other => panic!("{backend}: expected a wrong-region error, got {other:?}"),
        }
        let t = e.to_string();
        for want in ["sender 4", "0x2000", "0x0..0x1000"] {
            assert!(t.contains(want), "{backend}: {want:?} not in {t:?}");
        }
        assert!(
            w.iter().all(|&b| b == 0),
            "{backend}: the in-region line of the refused way was not applied either"
        );
    }
}

#[test]
fn an_aggregated_message_for_another_node_is_a_wrong_destination_error() {
    for backend in BACKENDS {
        for checked in [false, true] {
            let (tx, rx) = pair(backend);
            // Destination 1 is wired to node 0's endpoint by mistake.
            let mut agg =
                Aggregator::new(vec![&*tx, &*tx], AggConfig::new(6).checked(checked)).unwrap();
            agg.send(1, b"halo row 17").unwrap();
            agg.flush().unwrap();
            let mut de = Deaggregator::new(0).checked(checked);
            let mut buf = Vec::new();
            match de.recv(&*rx, &mut buf, Some(WAIT)) {
                Err(e @ Error::Check(CheckError::WrongDestination { .. })) => {
                    let t = e.to_string();
                    for want in ["sender 6", "destination 1", "receiver is 0"] {
                        assert!(t.contains(want), "{backend}: {want:?} not in {t:?}");
                    }
                }
                other => panic!("{backend} checked={checked}: got {other:?}"),
            }
            assert_eq!(de.delivered(6), 0);
        }
    }
}

#[test]
fn an_aggregated_message_for_a_coordinate_outside_the_range_is_a_wrong_region_error() {
    for backend in BACKENDS {
        let (tx, rx) = pair(backend);
        let mut agg = Aggregator::new(vec![&*tx], AggConfig::new(2).checked(true)).unwrap();
        agg.send_to(0, 10, b"inside").unwrap();
        agg.send_to(0, 500, b"outside").unwrap();
        agg.flush().unwrap();
        let mut de = Deaggregator::new(0).checked(true).targets(0..100);
        let mut buf = Vec::new();
        match de.recv(&*rx, &mut buf, Some(WAIT)) {
            Err(Error::Check(CheckError::WrongRegion {
                sender,
                offset,
                region,
                ..
            })) => assert_eq!((sender, offset, region), (2, 500, 0..100), "{backend}"),
            other => panic!("{backend}: got {other:?}"),
        }
        // The whole batch was refused, the in-range message included.
        assert_eq!(de.delivered(2), 0, "{backend}");
    }
}

#[test]
fn a_checked_receiver_refuses_unchecked_traffic() {
    let (tx, rx) = pair("shm");
    let mut agg = Aggregator::new(vec![&*tx], AggConfig::new(3)).unwrap();
    agg.send(0, b"no metadata").unwrap();
    agg.flush().unwrap();
    let mut de = Deaggregator::new(0).checked(true);
    let mut buf = Vec::new();
    match de.recv(&*rx, &mut buf, Some(WAIT)) {
        Err(Error::Check(CheckError::MissingMetadata { .. })) => {}
        other => panic!("got {other:?}"),
    }

    let (tx, rx) = pair("shm");
    let receiver = checked_receiver(rx, 0, 0..WINDOW as u64);
    let remote = RemoteWindow::receive(&*tx, Some(WAIT)).unwrap();
    let cfg = CacheConfig::new().flush_timeout(Some(Duration::from_secs(5)));
    let mut cache = CommCache::new(&*tx, remote, cfg).unwrap();
    cache.insert(0, &[1; 64]).unwrap();
    cache.insert(256, &[1; 64]).unwrap(); // not contiguous: a message, not an RMA
    let _ = cache.flush();
    match receiver.join().unwrap().0 {
        Err(Error::Check(CheckError::MissingMetadata { .. })) => {}
        other => panic!("got {other:?}"),
    }
}
