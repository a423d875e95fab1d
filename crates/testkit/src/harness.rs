//! What every test leans on: a deadline that turns a hang into a failure, isolation for tests
//! that inspect process-wide state, typed error assertions, and small message helpers.

use std::collections::BTreeSet;
use std::panic;
use std::process::Child;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::RwLock;
use std::time::Duration;

use accio::{Endpoint, Error, ErrorKind, Window};

/// Whether a test may share the process with other tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Runs beside other tests.
    Shared,
    /// Runs alone in this process: it inspects process-wide state (mappings, `/dev/shm`)
    /// or measures a deadline that other tests' load would blur.
    Exclusive,
}

/// Shared tests hold it for reading, exclusive ones for writing.
static SUITE_LOCK: RwLock<()> = RwLock::new(());

/// Runs `body` with `isolation`, failing the test if it runs longer than `limit`.
pub fn guarded<F>(name: &str, limit: Duration, isolation: Isolation, body: F)
where
    F: FnOnce() + Send + 'static,
{
    // Limits are set for release builds; unoptimized pattern checks are several times slower.
    let limit = if cfg!(debug_assertions) {
        limit * 4
    } else {
        limit
    };
    // A poisoned lock only means another test failed; the lock guards no data.
    let _shared;
    let _exclusive;
    match isolation {
        Isolation::Shared => _shared = SUITE_LOCK.read().unwrap_or_else(|e| e.into_inner()),
        Isolation::Exclusive => _exclusive = SUITE_LOCK.write().unwrap_or_else(|e| e.into_inner()),
    }
    with_timeout(name, limit, body)
}

/// Runs `body` on its own thread and returns its value; panics if it has not finished after
/// `limit` (the thread is left behind: a hung backend cannot be interrupted) and re-raises
/// its panic if it panicked.
pub fn with_timeout<T, F>(what: &str, limit: Duration, body: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(what.to_string())
        .spawn(move || {
            let _ = tx.send(body());
        })
        .expect("spawn test body thread");
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = handle.join();
            v
        }
        Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Err(payload) => panic::resume_unwind(payload),
            Ok(()) => unreachable!("the body sends before it returns"),
        },
        Err(RecvTimeoutError::Timeout) => {
            panic!("{what}: still running after {limit:?}; the backend hangs (thread left behind)")
        }
    }
}

/// Unwraps `r`, panicking with `what` and the error's text.
#[track_caller]
pub fn ok<T>(r: accio::Result<T>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: unexpected error ({:?}): {e}", e.kind()),
    }
}

/// Asserts that `r` failed with `kind` and returns the error.
#[track_caller]
pub fn expect_err<T: std::fmt::Debug>(r: accio::Result<T>, kind: ErrorKind, what: &str) -> Error {
    match r {
        Ok(v) => panic!("{what}: expected a {kind:?} error, got Ok({v:?})"),
        Err(e) if e.kind() == kind => e,
        Err(e) => panic!("{what}: expected a {kind:?} error, got {:?}: {e}", e.kind()),
    }
}

/// Asserts that the error's text contains every one of `parts`.
#[track_caller]
pub fn expect_text(e: &Error, parts: &[&str], what: &str) {
    let text = e.to_string();
    for p in parts {
        assert!(
            text.contains(p),
            "{what}: error text {text:?} does not name {p:?}"
        );
    }
}

/// Sends `values` as one message of little-endian words.
#[track_caller]
pub fn send_u64s(ep: &dyn Endpoint, values: &[u64]) {
    let msg: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    ok(ep.send(&msg), "send control message");
}

