//! `accio.World`: this process as one rank of a world, the way `mpi4py.MPI.COMM_WORLD` is.
//!
//! A thin layer over `accio_world::World`: the world's endpoints are cached here, one per
//! peer, so that `world.endpoint(r)` is a name for "the connection to rank r" as a rank
//! number is in MPI, not a new connection per call as in Rust.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use accio_world::WorldError;
use pyo3::prelude::*;

use super::{guarded, invalid_arg, Endpoint, Error, Failure, Int, Timeout, SLICE};

impl From<WorldError> for Failure {
    fn from(e: WorldError) -> Self {
        Failure::World(e)
    }
}

/// The exception for one world error: a transport failure keeps its class (`PeerGone`,
/// `Timeout`...) with the world's message, which names both ranks and the backend.
pub(crate) fn world_err(e: &WorldError) -> PyErr {
    match e {
        WorldError::Timeout { .. } => Timeout::new_err(e.to_string()),
        WorldError::Transport { source, .. } => {
            let err = super::transport_err(source);
            Python::attach(|py| PyErr::from_type(err.get_type(py), e.to_string()))
        }
        _ => Error::new_err(e.to_string()),
    }
}

/// This process as one rank of a world (`accio.World()`, best used as a context manager).
#[pyclass(module = "accio", frozen)]
pub(crate) struct World {
    world: Mutex<Option<Arc<accio_world::World>>>,
    pub(crate) rank: usize,
    pub(crate) size: usize,
    /// The endpoints by peer rank, and a wake-up for threads waiting on a connect.
    eps: Mutex<HashMap<usize, Slot>>,
    connected: Condvar,
}

/// A peer's entry in the endpoint cache.
enum Slot {
    /// A thread is connecting to the peer; others wait for it rather than connect twice
    /// (the pair would then hold two connections, and the peer accept only one).
    Connecting,
    Ready(Py<Endpoint>),
}

impl World {
    pub(crate) fn world(&self) -> PyResult<Arc<accio_world::World>> {
        let w = self.world.lock().unwrap_or_else(|p| p.into_inner());
        w.clone()
            .ok_or_else(|| Error::new_err("accio.World: the world is closed (close() was called)"))
    }

    /// `peer` as another rank of this world, or `InvalidArgument` naming the call.
    fn peer(&self, op: &str, peer: Int) -> PyResult<usize> {
        let p = peer.usize(op, "rank")?;
        if p >= self.size {
            return Err(invalid_arg(format!(
                "{op}: rank={p} is outside the world of {} ranks (0..{})",
                self.size,
                self.size - 1
            )));
        }
        if p == self.rank {
            return Err(invalid_arg(format!(
                "{op}: rank={p} is this rank: there is no endpoint to oneself"
            )));
        }
        Ok(p)
    }
}

#[pymethods]
impl World {
    /// Joins the world this process was started in: `accio run -n N` (the variables it
    /// sets), or mpirun/srun when this build has MPI (`pip install` with `--features mpi`).
    /// Waits for every rank to join, at most `ACCIO_WORLD_TIMEOUT_MS` (10 s by default;
    /// `accio run --timeout`).
    #[new]
    fn new(py: Python<'_>) -> PyResult<World> {
        let w = guarded(py, || Ok(accio_world::World::from_env()?))?;
        Ok(World {
            rank: w.rank(),
            size: w.size(),
            world: Mutex::new(Some(Arc::new(w))),
            eps: Mutex::new(HashMap::new()),
            connected: Condvar::new(),
        })
    }

    /// This process's rank, 0 .. size - 1.
    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    #[getter]
    fn size(&self) -> usize {
        self.size
    }

    /// This rank's node, as text (host name, then what tells nodes apart).
    #[getter]
    fn node(&self) -> PyResult<String> {
        let w = self.world()?;
        Ok(w.node(self.rank).map_err(|e| world_err(&e))?.to_string())
    }

    /// The ranks on this rank's node, itself included, ascending.
    #[getter]
    fn node_ranks(&self) -> PyResult<Vec<usize>> {
        Ok(self.world()?.node_ranks())
    }

    /// The backend the rule chose for the pair (this rank, `rank`) and why, as
    /// `(scheme, reason)`: `("shm", "same node (...)")`.
    fn choice(&self, rank: Int) -> PyResult<(String, String)> {
        let p = self.peer("World.choice", rank)?;
        let w = self.world()?;
        let c = w.choice(p).map_err(|e| world_err(&e))?;
        Ok((c.scheme.clone(), c.reason.clone()))
    }

