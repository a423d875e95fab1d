//! A connected backend: listening, starting the peer process and accepting it, turning a
//! failure into an error that says whether the peer died, and shutting down.

use std::time::Duration;

use accio::{Endpoint, ErrorKind, Listener};

use super::driver::{self, Fail};
use super::measure::check_interrupt;
use super::{os, BenchError, Options, PeerConfig, EXIT_GRACE, STARTUP_TIMEOUT};

/// A connected backend: the listener, the endpoint to the peer, and the peer process (none
/// when the peer is a thread, in tests).
pub(super) struct Session {
    pub(super) backend: String,
    pub(super) listener: Box<dyn Listener>,
    pub(super) ep: Box<dyn Endpoint>,
    pub(super) child: Option<os::PeerProcess>,
    pub(super) peer_pid: u64,
}

/// Distinguishes shm names of successive sessions of one process.
static SESSION_SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Session {
    /// Listens, starts the peer and waits for its hello. The inner `Err` is a reason to skip
    /// the backend (it cannot listen in this build).
    pub(super) fn open(
        backend: &str,
        opts: &Options,
        cpus: Option<(usize, usize)>,
    ) -> Result<Result<Session, String>, BenchError> {
        let pid = std::process::id();
        let addr = match backend {
            "shm" => {
                let n = SESSION_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                format!("shm://accio-bench-{pid}-{n}")
            }
            _ => format!("{backend}://127.0.0.1:0"),
        };
        let ctx = |source| BenchError::Endpoint {
            backend: backend.into(),
            scenario: "startup".into(),
            source: Box::new(source),
        };
        let listener = match accio::listen(&addr) {
            Ok(l) => l,
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                return Ok(Err(format!("backend {backend}: {e}")))
            }
            Err(e) => return Err(ctx(e)),
        };
        let cfg = PeerConfig {
            addr: listener.local_addr().to_string(),
            cpu: cpus.map(|c| c.1),
            parent: Some(pid),
        };
        let mut child = os::PeerProcess::spawn(&opts.peer, &cfg.to_args()).map_err(|source| {
            BenchError::Spawn {
                backend: backend.into(),
                program: opts.peer.program.display().to_string(),
                source,
            }
        })?;
        let ep = accept_peer(&*listener, &mut child, backend, &cfg.addr)?;
        let mut s = Session {
            backend: backend.into(),
            listener,
            ep,
            child: Some(child),
            peer_pid: 0,
        };
        s.peer_pid = driver::hello(&*s.ep, STARTUP_TIMEOUT).map_err(|f| s.fail("startup", f))?;
        Ok(Ok(s))
    }

    /// Turns a scenario failure into an error that says whether the peer died.
    pub(super) fn fail(&mut self, scenario: &str, f: Fail) -> BenchError {
        let (backend, scenario) = (self.backend.clone(), scenario.to_string());
        if crate::cancel::interrupted() {
            return BenchError::Interrupted { backend, scenario };
        }
        let dead = self.child.as_mut().and_then(|c| {
            // A peer that died is noticed by the driver a moment before it can be reaped.
            c.exit_status(Duration::from_millis(500))
                .map(|s| (c.pid(), os::describe_exit(s)))
        });
        match (f, dead) {
            (Fail::Peer { text, .. }, _) => BenchError::PeerFailed {
                backend,
                scenario,
                text,
            },
            (Fail::Accio(e), Some((pid, status))) => BenchError::PeerDied {
                backend,
                scenario,
                pid,
                status,
                cause: Some(e.to_string()),
            },
            (Fail::Accio(source), None) => BenchError::Endpoint {
                backend,
                scenario,
                source: Box::new(source),
            },
        }
    }

    /// Tells the peer to quit and reaps it.
    pub(super) fn close(mut self) -> Result<(), BenchError> {
        if let Err(f) = driver::quit(&*self.ep) {
            return Err(self.fail("shutdown", f));
        }
        if let Some(child) = self.child.take() {
            let pid = child.pid();
            match child.finish(EXIT_GRACE) {
                Some(s) if s.success() => {}
                status => {
                    return Err(BenchError::PeerDied {
                        backend: self.backend.clone(),
                        scenario: "shutdown".into(),
                        pid,
                        status: status.map_or("could not be reaped".into(), os::describe_exit),
                        cause: None,
                    })
                }
            }
        }
        Ok(())
    }
}

/// Accepts the peer's first connection, noticing a peer that exits before connecting.
fn accept_peer(
    listener: &dyn Listener,
    child: &mut os::PeerProcess,
    backend: &str,
    addr: &str,
) -> Result<Box<dyn Endpoint>, BenchError> {
    let deadline = std::time::Instant::now() + STARTUP_TIMEOUT;
    loop {
        match listener.accept(Some(Duration::from_millis(100))) {
            Ok(ep) => return Ok(ep),
            Err(e) if e.kind() == ErrorKind::Timeout => {}
            Err(source) => {
                return Err(BenchError::Endpoint {
                    backend: backend.into(),
                    scenario: format!("startup (accepting the peer on {addr})"),
                    source: Box::new(source),
                })
            }
        }
        check_interrupt(backend, "startup")?;
        if let Some(s) = child.exit_status(Duration::ZERO) {
            return Err(BenchError::PeerDied {
                backend: backend.into(),
                scenario: format!("startup, before connecting to {addr}"),
                pid: child.pid(),
                status: os::describe_exit(s),
                cause: None,
            });
        }
        if std::time::Instant::now() >= deadline {
            return Err(BenchError::Endpoint {
                backend: backend.into(),
                scenario: "startup".into(),
                source: Box::new(accio::Error::Timeout {
                    op: "accept",
                    resource: format!("{addr} (waiting for peer pid {})", child.pid()),
                    after: STARTUP_TIMEOUT,
                }),
            });
        }
    }
}
