//! Another local user against shm: the attacks of issue 29's audit, as tests. The test
//! runs as root and plays the victim; `accio-intruder` runs as an unused uid and plays the
//! attacker. Without root (no second user to be) they say so and pass.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use accio::{Access, ErrorKind, MemView, Options, PeerUids, Region, ShmOptions};

/// A uid no account uses: the intruder.
const INTRUDER: u32 = 54_321;

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    eprintln!("skipped: needs root (to run a process as a second user)");
    false
}

/// The intruder binary, copied where the intruder's uid can run it (the checkout may not
/// be traversable by other users); the directory goes with the guard.
struct Intruder {
    dir: PathBuf,
    exe: PathBuf,
}

impl Intruder {
    fn new(tag: &str) -> Intruder {
        let dir = std::env::temp_dir().join(format!("accio-intruder-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create(&dir)
            .expect("intruder directory");
        let exe = dir.join("accio-intruder");
        std::fs::copy(env!("CARGO_BIN_EXE_accio-intruder"), &exe).expect("copy the intruder");
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Intruder { dir, exe }
    }

    fn spawn(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        let mut cmd = Command::new(&self.exe);
        cmd.args(args)
            .envs(env.iter().copied())
            .uid(INTRUDER)
            .gid(INTRUDER)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        // A test thread that forks while another copies the binary makes the copy's
        // descriptor live on in that child until it execs: `ETXTBSY` for a moment.
        for _ in 0..50 {
            match cmd.spawn() {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                r => return r.expect("spawn the intruder"),
            }
        }
        panic!("the intruder binary stayed busy (ETXTBSY)")
    }
}

impl Drop for Intruder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The intruder's report, once it exited: its lines, and that it exited 0.
fn report(mut child: Child) -> Vec<String> {
    let out = child.stdout.take().expect("stdout");
    let lines: Vec<String> = BufReader::new(out).lines().map_while(Result::ok).collect();
    let status = child.wait().expect("wait for the intruder");
    assert!(
        status.success(),
        "the intruder failed ({status}): {lines:#?}"
    );
    lines
}

fn assert_all_refused(lines: &[String], attempts: &[&str]) {
    for a in attempts {
        let line = lines
            .iter()
            .find(|l| l.starts_with(a))
            .unwrap_or_else(|| panic!("the intruder did not try {a:?}: {lines:#?}"));
        assert!(line.contains(": refused ("), "the attack succeeded: {line}");
    }
    assert!(
        !lines.iter().any(|l| l.contains("SUCCEEDED")),
        "an attack succeeded: {lines:#?}"
    );
}

/// Finding 1: another user binds the victim's `shm://NAME` first. The victim's connect
/// fails naming the squatter's uid, and the squatter receives nothing at all: not the
/// hello, not the ring memory.
#[test]
fn a_squatted_shm_address_is_refused_before_anything_is_sent() {
    if !root() {
        return;
    }
    let intruder = Intruder::new("squat");
    let name = format!("squatted-{}", std::process::id());
    let mut child = intruder.spawn(&["squat-shm", "0", &name], &[]);
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut ready = String::new();
    out.read_line(&mut ready).expect("ready line");
    assert_eq!(ready.trim(), "ready", "the squatter could not bind");
    let err = accio::connect(&format!("shm://{name}"), Duration::from_secs(2))
        .expect_err("connected to a squatter");
    assert_eq!(err.kind(), ErrorKind::Untrusted, "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("uid {INTRUDER}")) && text.contains("ACCIO_SHM_ALLOW_UIDS"),
        "the error does not say who listens and what to do: {text}"
    );
    child.stdout = Some(out.into_inner());
    let lines = report(child);
    assert_all_refused(&lines, &["intercept"]);
}

/// The listener side: a process of another user is refused unless admitted.
#[test]
fn another_users_connection_is_refused_by_the_listener() {
    if !root() {
        return;
    }
    let intruder = Intruder::new("refused");
    let name = format!("owner-only-{}", std::process::id());
    let listener = accio::listen(&format!("shm://{name}")).expect("listen");
    // The intruder admits us (uid 0), we do not admit it.
    let child = intruder.spawn(
        &["read-only-window", &name],
        &[("ACCIO_SHM_ALLOW_UIDS", "0")],
    );
    let err = listener
        .accept(Some(Duration::from_secs(3)))
        .expect_err("accepted another user");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let out = child.wait_with_output().expect("intruder");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("connect: refused (")
            && text.contains(&format!("does not admit this process's uid {INTRUDER}")),
        "the intruder connected, or was not told why not: {text}"
    );
}

/// Window memory reaches the peer with the window's rights: an admitted peer of another
/// user, given a read-only window, cannot write it by RMA, by a store through
/// `map_remote`, by a writable mapping of the descriptor it got, or by reopening that
/// descriptor; the victim's bytes stay as they were. Both for a fresh `register`ed window
/// (sealed against writable mappings) and for a view of the caller's own region (sent as a
/// read-only descriptor).
#[test]
fn a_read_only_window_cannot_be_written_by_the_peer() {
    if !root() {
        return;
    }
    let intruder = Intruder::new("window");
    for fresh in [true, false] {
        let name = format!("read-only-{}-{fresh}", std::process::id());
        let opts = ShmOptions {
            allow_uids: PeerUids::new(&[INTRUDER]).expect("one uid"),
            ..ShmOptions::from_env()
        };
        let listener = accio::listen_with(&format!("shm://{name}"), &Options::new().with(opts))
            .expect("listen");
        let child = intruder.spawn(
            &["read-only-window", &name],
            &[("ACCIO_SHM_ALLOW_UIDS", "0")],
        );
        let ep = listener
            .accept(Some(Duration::from_secs(10)))
            .expect("accept the admitted peer");
        let window = if fresh {
            ep.register(4096, Access::READ).expect("register")
        } else {
            let region = Region::shareable(4096, "accio-window-view-test", true).expect("region");
            ep.register_view(&MemView::whole(Arc::new(region)), Access::READ)
                .expect("register_view")
        };
        let secret = b"the victim's data";
        window
            .write_at(0, secret)
            .expect("our own window is writable");
        ep.send(&window.offset().to_le_bytes())
            .expect("send the offset");
        let mut buf = Vec::new();
        ep.recv_timeout(&mut buf, Some(Duration::from_secs(10)))
            .expect("the intruder's done");
        let mut now = vec![0u8; 4096];
        window.read_at(0, &mut now).expect("read back");
        assert_eq!(
            &now[..secret.len()],
            secret,
            "the intruder wrote (fresh: {fresh})"
        );
        assert!(
            now[secret.len()..].iter().all(|&b| b == 0),
            "the intruder wrote"
        );
        drop(ep);
        let lines = report(child);
        assert_all_refused(
            &lines,
            &[
                "vwrite_to",
                "map_remote store",
                "writable mmap of fd",
                "reopen of fd",
            ],
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("descriptors examined: ") && l != "descriptors examined: 0"),
            "the intruder found no window descriptor to attack: {lines:#?}"
        );
    }
}
