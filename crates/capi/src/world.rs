//! The rank world: `accio_world_join` and what a rank asks of it.
//!
//! A C program started by `accio run -n N PROG` (or by mpirun, with a libaccio built with
//! the `mpi` feature) joins its world as [`World::from_env`] does, then asks for an
//! endpoint to any rank. The world keeps the endpoints: the first `accio_world_endpoint`
//! for a peer connects (both ranks of the pair call it), later calls return the same handle,
//! and `accio_world_destroy` frees them all. That is the shape an MPI user expects of a
//! communicator (ask for rank r, get the way to r), and it spares C code a table of handles
//! and a protocol for who connects first.
//!
//! Threads: every call may come from any thread. Each peer's slot has a lock of its own, so
//! a thread waiting for one peer to connect does not hold up a thread connecting to
//! another (a rank may well reach its pairs in a different order than its peers do), and
//! two threads asking for the same peer get the same endpoint, connected once.

use std::ffi::{c_char, CString};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use ::accio_world::{World, WorldError};

use crate::endpoint::{free_world_endpoint, world_endpoint_handle};
use crate::{
    accio_endpoint, accio_status, destroy, guard, into_handle, need, obj, put, put_text, timeout,
    transport_status, CResult, Failure, Object,
};

/// This process's place in a world of ranks (from `accio_world_join`). May be used from
/// any thread; destroy it once no other thread uses it or its endpoints.
pub struct accio_world {
    _opaque: [u8; 0],
}

/// An endpoint handle the world owns; freed with the world.
struct OwnedEndpoint(*mut accio_endpoint);

// SAFETY: the handle is an endpoint object, which is Send + Sync (its backend endpoint is,
// and its inbox is behind a mutex); the pointer is only freed by the world's drop.
unsafe impl Send for OwnedEndpoint {}

impl Drop for OwnedEndpoint {
    fn drop(&mut self) {
        // SAFETY: made by world_endpoint_handle, freed only here, and the world (whose
        // destroy is the only way here) is not used by any thread any more.
        unsafe { free_world_endpoint(self.0) };
    }
}

/// The pair choice as C strings the world keeps (pointers handed out stay valid).
struct ChoiceText {
    scheme: CString,
    reason: CString,
}

pub(crate) struct WorldObj {
    // Declared (so dropped) before `world`: the endpoints close before the world's
    // acceptors stop.
    /// Per peer: the endpoint once connected.
    eps: Vec<Mutex<Option<OwnedEndpoint>>>,
    /// Per peer: the backend the rule chose and why (`None` for this rank).
    choices: Vec<Option<ChoiceText>>,
    world: World,
}

impl Object for WorldObj {
    const MAGIC: u64 = 0x776f_726c_6163_6337;
    const NAME: &'static str = "accio_world";
    type Opaque = accio_world;
}

impl WorldObj {
    pub(crate) fn new(world: World) -> CResult<WorldObj> {
        let size = world.size();
        let text = |s: &str| CString::new(s.replace('\0', "\\0")).unwrap_or_default();
        let choices = (0..size)
            .map(|p| {
                if p == world.rank() {
                    return Ok(None);
                }
                let c = world
                    .choice(p)
                    .map_err(|e| failure("accio_world_join", e, false))?;
                Ok(Some(ChoiceText {
                    scheme: text(&c.scheme),
                    reason: text(&c.reason),
                }))
            })
            .collect::<CResult<Vec<_>>>()?;
        Ok(WorldObj {
            eps: (0..size).map(|_| Mutex::new(None)).collect(),
            choices,
            world,
        })
    }

    /// Checks `peer` names another rank of the world, naming it when not.
    fn peer(&self, op: &str, peer: usize) -> CResult<usize> {
        let (rank, size) = (self.world.rank(), self.world.size());
        if peer >= size {
            return Err(Failure::invalid(
                op,
                format!(
                    "peer rank {peer} is outside the world of {size} ranks (0 to {})",
                    size - 1
                ),
            ));
        }
        if peer == rank {
            return Err(Failure::invalid(
                op,
                format!("peer rank {peer} is this rank: a rank has no endpoint to itself"),
            ));
        }
        Ok(peer)
    }
}

/// The status of a world error: every failure to join is `ACCIO_BOOTSTRAP`; afterwards a
/// timeout is `ACCIO_TIMEOUT`, a transport failure its own status, and a rank breaking the
/// world's protocol (a barrier called differently) `ACCIO_PROTOCOL`.
fn failure(op: &str, e: WorldError, joining: bool) -> Failure {
    use accio_status as S;
    let status = match &e {
        _ if joining => S::ACCIO_BOOTSTRAP,
        WorldError::Timeout { .. } => S::ACCIO_TIMEOUT,
        WorldError::Transport { source, .. } => transport_status(source),
        WorldError::Rank { .. } => S::ACCIO_PROTOCOL,
        WorldError::Config { .. } => S::ACCIO_INVALID_ARGUMENT,
        _ => S::ACCIO_BOOTSTRAP,
    };
    Failure::new(status, format!("{op}: {e}"))
}

