//! Options, errors, and every scenario against an in-process peer.

use super::measure::{link, measure_backend, Context};
use super::session::Session;
use super::*;
use accio::Listener;
use accio_results::event::Event;
use accio_results::model::{Figure, Recorder};

fn opts() -> Options {
    Options::new(PeerCommand {
        program: "/nonexistent".into(),
        args: vec![],
    })
}

#[test]
fn option_defaults() {
    let o = opts();
    assert_eq!(o.backends, vec!["shm", "tcp"]);
    assert!(o.pin && !o.quick && o.repetitions.is_none());
    assert_eq!(o.effective_sizes().unwrap(), DEFAULT_SIZES);
    let q = Options { quick: true, ..o };
    assert_eq!(
        q.effective_sizes().unwrap(),
        vec![8, 4096, 512 << 10, 2 << 20]
    );
}

#[test]
fn sizes_and_backends_are_validated() {
    let mut o = opts();
    o.sizes = Some(vec![8, 8, 4096]);
    assert_eq!(o.effective_sizes().unwrap(), vec![8, 4096]);
    o.sizes = Some(vec![0]);
    assert!(o
        .effective_sizes()
        .unwrap_err()
        .to_string()
        .contains("size 0"));
    o.sizes = Some(vec![2 << 30]);
    assert!(o
        .effective_sizes()
        .unwrap_err()
        .to_string()
        .contains("2G is above the bench's limit of 1G"));
    o.backends = vec!["tcp".into(), "tcp".into()];
    assert_eq!(o.effective_backends().unwrap(), vec!["tcp"]);
    o.backends = vec!["ib".into()];
    assert_eq!(
        o.effective_backends().unwrap_err().to_string(),
        "unknown backend \"ib\" (known: shm, tcp)"
    );
}

#[test]
fn peer_died_error_names_backend_and_scenario() {
    let e = BenchError::PeerDied {
        backend: "shm".into(),
        scenario: "stream_bw 2M".into(),
        pid: 7,
        status: "was killed by signal 9 (SIGKILL)".into(),
        cause: Some("peer shm://x is gone: hang-up".into()),
    };
    assert_eq!(
        e.to_string(),
        "the shm peer process (pid 7) was killed by signal 9 (SIGKILL) during stream_bw 2M \
         (the driver saw: peer shm://x is gone: hang-up)"
    );
}

/// The whole driver/peer protocol over an in-process endpoint pair: every scenario
/// yields figures with the right metric, parameters and ceilings.
#[test]
fn all_scenarios_run_against_an_in_process_peer() {
    let (listener, connector) = mock::listener("mock://bench");
    let parent = connector.connect();
    let peer_ep = listener.accept(None).unwrap();
    let c2 = connector.clone();
    let peer = std::thread::spawn(move || serve(&*peer_ep, &move || Ok(c2.connect())));
    let mut s = Session {
        backend: "mock".into(),
        listener: Box::new(listener),
        ep: parent,
        child: None,
        peer_pid: 0,
    };
    s.peer_pid = driver::hello(&*s.ep, Duration::from_secs(5)).unwrap();
    assert_eq!(s.peer_pid, u64::from(std::process::id()));

    let mut o = opts();
    o.quick = true;
    o.repetitions = Some(3);
    let sizes = [8u64, 5000];
    let cx = Context {
        opts: &o,
        sizes: &sizes,
        cpus: None,
    };
    let mut rec = Recorder::new(None).unwrap();
    let mut lines = Vec::new();
    measure_backend(&mut s, &cx, &mut rec, &mut |e| {
        if let Event::Figure(f) = e {
            lines.push(accio_report::text::transport::describe(f));
        }
    })
    .unwrap();
    s.close().unwrap();
    peer.join().unwrap().unwrap();

    let r = rec.report();
    for m in [metric::LATENCY, metric::STREAM_BW, metric::RMA_WRITE_BW] {
        let got: Vec<u64> = r
            .select(BENCH, m)
            .map(|f| f.params["size"].as_u64().unwrap())
            .collect();
        assert_eq!(got, sizes, "{m}");
        for f in r.select(BENCH, m) {
            assert_eq!(f.param_str("backend"), "mock");
            assert_eq!(f.summary.n, 3);
            assert!(f.summary.min > 0.0 && f.method.is_some());
            assert!(f.ceiling.as_ref().unwrap().ratio.is_some());
        }
    }
    // Each size's memcpy ceiling is measured beside that size's figures and attached.
    let memcpy: Vec<&Figure> = r.select(BENCH, metric::MEMCPY).collect();
    assert_eq!(memcpy.len(), 2);
    assert_eq!(memcpy[1].param_str("backend"), "mock");
    let gbps = memcpy[1].summary.median;
    let stream = r.select(BENCH, metric::STREAM_BW).nth(1).unwrap();
    let c = stream.ceiling.as_ref().unwrap();
    assert_eq!((c.name.as_str(), c.value), ("memcpy 5000, 1 thread", gbps));
    // Latency floor: the hop between the two cores, measured just before each size's
    // latency, plus one 5000-byte copy at that bandwidth.
    let floor: Vec<&Figure> = r.select(BENCH, metric::LATENCY_FLOOR).collect();
    assert_eq!(floor.len(), 2);
    assert_eq!(floor[1].param_u64("size"), Some(5000));
    let hop = floor[1].summary.min;
    assert!(hop > 0.0);
    let lat = r.select(BENCH, metric::LATENCY).nth(1).unwrap();
    let c = lat.ceiling.as_ref().unwrap();
    assert!((c.value - (hop + 5000.0 / (gbps * 1e3))).abs() < 1e-9);
    assert!(
        c.name.starts_with("cache-line hop ") && c.name.ends_with(" us + one memcpy of 5000"),
        "{}",
        c.name
    );
    assert_eq!(
        r.select(BENCH, metric::CONNECT).next().unwrap().summary.n,
        10
    );
    let reg: Vec<u64> = r
        .select(BENCH, metric::REGISTER)
        .map(|f| f.params["size"].as_u64().unwrap())
        .collect();
    assert_eq!(reg, QUICK_REGISTER_SIZES);
    assert_eq!(r.select(BENCH, metric::UNREGISTER).count(), 3);
    assert!(lines
        .iter()
        .any(|l| l.starts_with("mock rma_write_bw 5000: ")));
    let table = accio_report::text::transport::render_tables(r);
    assert!(table.contains("mock: median") && table.contains("mock connect:"));
}

#[test]
fn a_peer_that_stops_answering_is_reported_with_the_scenario() {
    let (listener, connector) = mock::listener("mock://dies");
    let parent = connector.connect();
    let peer_ep = listener.accept(None).unwrap();
    let mut s = Session {
        backend: "mock".into(),
        listener: Box::new(listener),
        ep: parent,
        child: None,
        peer_pid: 0,
    };
    drop(peer_ep);
    let r = driver::stream(&link(&s), 64, &Plan::for_size(64, true, Some(1)));
    assert!(r.is_err());
    let e = s.fail("stream_bw 64", r.unwrap_err());
    let text = e.to_string();
    assert!(
        text.starts_with("mock stream_bw 64: peer shm://mock-dies is gone"),
        "{text}"
    );
}
