//! The endpoint pair: this thread sends, a receiver thread owns the window and applies,
//! counts or acknowledges what arrives.

use std::sync::mpsc;
use std::thread::JoinHandle;

use accio::{Access, Endpoint, ErrorKind, Listener};
use accio_coalesce::{Applier, Deaggregator, RemoteWindow};

use super::{Error, RECEIVER_ID, WAIT};

/// What the receiver thread is told to do next.
pub(super) enum Cmd {
    /// Run an applier (checked with this node id, or not) until the cache closes.
    Apply(Option<u32>),
    /// Receive this many messages (aggregated batches or plain), then acknowledge. `fresh`:
    /// they come from a new aggregator, whose sequence numbers start again at 0.
    Count {
        messages: u64,
        aggregated: bool,
        fresh: bool,
    },
}

/// The acknowledgement the receiver sends after counting messages.
pub(super) const COUNTED: &[u8] = b"counted";

/// A connected endpoint pair: this thread sends, a receiver thread owns the window.
pub(super) struct Pair {
    pub(super) backend: String,
    ep: Option<Box<dyn Endpoint>>,
    pub(super) remote: RemoteWindow,
    ctl: Option<mpsc::Sender<Cmd>>,
    receiver: Option<JoinHandle<Result<(), String>>>,
}

impl Pair {
    pub(super) fn open(backend: &str, window: u64) -> Result<Pair, Error> {
        let ep_err = |what: &str, e: accio::Error| Error::Endpoint {
            backend: backend.into(),
            what: what.into(),
            source: Box::new(e),
        };
        let addr = match backend {
            "shm" => format!(
                "shm://accio-coalesce-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ),
            "tcp" => "tcp://127.0.0.1:0".to_string(),
            other => return Err(Error::Options(format!("unknown backend {other:?}"))),
        };
        let listener = accio::listen(&addr).map_err(|e| ep_err("listening", e))?;
        let addr = listener.local_addr().to_string();
        let (ctl, rx) = mpsc::channel();
        let receiver = std::thread::Builder::new()
            .name(format!("coalesce-rx-{backend}"))
            .spawn(move || receiver_main(listener, window as usize, rx))
            .map_err(|e| Error::Receiver {
                backend: backend.into(),
                reason: format!("starting the receiver thread: {e}"),
            })?;
        let mut pair = Pair {
            backend: backend.into(),
            ep: None,
            remote: RemoteWindow { offset: 0, len: 0 },
            ctl: Some(ctl),
            receiver: Some(receiver),
        };
        let ep = match accio::connect(&addr, WAIT) {
            Ok(ep) => ep,
            Err(e) => return Err(pair.fail(ep_err("connecting", e))),
        };
        match RemoteWindow::receive(&*ep, Some(WAIT)) {
            Ok(r) => pair.remote = r,
            Err(e) => {
                pair.ep = Some(ep);
                return Err(pair.fail(pair.co_err("receiving the window", e)));
            }
        }
        pair.ep = Some(ep);
        Ok(pair)
    }

    pub(super) fn ep(&self) -> &dyn Endpoint {
        &**self.ep.as_ref().expect("open pair")
    }

    pub(super) fn tell(&self, cmd: Cmd) {
        // A receiver that is gone shows as an endpoint error on the next call.
        let _ = self.ctl.as_ref().expect("open pair").send(cmd);
    }

    pub(super) fn ep_err(&self, what: impl Into<String>, e: accio::Error) -> Error {
        Error::Endpoint {
            backend: self.backend.clone(),
            what: what.into(),
            source: Box::new(e),
        }
    }

    pub(super) fn co_err(&self, what: impl Into<String>, e: accio_coalesce::Error) -> Error {
        Error::Coalesce {
            backend: self.backend.clone(),
            what: what.into(),
            source: Box::new(e),
        }
    }

    /// Ends the pair after an error: the receiver's own error, if it has one, explains
    /// more than the sender's (a sender only sees the peer go away).
    fn fail(&mut self, e: Error) -> Error {
        match self.shutdown() {
            Err(r) => r,
            Ok(()) => e,
        }
    }

    /// Closes the channel and the endpoint, then joins the receiver.
    pub(super) fn shutdown(&mut self) -> Result<(), Error> {
        self.ctl = None;
        self.ep = None;
        match self.receiver.take().map(JoinHandle::join) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(reason))) => Err(Error::Receiver {
                backend: self.backend.clone(),
                reason,
            }),
            Some(Err(_)) => Err(Error::Receiver {
                backend: self.backend.clone(),
                reason: "the receiver thread panicked".into(),
            }),
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The receiver thread: accept, register and announce the window, then serve commands
/// until the channel closes.
fn receiver_main(
    listener: Box<dyn Listener>,
    window: usize,
    rx: mpsc::Receiver<Cmd>,
) -> Result<(), String> {
    let ep = listener
        .accept(Some(WAIT))
        .map_err(|e| format!("accepting: {e}"))?;
    let win = ep
        .register(window, Access::WRITE)
        .map_err(|e| format!("registering a {window}-byte window: {e}"))?;
    Applier::new(&*ep, win.clone())
        .announce()
        .map_err(|e| format!("announcing the window: {e}"))?;
    let mut buf = Vec::new();
    // Sequence numbers continue from sample to sample of one aggregator.
    let mut de = Deaggregator::new(RECEIVER_ID);
    while let Ok(cmd) = rx.recv() {
        match cmd {
            Cmd::Apply(checked) => {
                let mut a = Applier::new(&*ep, win.clone());
                if let Some(me) = checked {
                    a = a.checked(me);
                }
                loop {
                    match a.next_flush(None) {
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        // The sender went away: it reports its own error.
                        Err(e) if is_peer_gone(&e) => return Ok(()),
                        Err(e) => return Err(format!("applying cache transfers: {e}")),
                    }
                }
            }
            Cmd::Count {
                messages,
                aggregated,
                fresh,
            } => {
                if fresh {
                    de = Deaggregator::new(RECEIVER_ID);
                }
                let mut got = 0u64;
                while got < messages {
                    let r = if aggregated {
                        de.recv(&*ep, &mut buf, None).map(|b| b.count() as u64)
                    } else {
                        ep.recv(&mut buf)
                            .map(|_| 1)
                            .map_err(accio_coalesce::Error::from)
                    };
                    match r {
                        Ok(n) => got += n,
                        Err(e) if is_peer_gone(&e) => return Ok(()),
                        Err(e) => return Err(format!("receiving messages: {e}")),
                    }
                }
                if let Err(e) = ep.send(COUNTED) {
                    return Err(format!("acknowledging {got} messages: {e}"));
                }
            }
        }
    }
    Ok(())
}

fn is_peer_gone(e: &accio_coalesce::Error) -> bool {
    matches!(e, accio_coalesce::Error::Endpoint(inner) if inner.kind() == ErrorKind::PeerGone)
}