/// Joins the world this process was started in and stores it in `*out`: `accio run -n N
/// PROG` (`ACCIO_RANK`, `ACCIO_SIZE`, `ACCIO_RENDEZVOUS`), or mpirun when this libaccio was
/// built with the `mpi` feature. Collective: every rank calls it once. Waits for the other
/// ranks at most `ACCIO_WORLD_TIMEOUT_MS` (default 10 s; `accio run --timeout` sets it).
/// Any failure (not launched so, the launcher gone, ranks that disagree, or mpirun with a
/// library built without MPI) is `ACCIO_BOOTSTRAP`, naming the variable or rank and why.
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_world_join(out: *mut *mut accio_world) -> accio_status {
    const OP: &str = "accio_world_join";
    guard(OP, || {
        need(OP, "out", out)?;
        let world = World::from_env().map_err(|e| failure(OP, e, true))?;
        let w = WorldObj::new(world)?;
        // SAFETY: out checked non-NULL above; writable by contract.
        unsafe { put(OP, "out", out, into_handle(w)) }
    })
}

/// Stores this process's rank (0 to size − 1) in `*rank`.
///
/// # Safety
/// `world` is a live world; `rank` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_world_rank(
    world: *const accio_world,
    rank: *mut usize,
) -> accio_status {
    const OP: &str = "accio_world_rank";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let w = unsafe { obj::<WorldObj>(OP, world)? };
        // SAFETY: the caller's contract.
        unsafe { put(OP, "rank", rank, w.world.rank()) }
    })
}

/// Stores the number of ranks in `*size`.
///
/// # Safety
/// `world` is a live world; `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_world_size(
    world: *const accio_world,
    size: *mut usize,
) -> accio_status {
    const OP: &str = "accio_world_size";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let w = unsafe { obj::<WorldObj>(OP, world)? };
        // SAFETY: the caller's contract.
        unsafe { put(OP, "size", size, w.world.size()) }
    })
}

/// Copies the name of `rank`'s node (host, kernel boot id and network namespace, e.g.
/// `"n1 (boot 3f2a9c1e, net:[4026531840])"`: ranks that share it may share memory) into
/// `buf` (`cap` bytes, NUL included) and its length into `*len` (may be NULL);
/// `ACCIO_BUFFER_TOO_SMALL` (length stored) when it does not fit. A rank outside the
/// world is `ACCIO_INVALID_ARGUMENT`.
///
/// # Safety
/// `world` is a live world; `buf` is writable for `cap` bytes; `len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn accio_world_node(
    world: *const accio_world,
    rank: usize,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> accio_status {
    const OP: &str = "accio_world_node";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let w = unsafe { obj::<WorldObj>(OP, world)? };
        let size = w.world.size();
        let node = w.world.node(rank).map_err(|_| {
            Failure::invalid(
                OP,
                format!(
                    "rank {rank} is outside the world of {size} ranks (0 to {})",
                    size - 1
                ),
            )
        })?;
        // SAFETY: the caller's contract.
        unsafe { put_text(OP, &node.to_string(), buf, cap, len) }
    })
}

/// Stores the ranks on this rank's node (itself included, ascending) in `ranks` (room for
/// `cap`) and their number in `*count`. Fewer than `*count` places fail with
/// `ACCIO_BUFFER_TOO_SMALL` (the count stored, nothing else); `cap` = size always suffices.
///
/// # Safety
/// `world` is a live world; `ranks` is writable for `cap` values; `count` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_world_node_ranks(
    world: *const accio_world,
    ranks: *mut usize,
    cap: usize,
    count: *mut usize,
) -> accio_status {
    const OP: &str = "accio_world_node_ranks";
    guard(OP, || {
        need(OP, "count", count)?;
        // SAFETY: the caller's contract.
        let w = unsafe { obj::<WorldObj>(OP, world)? };
        let mine = w.world.node_ranks();
        // SAFETY: count checked non-NULL above; writable by contract.
        unsafe { put(OP, "count", count, mine.len())? };
        if cap < mine.len() {
            return Err(Failure::new(
                accio_status::ACCIO_BUFFER_TOO_SMALL,
                format!(
                    "{OP}: {} ranks share this node, the buffer has room for {cap}",
                    mine.len()
                ),
            ));
        }
        if ranks.is_null() {
            return Err(crate::null(OP, "ranks"));
        }
        // SAFETY: ranks is non-NULL and writable for cap >= mine.len() values by contract.
        unsafe { std::ptr::copy_nonoverlapping(mine.as_ptr(), ranks, mine.len()) };
        Ok(())
    })
}

