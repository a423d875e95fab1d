//! An in-process endpoint pair for testing the bench's protocol without a backend: message
//! queues guarded by a mutex, windows in a shared table, RMA as a plain copy.

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use accio::{
    Access, Addr, Capabilities, Endpoint, Error, Listener, Mark, MemView, OffsetAllocator,
    Progress, Region, RemoteMap, Result, RmaFlags, Window,
};

#[derive(Default)]
struct Queue {
    state: Mutex<(VecDeque<Vec<u8>>, bool)>,
    ready: Condvar,
}

#[derive(Default)]
struct Space {
    windows: Mutex<BTreeMap<u64, Window>>,
    alloc: Mutex<OffsetAllocator>,
}

impl Space {
    fn find(&self, off: u64, len: usize) -> Result<(Window, usize)> {
        let w = self.windows.lock().unwrap();
        let (start, win) = w
            .range(..=off)
            .next_back()
            .ok_or_else(|| Error::invalid("rma", format!("no window at {off:#x}")))?;
        let at = (off - start) as usize;
        if at + len > win.len() {
            return Err(Error::invalid(
                "rma",
                format!("{off:#x} + {len} out of window"),
            ));
        }
        Ok((win.clone(), at))
    }
}

/// One end of a mock connection.
pub struct MockEp {
    tx: Arc<Queue>,
    rx: Arc<Queue>,
    mine: Arc<Space>,
    peer: Arc<Space>,
    addr: Addr,
}

impl std::fmt::Debug for MockEp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MockEp({})", self.addr)
    }
}

impl Drop for MockEp {
    fn drop(&mut self) {
        for q in [&self.tx, &self.rx] {
            q.state.lock().unwrap().1 = true;
            q.ready.notify_all();
        }
    }
}

fn pair(addr: &Addr) -> (MockEp, MockEp) {
    let (a, b) = (Arc::new(Queue::default()), Arc::new(Queue::default()));
    let (sa, sb) = (Arc::new(Space::default()), Arc::new(Space::default()));
    let mk = |tx: &Arc<Queue>, rx: &Arc<Queue>, mine: &Arc<Space>, peer: &Arc<Space>| MockEp {
        tx: tx.clone(),
        rx: rx.clone(),
        mine: mine.clone(),
        peer: peer.clone(),
        addr: addr.clone(),
    };
    (mk(&a, &b, &sa, &sb), mk(&b, &a, &sb, &sa))
}