/// Receives one message of little-endian words.
#[track_caller]
pub fn recv_u64s(ep: &dyn Endpoint) -> Vec<u64> {
    let mut buf = Vec::new();
    let n = ok(
        ep.recv_timeout(&mut buf, Some(Duration::from_secs(10))),
        "recv control message",
    );
    assert_eq!(
        n,
        buf.len(),
        "recv returned {n} but the buffer holds {}",
        buf.len()
    );
    assert_eq!(
        n % 8,
        0,
        "control message of {n} bytes is not a list of words"
    );
    buf.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Tells `peer` where `owner`'s window is, as real programs do: registration becomes
/// visible to the peer no later than a message sent after it.
#[track_caller]
pub fn share_window(owner: &dyn Endpoint, peer: &dyn Endpoint, w: &Window) -> u64 {
    send_u64s(owner, &[w.offset(), w.len() as u64]);
    let got = recv_u64s(peer);
    assert_eq!(got, [w.offset(), w.len() as u64]);
    got[0]
}

/// A round trip `a -> b`: everything `a` did before is ordered before what `b` does after.
#[track_caller]
pub fn sync_point(a: &dyn Endpoint, b: &dyn Endpoint) {
    send_u64s(a, &[0x5157_4e43]);
    assert_eq!(recv_u64s(b), [0x5157_4e43]);
}

/// Reads `len` bytes of a window at `at`.
#[track_caller]
pub fn window_bytes(w: &Window, at: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    ok(w.read_at(at, &mut v), "read_at on own window");
    v
}

/// Writes stream `seed` over the whole window (byte `i` of the window = byte `i`).
#[track_caller]
pub fn fill_window(w: &Window, seed: u64) {
    ok(
        w.write_at(0, &crate::pattern::vec(w.len(), seed, 0)),
        "write_at on own window",
    );
}

/// Asserts that the window holds stream `seed` everywhere except `hole` (at, len,
/// hole_seed, hole_start), where it holds stream `hole_seed` from index `hole_start`.
#[track_caller]
pub fn assert_window(w: &Window, seed: u64, hole: Option<(usize, usize, u64, u64)>, what: &str) {
    let holes: Vec<_> = hole.into_iter().collect();
    assert_window_holes(w, seed, &holes, what)
}

/// [`assert_window`] with any number of non-overlapping holes.
#[track_caller]
pub fn assert_window_holes(w: &Window, seed: u64, holes: &[(usize, usize, u64, u64)], what: &str) {
    let all = window_bytes(w, 0, w.len());
    let mut holes = holes.to_vec();
    holes.sort_unstable();
    let mut pos = 0;
    for &(at, len, hole_seed, hole_start) in &holes {
        assert!(at >= pos, "overlapping holes");
        crate::pattern::assert_matches(
            &all[pos..at],
            seed,
            pos as u64,
            &format!("{what}: untouched bytes {pos:#x}..{at:#x}"),
        );
        crate::pattern::assert_matches(
            &all[at..at + len],
            hole_seed,
            hole_start,
            &format!("{what}: transferred bytes {at:#x}..{:#x}", at + len),
        );
        pos = at + len;
    }
    crate::pattern::assert_matches(
        &all[pos..],
        seed,
        pos as u64,
        &format!("{what}: untouched bytes {pos:#x}..{:#x}", all.len()),
    );
}

/// A child process that is killed and reaped when dropped, so a failing test leaves no
/// peer running.
#[derive(Debug)]
pub struct ChildGuard(pub Option<Child>);

impl ChildGuard {
    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.0.as_ref().expect("child already taken").id()
    }

    /// Takes the child out of the guard (it will no longer be killed on drop).
    pub fn take(&mut self) -> Child {
        self.0.take().expect("child already taken")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What a process leaves behind that might be shared memory of accio's: entries of
/// `/dev/shm` whose name contains "accio", and mappings of this process whose path
/// contains "accio" (the shm backend names its memfds `accio-...`, shown as
/// `/memfd:accio-... (deleted)`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Residue {
    /// Matching names under `/dev/shm`.
    pub dev_shm: BTreeSet<String>,
    /// Matching lines of `/proc/self/maps`.
    pub mappings: BTreeSet<String>,
}

impl Residue {
    /// Takes a snapshot now.
    pub fn now() -> Residue {
        let dev_shm = std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.contains("accio"))
                    .collect()
            })
            .unwrap_or_default();
        let mappings = std::fs::read_to_string("/proc/self/maps")
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                l.contains("memfd:accio") || (l.contains("/dev/shm/") && l.contains("accio"))
            })
            .map(str::to_string)
            .collect();
        Residue { dev_shm, mappings }
    }

    /// What `self` has that `before` had not.
    pub fn new_since(&self, before: &Residue) -> Residue {
        Residue {
            dev_shm: self.dev_shm.difference(&before.dev_shm).cloned().collect(),
            mappings: self
                .mappings
                .difference(&before.mappings)
                .cloned()
                .collect(),
        }
    }

    /// True if nothing is listed.
    pub fn is_empty(&self) -> bool {
        self.dev_shm.is_empty() && self.mappings.is_empty()
    }
}

/// Asserts that nothing accio-named appeared since `before`, allowing up to `grace` for
/// cleanup that a backend does on a background thread once the last handle is dropped.
#[track_caller]
pub fn assert_no_residue(before: &Residue, grace: Duration, what: &str) {
    let start = std::time::Instant::now();
    loop {
        let left = Residue::now().new_since(before);
        if left.is_empty() {
            return;
        }
        if start.elapsed() >= grace {
            panic!(
                "{what}: shared memory left behind {grace:?} after both sides were gone: \
                 /dev/shm entries {:?}, mappings of this process {:?}",
                left.dev_shm, left.mappings
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A one-shot barrier that gives up: `total` threads meet, or each fails after `limit`
/// (so one failed thread makes the others fail with a count instead of hanging).
#[derive(Debug)]
pub struct Latch {
    arrived: std::sync::Mutex<usize>,
    cv: std::sync::Condvar,
    total: usize,
}

impl Latch {
    /// A latch for `total` threads.
    pub fn new(total: usize) -> Latch {
        Latch {
            arrived: std::sync::Mutex::new(0),
            cv: std::sync::Condvar::new(),
            total,
        }
    }

    /// Arrives and waits for the others, at most `limit`.
    #[track_caller]
    pub fn arrive_and_wait(&self, limit: Duration, what: &str) {
        let mut n = self.arrived.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        self.cv.notify_all();
        let (n, res) = self
            .cv
            .wait_timeout_while(n, limit, |n| *n < self.total)
            .unwrap_or_else(|e| e.into_inner());
        if res.timed_out() {
            panic!(
                "{what}: only {} of {} threads arrived within {limit:?}",
                *n, self.total
            );
        }
    }
}