/// Stores in `*out` the endpoint to rank `peer`, over the backend the rule chose for the
/// pair (see `accio_world_choice`). The first call for a peer connects, and is collective
/// for the pair: `peer` calls `accio_world_endpoint` for this rank too (in any order; each
/// waits for the other at most `ACCIO_WORLD_TIMEOUT_MS`, then `ACCIO_TIMEOUT`). Later
/// calls return the same endpoint at once; a call that failed may be repeated.
///
/// The world owns the endpoint: do not destroy it (`accio_endpoint_destroy` refuses it);
/// it is valid until `accio_world_destroy`. A `peer` outside the world, or this rank
/// itself, is `ACCIO_INVALID_ARGUMENT` naming the rank.
///
/// # Safety
/// `world` is a live world; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn accio_world_endpoint(
    world: *const accio_world,
    peer: usize,
    out: *mut *mut accio_endpoint,
) -> accio_status {
    const OP: &str = "accio_world_endpoint";
    guard(OP, || {
        need(OP, "out", out)?;
        // SAFETY: the caller's contract.
        let w = unsafe { obj::<WorldObj>(OP, world)? };
        let peer = w.peer(OP, peer)?;
        // Held while connecting: a second caller for the same peer waits for this
        // connection rather than making another.
        let mut slot = w.eps[peer].lock().unwrap_or_else(PoisonError::into_inner);
        let handle = match &*slot {
            Some(ep) => ep.0,
            None => {
                let ep = w.world.endpoint(peer).map_err(|e| failure(OP, e, false))?;
                slot.insert(OwnedEndpoint(world_endpoint_handle(ep))).0
            }
        };
        // SAFETY: out checked non-NULL above; writable by contract.
        unsafe { put(OP, "out", out, handle) }
    })
}

/// Stores the backend chosen for the pair (this rank, `peer`) in `*scheme` (`"shm"`,
/// `"tcp"`, `"mpi"`) and the rule's reason in `*reason` (e.g. `"same node"`, or why shm
/// was refused), as NUL-terminated strings the world owns: valid until
/// `accio_world_destroy`, not to be freed. Either pointer may be NULL. Needs no connection.
/// A `peer` outside the world, or this rank, is `ACCIO_INVALID_ARGUMENT`.
///
/// # Safety
/// `world` is a live world; `scheme` and `reason` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn accio_world_choice(
    world: *const accio_world,
    peer: usize,
    scheme: *mut *const c_char,
    reason: *mut *const c_char,
) -> accio_status {
    const OP: &str = "accio_world_choice";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let w = unsafe { obj::<WorldObj>(OP, world)? };
        let peer = w.peer(OP, peer)?;
        let c = w.choices[peer]
            .as_ref()
            .expect("a choice for every other rank");
        if !scheme.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { scheme.write(c.scheme.as_ptr()) };
        }
        if !reason.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { reason.write(c.reason.as_ptr()) };
        }
        Ok(())
    })
}

/// Waits until every rank has called `accio_world_barrier` as often as this one
/// (collective), at most `timeout_ms` (negative: forever), over connections of the
/// barrier's own (a program's messages on its endpoints never meet the barrier's).
/// `ACCIO_TIMEOUT` names the rank that did not answer; the barrier is not lost, the next
/// call resumes it (so a program may wait in slices). A rank that died is
/// `ACCIO_PEER_GONE`.
///
/// # Safety
/// `world` is a live world.
#[no_mangle]
pub unsafe extern "C" fn accio_world_barrier(
    world: *const accio_world,
    timeout_ms: i64,
) -> accio_status {
    const OP: &str = "accio_world_barrier";
    guard(OP, || {
        // SAFETY: the caller's contract.
        let w = unsafe { obj::<WorldObj>(OP, world)? };
        let t: Option<Duration> = timeout(timeout_ms);
        w.world.barrier(t).map_err(|e| failure(OP, e, false))
    })
}

/// Leaves the world and frees it with every endpoint `accio_world_endpoint` gave (their
/// peers' blocked calls fail with `ACCIO_PEER_GONE`); NULL is ignored. Windows registered
/// on those endpoints stay readable through their own handles until `accio_window_destroy`.
///
/// # Safety
/// `world` is NULL or a live world that no other thread uses (nor any of its endpoints),
/// not used again; no endpoint it gave is used afterwards.
#[no_mangle]
pub unsafe extern "C" fn accio_world_destroy(world: *mut accio_world) -> accio_status {
    // SAFETY: the caller's contract.
    unsafe { destroy::<WorldObj>("accio_world_destroy", world) }
}