    /// The endpoint to `rank`, over the backend `choice(rank)` names. The first call for a
    /// rank connects, and is collective for the pair: `rank` must call `endpoint` for this
    /// rank too (within the world's timeout). Later calls return the same endpoint; after
    /// its `close()`, the next call connects anew (collective again). Threads asking for
    /// the same rank at once share one connection: the others wait for the first.
    fn endpoint(&self, py: Python<'_>, rank: Int) -> PyResult<Py<Endpoint>> {
        let p = self.peer("World.endpoint", rank)?;
        let lock = || self.eps.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            {
                let mut eps = lock();
                match eps.get(&p) {
                    Some(Slot::Ready(ep)) if ep.try_borrow(py).map_or(true, |e| e.ep.is_some()) => {
                        return Ok(ep.clone_ref(py));
                    }
                    Some(Slot::Connecting) => {}
                    _ => {
                        eps.insert(p, Slot::Connecting);
                        break;
                    }
                }
            }
            // Another thread is connecting to `rank`: wait for it without the GIL (it needs
            // the GIL to finish), then look again.
            py.detach(|| {
                let eps = lock();
                drop(
                    self.connected
                        .wait_while(eps, |m| matches!(m.get(&p), Some(Slot::Connecting)))
                        .unwrap_or_else(|e| e.into_inner()),
                );
            });
        }
        // Connecting may wait for the peer: without the GIL and without the cache's lock.
        let made = self
            .world()
            .and_then(|w| guarded(py, move || Ok(w.endpoint(p)?)))
            .and_then(|ep| Py::new(py, Endpoint::new(ep)));
        let mut eps = lock();
        match &made {
            Ok(ep) => eps.insert(p, Slot::Ready(ep.clone_ref(py))),
            Err(_) => eps.remove(&p),
        };
        self.connected.notify_all();
        made
    }

    /// Waits until every rank has called `barrier` (collective). `timeout` in seconds
    /// (None: as long as it takes; a rank that died raises `PeerGone`). Ctrl-C interrupts
    /// it within 20 ms; a barrier that raised `Timeout` may be called again and resumes.
    #[pyo3(signature = (timeout=None))]
    fn barrier(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        let total = super::opt_secs("World.barrier", "timeout", timeout)?;
        let w = self.world()?;
        let start = Instant::now();
        loop {
            let slice = match total {
                Some(t) => t.saturating_sub(start.elapsed()).min(SLICE),
                None => SLICE,
            };
            match guarded(py, || Ok(w.barrier(Some(slice))?)) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_instance_of::<Timeout>(py) => {
                    py.check_signals()?;
                    if total.is_some_and(|t| start.elapsed() >= t) {
                        // The last slice's error names the rank still awaited; the time is
                        // the whole call's.
                        let what = e.value(py).to_string();
                        let what = what.split(" within ").next().unwrap_or(&what);
                        return Err(Timeout::new_err(format!(
                            "World.barrier: {what} within {:?} (a new call resumes this barrier)",
                            start.elapsed()
                        )));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Closes every endpoint of this world and leaves it; other ranks see `PeerGone` on
    /// theirs. Idempotent; `with accio.World() as w:` calls it on the way out.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let eps: Vec<Py<Endpoint>> = {
            let mut eps = self.eps.lock().unwrap_or_else(|e| e.into_inner());
            let ready = eps.extract_if(|_, s| matches!(s, Slot::Ready(_)));
            ready
                .filter_map(|(_, s)| match s {
                    Slot::Ready(ep) => Some(ep),
                    Slot::Connecting => None,
                })
                .collect()
        };
        // An endpoint another thread is using right now is left to close when that call
        // and the last reference to it end.
        let open: Vec<_> = eps
            .iter()
            .filter_map(|ep| ep.try_borrow_mut(py).ok().and_then(|mut e| e.ep.take()))
            .collect();
        let w = self.world.lock().unwrap_or_else(|p| p.into_inner()).take();
        // Closing connections and joining the world's acceptor threads (up to 200 ms) may
        // wait: without the GIL.
        py.detach(move || drop((open, w)));
        Ok(())
    }

    fn __enter__(slf: Py<World>) -> Py<World> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _ty: Option<Bound<'_, PyAny>>,
        _value: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<accio.World rank {} of {}>", self.rank, self.size)
    }
}
