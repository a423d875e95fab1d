//! Where a tcp endpoint's secret comes from, and the per-user key file's safety checks.
//!
//! One test only: it changes the process's environment (HOME, ACCIO_TCP_SECRET, ...),
//! which no other test of this binary may read at the same time.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use accio_core::{Addr, Endpoint, Error, ErrorKind, Listener};
use accio_tcp::{TcpEndpoint, TcpListener, TcpOptions};

const T: Duration = Duration::from_secs(5);

fn loopback() -> Addr {
    "tcp://127.0.0.1:0".parse().unwrap()
}

/// Binds with the default secret resolution and connects to itself with `connect_opts`.
fn round_trip(connect_opts: TcpOptions) -> Result<(), Error> {
    let l = TcpListener::bind(&loopback())?;
    let addr = l.local_addr().clone();
    let c = std::thread::spawn(move || {
        TcpEndpoint::connect_with(&addr, T, connect_opts).map(|c| {
            c.send(b"ping").unwrap();
        })
    });
    let a = l.accept_tcp(Some(T));
    c.join().unwrap()?;
    let ep = a?;
    let mut buf = Vec::new();
    ep.recv_timeout(&mut buf, Some(T)).unwrap();
    assert_eq!(buf, b"ping");
    Ok(())
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn set_mode(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

#[track_caller]
fn refused(r: Result<(), Error>, needles: &[&str]) -> String {
    let e = r.expect_err("expected a refusal");
    let text = e.to_string();
    for n in needles {
        assert!(text.contains(n), "{n:?} not in {text}");
    }
    text
}

#[test]
fn secret_sources_and_key_file_checks() {
    let root = std::env::temp_dir().join(format!("accio-tcp-keyfile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let home = root.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::env::set_var("HOME", &home);
    for v in ["XDG_CONFIG_HOME", "ACCIO_TCP_SECRET", "ACCIO_TCP_KEY_FILE"] {
        std::env::remove_var(v);
    }
    let key: PathBuf = home.join(".config/accio/tcp.key");
    assert_eq!(accio_tcp::auth::default_key_file(), Some(key.clone()));

    // First use creates the key: 32 random bytes in hex, 0600, in a 0700 directory,
    // several processes' threads at once agreeing on one key with no temp file left.
    let racers: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(|| TcpListener::bind(&loopback()).map(|_| ())))
        .collect();
    for r in racers {
        r.join().unwrap().unwrap();
    }
    assert_eq!(mode(&key), 0o600);
    assert_eq!(mode(key.parent().unwrap()), 0o700);
    let text = std::fs::read_to_string(&key).unwrap();
    assert_eq!(text.len(), 65, "{text:?}");
    assert!(text.trim_end().bytes().all(|b| b.is_ascii_hexdigit()));
    let names: Vec<_> = std::fs::read_dir(key.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["tcp.key"]);
    round_trip(TcpOptions::new()).unwrap();
    // The key file is the secret: a connector holding its text explicitly gets in, one
    // holding another does not.
    round_trip(TcpOptions::new().secret(text.trim_end())).unwrap();
    refused(
        round_trip(TcpOptions::new().secret("another secret of 16+ bytes")),
        &["it failed authentication"],
    );

    // A key file others may read is refused, at bind and at connect, with the fix.
    set_mode(&key, 0o644);
    let e = refused(
        round_trip(TcpOptions::new()),
        &["tcp key file", "mode 0644", "chmod 600"],
    );
    assert!(!e.contains(text.trim_end()), "the key leaked: {e}");
    let addr: Addr = "tcp://127.0.0.1:9".parse().unwrap();
    let e = TcpEndpoint::connect(&addr, T).unwrap_err();
    assert!(e.to_string().contains("mode 0644"), "{e}");
    set_mode(&key, 0o600);

    // One owned by another user is refused (root can make one).
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::chown(&key, Some(54321), None).unwrap();
        refused(
            round_trip(TcpOptions::new()),
            &["owned by uid 54321", "not by this user"],
        );
        std::os::unix::fs::chown(&key, Some(0), None).unwrap();
    } else {
        println!("skipped the foreign owner case: needs root");
    }

    // A symbolic link in place of the per-user key file is refused.
    let elsewhere = root.join("elsewhere.key");
    std::fs::rename(&key, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &key).unwrap();
    refused(round_trip(TcpOptions::new()), &["symbolic link"]);
    std::fs::remove_file(&key).unwrap();

    // ACCIO_TCP_KEY_FILE names a key file (also checked, never created).
    std::env::set_var("ACCIO_TCP_KEY_FILE", &elsewhere);
    round_trip(TcpOptions::new()).unwrap();
    assert!(
        !key.exists(),
        "the per-user key was made though a key file was named"
    );
    set_mode(&elsewhere, 0o640);
    refused(
        round_trip(TcpOptions::new()),
        &["mode 0640", "ACCIO_TCP_KEY_FILE"],
    );
    std::env::set_var("ACCIO_TCP_KEY_FILE", root.join("missing.key"));
    refused(
        round_trip(TcpOptions::new()),
        &["missing.key", "ACCIO_TCP_KEY_FILE"],
    );

    // ACCIO_TCP_SECRET comes before the key file; a short one is refused.
    std::env::set_var("ACCIO_TCP_SECRET", "job secret: 0123456789abcdef");
    round_trip(TcpOptions::new()).unwrap();
    let e = refused(
        round_trip(TcpOptions::new().secret("explicit and other, 16+")),
        &["it failed authentication", "ACCIO_TCP_SECRET"],
    );
    assert!(!e.contains("0123456789abcdef"), "the secret leaked: {e}");
    std::env::set_var("ACCIO_TCP_SECRET", "short");
    let e = refused(round_trip(TcpOptions::new()), &["fewer than the 16"]);
    assert_eq!(
        TcpListener::bind(&loopback()).unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "{e}"
    );
    std::env::remove_var("ACCIO_TCP_SECRET");
    std::env::remove_var("ACCIO_TCP_KEY_FILE");

    // XDG_CONFIG_HOME, when absolute, holds the per-user key instead of ~/.config.
    let xdg = root.join("xdg");
    std::env::set_var("XDG_CONFIG_HOME", &xdg);
    round_trip(TcpOptions::new()).unwrap();
    assert_eq!(mode(&xdg.join("accio/tcp.key")), 0o600);
    std::env::remove_var("XDG_CONFIG_HOME");

    // Without HOME (a service, a scrubbed environment) the account's home directory is
    // used: this process's user's, as the account database has it.
    std::env::remove_var("HOME");
    let from_account = accio_tcp::auth::default_key_file().expect("the account's home");
    assert!(
        from_account.is_absolute() && from_account.ends_with(".config/accio/tcp.key"),
        "{}",
        from_account.display()
    );
    assert_ne!(from_account, home.join(".config/accio/tcp.key"));
    std::env::set_var("HOME", &home);

    std::fs::remove_dir_all(&root).unwrap();
}
