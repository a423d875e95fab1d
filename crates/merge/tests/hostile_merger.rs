//! Finding 2 of the shared-node audit: a merger named a path in its `Direct` message and
//! the producer opened it for writing, so a merger (on a squatted address) could make a
//! producer overwrite any file the producer's user may write. The producer now takes only
//! the file the merger hands over its connection, and only a regular file open for
//! reading and writing; it never opens a path it was sent.

use std::time::Duration;

use accio_merge::wire::Msg;
use accio_merge::{Producer, ProducerOptions};

/// A merger that speaks the protocol up to the welcome, lending `file` (or nothing) with
/// a `Direct` message that names `victim`.
fn hostile_merger(
    name: &str,
    victim: &str,
    file: Option<std::fs::File>,
) -> std::thread::JoinHandle<()> {
    let listener = accio::listen(&format!("shm://{name}")).expect("listen");
    let victim = victim.as_bytes().to_vec();
    std::thread::spawn(move || {
        let ep = listener
            .accept(Some(Duration::from_secs(10)))
            .expect("accept");
        let mut buf = Vec::new();
        ep.recv(&mut buf).expect("hello");
        assert!(matches!(Msg::decode(&buf), Ok(Msg::Hello { .. })));
        if let Some(f) = &file {
            ep.send_file(f).expect("send_file");
        }
        let mut out = Vec::new();
        Msg::Direct {
            align: 4096,
            path: victim,
        }
        .encode(&mut out);
        ep.send(&out).expect("direct");
        Msg::Welcome {
            producer: 1,
            slot_bytes: 2 << 20,
            credit: 2,
        }
        .encode(&mut out);
        let _ = ep.send(&out);
        // Keep the connection until the producer gives up.
        let _ = ep.recv_timeout(&mut buf, Some(Duration::from_secs(5)));
    })
}

fn victim_file(tag: &str) -> (std::path::PathBuf, Vec<u8>) {
    let path = std::env::temp_dir().join(format!("accio-victim-{tag}-{}", std::process::id()));
    let content = b"a file the producer's user owns and no merger may touch\n".to_vec();
    std::fs::write(&path, &content).expect("victim");
    (path, content)
}

fn connect(name: &str) -> accio_merge::Result<Producer> {
    Producer::connect_with(
        &format!("shm://{name}"),
        ProducerOptions {
            timeout: Duration::from_secs(5),
            ..ProducerOptions::default()
        },
    )
}

#[test]
fn a_merger_naming_a_path_without_lending_the_file_is_refused() {
    let name = format!("hostile-path-{}", std::process::id());
    let (victim, content) = victim_file("path");
    let merger = hostile_merger(&name, victim.to_str().expect("utf-8"), None);
    let err = connect(&name).expect_err("the producer accepted a path");
    let text = err.to_string();
    assert!(
        text.contains("a file was announced but not sent"),
        "unclear error: {text}"
    );
    assert_eq!(
        std::fs::read(&victim).expect("victim"),
        content,
        "the victim changed"
    );
    merger.join().expect("merger thread");
    let _ = std::fs::remove_file(&victim);
}

#[test]
fn a_merger_lending_something_else_than_a_writable_regular_file_is_refused() {
    let name = format!("hostile-device-{}", std::process::id());
    let (victim, content) = victim_file("device");
    // A device, and a regular file open read-only: neither is an output to write in place.
    for lent in [
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .expect("/dev/null"),
        std::fs::File::open(&victim).expect("victim read-only"),
    ] {
        let merger = hostile_merger(&name, victim.to_str().expect("utf-8"), Some(lent));
        let err = connect(&name).expect_err("the producer took a device");
        let text = err.to_string();
        assert!(
            text.contains("not a regular file open for reading and writing"),
            "unclear error: {text}"
        );
        merger.join().expect("merger thread");
    }
    assert_eq!(
        std::fs::read(&victim).expect("victim"),
        content,
        "the victim changed"
    );
    let _ = std::fs::remove_file(&victim);
}
