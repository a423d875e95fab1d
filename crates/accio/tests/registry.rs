//! The facade's backend registry: every scheme resolves to its backend, options reach the
//! backend the address selects (and only it), and an address of no backend is a clear error.

use std::time::Duration;

use accio::{ErrorKind, Options, ShmOptions, ShmStores, TcpOptions};

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn every_registered_scheme_is_served_and_listed() {
    assert_eq!(accio::schemes(), ["shm", "tcp"]);
    for b in accio::REGISTRY {
        assert_eq!(accio::backend(b.scheme).unwrap().scheme, b.scheme);
        assert!(!b.summary.is_empty());
    }
    assert!(accio::backend("udp").is_none());
}

#[test]
fn shm_ring_options_reach_the_connecting_endpoint() {
    let addr = format!("shm://registry-opts-{}", std::process::id());
    let listener = accio::listen(&addr).unwrap();
    let server = std::thread::spawn(move || listener.accept(Some(WAIT)).unwrap());
    let shm = ShmOptions {
        ring_bytes: 1 << 20,
        chunk_bytes: 64 << 10,
        spin: Duration::ZERO,
        stores: ShmStores::Streaming,
        ..ShmOptions::default()
    };
    // tcp options in the same set are ignored by an shm address.
    let opts = Options::new()
        .with(shm)
        .with(TcpOptions::new().max_try_send(4096));
    let ep = accio::connect_with(&addr, WAIT, &opts).unwrap();
    let server = server.join().unwrap();
    // shm's try_send limit is its record size: the option's, not the default 256 KiB.
    assert_eq!(ep.capabilities().max_try_send, 64 << 10);
    // Payloads written with streaming stores arrive whole (records of 64 KiB and a tail).
    let msg: Vec<u8> = (0..200_003u32).map(|i| (i % 251) as u8).collect();
    ep.send(&msg).unwrap();
    let mut got = Vec::new();
    server.recv(&mut got).unwrap();
    assert_eq!(got, msg);
}

#[test]
fn tcp_listener_options_reach_the_accepted_endpoints() {
    let listener = accio::listen_with(
        "tcp://127.0.0.1:0",
        &Options::new().with(TcpOptions::new().max_message(1000)),
    )
    .unwrap();
    let addr = listener.local_addr().to_string();
    let server = std::thread::spawn(move || listener.accept(Some(WAIT)).unwrap());
    let client = accio::connect(&addr, WAIT).unwrap();
    let _server = server.join().unwrap();
    // The accepting side announced its 1000-byte limit in the handshake.
    client.send(&[7u8; 1000]).unwrap();
    let err = client.send(&[7u8; 1001]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MessageTooLarge, "{err}");
}

#[test]
fn an_address_of_no_backend_is_a_clear_error() {
    let err = accio::connect("udp://127.0.0.1:9", WAIT).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadAddress);
    assert!(err.to_string().contains("unknown scheme"), "{err}");
}