impl Endpoint for MockEp {
    fn backend(&self) -> &'static str {
        "mock"
    }
    fn local_addr(&self) -> &Addr {
        &self.addr
    }
    fn peer_addr(&self) -> &Addr {
        &self.addr
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            map_remote: false,
            cpu_free_rma: true,
            max_try_send: usize::MAX,
        }
    }
    fn send(&self, msg: &[u8]) -> Result<()> {
        let mut s = self.tx.state.lock().unwrap();
        if s.1 {
            return Err(Error::peer_gone(&self.addr, "closed"));
        }
        s.0.push_back(msg.to_vec());
        self.tx.ready.notify_all();
        Ok(())
    }
    fn try_send(&self, msg: &[u8]) -> Result<Progress<()>> {
        self.send(msg).map(Progress::Ready)
    }
    fn recv_timeout(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut s = self.rx.state.lock().unwrap();
        loop {
            if let Some(m) = s.0.pop_front() {
                buf.clear();
                buf.extend_from_slice(&m);
                return Ok(m.len());
            }
            if s.1 {
                return Err(Error::peer_gone(&self.addr, "closed"));
            }
            s = match deadline {
                None => self.rx.ready.wait(s).unwrap(),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(Error::Timeout {
                            op: "recv",
                            resource: self.addr.to_string(),
                            after: timeout.unwrap_or_default(),
                        });
                    }
                    self.rx.ready.wait_timeout(s, d - now).unwrap().0
                }
            };
        }
    }
    fn try_recv(&self, buf: &mut Vec<u8>) -> Result<Progress<usize>> {
        match self.recv_timeout(buf, Some(Duration::ZERO)) {
            Ok(n) => Ok(Progress::Ready(n)),
            Err(e) if e.kind() == accio::ErrorKind::Timeout => Ok(Progress::WouldBlock),
            Err(e) => Err(e),
        }
    }
    fn register(&self, len: usize, access: Access) -> Result<Window> {
        self.register_view(&MemView::whole(Arc::new(Region::anonymous(len)?)), access)
    }
    fn register_view(&self, view: &MemView, access: Access) -> Result<Window> {
        let off = self.mine.alloc.lock().unwrap().allocate(view.len());
        let w = Window::new(view.clone(), off, access);
        self.mine.windows.lock().unwrap().insert(off, w.clone());
        Ok(w)
    }
    fn unregister(&self, offset: u64) -> Result<()> {
        self.mine
            .windows
            .lock()
            .unwrap()
            .remove(&offset)
            .map(drop)
            .ok_or_else(|| Error::invalid("unregister", format!("no window {offset:#x}")))
    }
    fn write_to(&self, local_off: u64, len: usize, remote_off: u64, _: RmaFlags) -> Result<()> {
        let (src, a) = self.mine.find(local_off, len)?;
        let (dst, b) = self.peer.find(remote_off, len)?;
        // SAFETY: both ranges were checked to lie inside their (distinct) windows.
        unsafe { accio::copy_bytes(dst.as_ptr().add(b), src.as_ptr().add(a), len) };
        Ok(())
    }
    fn read_from(&self, _: u64, _: usize, _: u64, _: RmaFlags) -> Result<()> {
        Err(Error::Unsupported {
            op: "read_from",
            backend: "mock",
        })
    }
    fn vwrite_to(&self, _: &[u8], _: u64, _: RmaFlags) -> Result<()> {
        Err(Error::Unsupported {
            op: "vwrite_to",
            backend: "mock",
        })
    }
    fn vread_from(&self, _: &mut [u8], _: u64, _: RmaFlags) -> Result<()> {
        Err(Error::Unsupported {
            op: "vread_from",
            backend: "mock",
        })
    }
    fn check_remote(&self, _: u64, _: usize, _: Access) -> Result<()> {
        Err(Error::Unsupported {
            op: "check_remote",
            backend: "mock",
        })
    }
    fn fence_mark(&self) -> Result<Mark> {
        Ok(Mark(0))
    }
    fn fence_wait(&self, mark: Mark) -> Result<()> {
        // The mock issues no RMA, so its only mark is 0.
        mark.check_issued(0)
    }
    fn fence_signal(&self, _: Option<(u64, u64)>, _: Option<(u64, u64)>) -> Result<()> {
        Ok(())
    }
    fn map_remote(&self, _: u64, _: usize) -> Result<RemoteMap> {
        Err(Error::Unsupported {
            op: "map_remote",
            backend: "mock",
        })
    }
}

/// Listener side of the mock.
#[derive(Debug)]
pub struct MockListener {
    addr: Addr,
    rx: Mutex<Receiver<Box<dyn Endpoint>>>,
}

/// Makes new connections to a [`MockListener`].
#[derive(Clone)]
pub struct Connector {
    addr: Addr,
    tx: Sender<Box<dyn Endpoint>>,
}

impl Connector {
    /// Connects: hands one end to the listener and returns the other.
    pub fn connect(&self) -> Box<dyn Endpoint> {
        let (a, b) = pair(&self.addr);
        self.tx.send(Box::new(b)).expect("mock listener alive");
        Box::new(a)
    }
}

/// A listener and its connector. `name` must parse as an address; `mock://x` is written as
/// a `shm` name internally (the address only appears in messages).
pub fn listener(name: &str) -> (MockListener, Connector) {
    let addr = Addr::Shm(name.replace("://", "-").replace(['/', ':'], "-"));
    let (tx, rx) = channel();
    (
        MockListener {
            addr: addr.clone(),
            rx: Mutex::new(rx),
        },
        Connector { addr, tx },
    )
}

impl Listener for MockListener {
    fn local_addr(&self) -> &Addr {
        &self.addr
    }
    fn accept(&self, timeout: Option<Duration>) -> Result<Box<dyn Endpoint>> {
        let rx = self.rx.lock().unwrap();
        match timeout {
            None => rx
                .recv()
                .map_err(|_| Error::peer_gone(&self.addr, "connector gone")),
            Some(t) => rx.recv_timeout(t).map_err(|_| Error::Timeout {
                op: "accept",
                resource: self.addr.to_string(),
                after: t,
            }),
        }
    }
}
