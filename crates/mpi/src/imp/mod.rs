//! The backend proper (feature `mpi`): MPI through `mpi::ffi`. This file holds the
//! process-wide state (initialization, the progress thread, the window arena, probes);
//! [`conn`] listens and connects, [`endpoint`] is the endpoint itself (and serves its
//! device windows).

mod conn;
mod endpoint;

pub(crate) use conn::{connect, listen};

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use accio_core::{
    find_either, Access, Addr, Capabilities, DeviceMemory, DeviceWindow, EitherWindow, Endpoint,
    Error, Listener, Mark, MemView, OffsetAllocator, Progress, Region, RemoteMap, Result, RmaFlags,
    Side, Window, WindowDesc, WindowTable, PAGE,
};
use mpi::ffi;

use crate::sendq::{SendQueue, MAX_PENDING_BYTES};

/// Tag of connection requests (`[port u32, conn u32, table address u64]`).
const CONNECT_TAG: c_int = 1;
/// First tag of the per-connection tags.
const TAG_BASE: c_int = 16;
const KIND_MSG: c_int = 0;
const KIND_CLOSE: c_int = 1;
const KIND_SETUP: c_int = 2;
/// The second part of a long message (see `recvq`).
const KIND_TAIL: c_int = 3;
/// Requests for a device window, from the initiator to the window's owner (see
/// `endpoint::device`).
const KIND_DEV: c_int = 4;
/// The owner's replies to them.
const KIND_DEV_REPLY: c_int = 5;
const KINDS: c_int = 6;
/// Ports at or above this name the connecting end of a connection (never listened on).
const EPHEMERAL: u32 = 1 << 31;
/// MPI counts are `int`: larger transfers go in pieces of this size.
const CHUNK: usize = 1 << 30;

/// Calls `op(offset, n)` over `len` bytes in pieces of at most [`CHUNK`] (MPI counts are
/// `int`).
fn in_chunks(len: usize, mut op: impl FnMut(usize, usize) -> Result<()>) -> Result<()> {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(CHUNK);
        op(done, n)?;
        done += n;
    }
    Ok(())
}

/// Bytes of the published window table: a header and 32-byte entries.
const TABLE_BYTES: usize = 64 << 10;
const TABLE_HEADER: usize = 64;
/// Where in an endpoint's table block the peer flags a withdrawn window.
const STALE_AT: usize = 16;
const MAX_TRY_SEND: usize = 64 << 10;
/// Messages up to this size may be sent from a copy and kept in flight; larger ones are
/// always sent from the caller's buffer (see `MpiEndpoint::direct`).
const MAX_BUFFERED: usize = MAX_PENDING_BYTES;
/// Messages at least this large to a peer on this node are sent from the caller's buffer.
const DIRECT_NEAR: usize = 64 << 10;
/// Tests of a direct send that did not complete before it starts draining the peer's
/// messages (see `MpiEndpoint::send_direct`).
const DRAIN_AFTER: u32 = 64;
/// How often the hot paths (`send`, a `recv` that waits) probe for the peer's close: the
/// contract gives a second, and each probe is a round of MPI's progress engine.
const CLOSE_PROBE_EVERY: Duration = Duration::from_millis(1);
/// Misses of a waiting `recv` between two probes for the peer's close.
const CLOSE_PROBE_MISSES: u32 = 64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The process-wide MPI state.
pub(crate) struct Mpi {
    pub rank: c_int,
    pub size: c_int,
    /// Per rank of the world: whether MPI puts it on this rank's node (shared memory).
    near: Vec<bool>,
    win: ffi::MPI_Win,
    max_conn: u32,
    next_conn: AtomicU32,
    listeners: Mutex<HashMap<u32, Arc<Mutex<VecDeque<Request>>>>>,
    pump: Mutex<()>,
    /// The arena `register` carves windows from: one attachment for all of them, because
    /// MPI libraries attach few regions to a dynamic window (Open MPI's osc ucx: 32).
    arena: Arc<Region>,
    arena_next: Mutex<usize>,
    /// Attached memory, by base address: the region and how many windows use it.
    attached: Mutex<HashMap<usize, (Arc<Region>, usize)>>,
    /// Closed endpoints whose peer may still reach their memory (see `Grave`).
    graves: Mutex<Vec<Grave>>,
    /// Regions once attached, never unmapped (see `detach`).
    retired: Mutex<Vec<Arc<Region>>>,
}

// SAFETY: the window handle is an opaque MPI handle; MPI was initialized with
// MPI_THREAD_MULTIPLE, so it may be used from any thread.
unsafe impl Send for Mpi {}
// SAFETY: as for Send.
unsafe impl Sync for Mpi {}

#[derive(Clone, Copy, Debug)]
struct Request {
    src: c_int,
    conn: u32,
    table: u64,
}

static STATE: OnceLock<std::result::Result<Mpi, String>> = OnceLock::new();

pub(crate) fn world() -> ffi::MPI_Comm {
    // SAFETY: reading an initialized extern static of the MPI shim.
    unsafe { ffi::RSMPI_COMM_WORLD }
}

pub(crate) fn byte() -> ffi::MPI_Datatype {
    // SAFETY: as above.
    unsafe { ffi::RSMPI_UINT8_T }
}

pub(crate) fn check(rc: c_int, what: &str) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::Io {
            op: "mpi",
            resource: what.to_string(),
            source: std::io::Error::other(format!("MPI error code {rc}")),
        })
    }
}

extern "C" fn finalize_at_exit() {
    PROGRESS_STOP.store(true, Ordering::Release);
    if let Some(t) = lock(&PROGRESS).take() {
        let _ = t.join();
    }
    if let Some(Ok(m)) = STATE.get() {
        let mut done: c_int = 0;
        // SAFETY: plain MPI calls on handles created in `init_mpi`; MPI_Finalized guards
        // against a program that finalized MPI itself.
        unsafe {
            ffi::MPI_Finalized(&mut done);
            if done == 0 {
                ffi::MPI_Win_unlock_all(m.win);
                ffi::MPI_Finalize();
            }
        }
    }
}

fn init_mpi() -> std::result::Result<Mpi, String> {
    if !crate::launched_by_mpi() {
        return Err("this process was not launched by MPI (start it with mpirun or srun)".into());
    }
    let mut inited: c_int = 0;
    let mut provided: c_int = 0;
    // SAFETY: MPI_Initialized may be called at any time; MPI_Init_thread with null
    // argc/argv is allowed by MPI-2 and later.
    unsafe {
        ffi::MPI_Initialized(&mut inited);
        if inited == 0 {
            if ffi::MPI_Init_thread(
                ptr::null_mut(),
                ptr::null_mut(),
                ffi::RSMPI_THREAD_MULTIPLE,
                &mut provided,
            ) != 0
            {
                return Err("MPI_Init_thread failed".into());
            }
            libc::atexit(finalize_at_exit);
        } else {
            ffi::MPI_Query_thread(&mut provided);
        }
    }
    // SAFETY: reading an extern static.
    if provided < unsafe { ffi::RSMPI_THREAD_MULTIPLE } {
        return Err(format!(
            "the MPI library gives thread level {provided}, accio needs MPI_THREAD_MULTIPLE"
        ));
    }
    let (mut rank, mut size) = (0, 0);
    let mut win = MaybeUninit::<ffi::MPI_Win>::uninit();
    let mut tag_ub: *mut c_int = ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: MPI is initialized; out-pointers are valid locals.
    unsafe {
        ffi::MPI_Comm_set_errhandler(world(), ffi::RSMPI_ERRORS_RETURN);
        ffi::MPI_Comm_rank(world(), &mut rank);
        ffi::MPI_Comm_size(world(), &mut size);
        ffi::MPI_Comm_get_attr(
            world(),
            ffi::MPI_TAG_UB as c_int,
            (&mut tag_ub as *mut *mut c_int).cast(),
            &mut flag,
        );
        if ffi::MPI_Win_create_dynamic(ffi::RSMPI_INFO_NULL, world(), win.as_mut_ptr()) != 0 {
            return Err(
                "MPI_Win_create_dynamic failed (Open MPI: its ucx one-sided component serves dynamic windows, `--mca osc ucx`)".into(),
            );
        }
    }
    // SAFETY: MPI_Win_create_dynamic succeeded and wrote the handle.
    let win = unsafe { win.assume_init() };
    let near = node_ranks(size)?;
    // SAFETY: valid window handle; a shared lock on every rank for the whole run (passive
    // target), so RMA needs no epoch calls.
    unsafe {
        ffi::MPI_Win_set_errhandler(win, ffi::RSMPI_ERRORS_RETURN);
        if ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, win) != 0 {
            return Err("MPI_Win_lock_all failed".into());
        }
    }
    let ub = if flag != 0 && !tag_ub.is_null() {
        // SAFETY: when flag is set, MPI stored a pointer to the attribute value.
        unsafe { *tag_ub }
    } else {
        32767
    };
    let max_conn = ((ub - TAG_BASE) / (2 * KINDS)).max(1) as u32;
    let gib: usize = std::env::var("ACCIO_MPI_ARENA_GIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    // Sparse: pages are allocated when first touched.
    let arena = Region::shareable(gib << 30, "accio-mpi-arena", false)
        .map_err(|e| format!("reserving the {gib} GiB window arena: {e}"))?;
    // SAFETY: the arena lives in the state until process exit.
    if unsafe { ffi::MPI_Win_attach(win, arena.as_ptr().cast(), arena.len() as ffi::MPI_Aint) } != 0
    {
        return Err(format!(
            "MPI_Win_attach of the {gib} GiB window arena failed"
        ));
    }
    Ok(Mpi {
        rank,
        size,
        near,
        win,
        arena: Arc::new(arena),
        arena_next: Mutex::new(0),
        max_conn,
        next_conn: AtomicU32::new(0),
        listeners: Mutex::new(HashMap::new()),
        pump: Mutex::new(()),
        attached: Mutex::new(HashMap::new()),
        graves: Mutex::new(Vec::new()),
        retired: Mutex::new(Vec::new()),
    })
}

/// Which ranks of the world MPI puts on this rank's node (`MPI_Comm_split_type` with
/// `MPI_COMM_TYPE_SHARED`). Collective, as `init_mpi` is.
fn node_ranks(size: c_int) -> std::result::Result<Vec<bool>, String> {
    let mut near = vec![false; size as usize];
    let mut node = MaybeUninit::<ffi::MPI_Comm>::uninit();
    // SAFETY: MPI is initialized; out-pointers are valid; every handle made here is freed.
    unsafe {
        if ffi::MPI_Comm_split_type(
            world(),
            ffi::RSMPI_COMM_TYPE_SHARED,
            0,
            ffi::RSMPI_INFO_NULL,
            node.as_mut_ptr(),
        ) != 0
        {
            return Err("MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed".into());
        }
        let mut node = node.assume_init();
        let (mut wg, mut ng) = (MaybeUninit::uninit(), MaybeUninit::uninit());
        ffi::MPI_Comm_group(world(), wg.as_mut_ptr());
        ffi::MPI_Comm_group(node, ng.as_mut_ptr());
        let (mut wg, mut ng) = (wg.assume_init(), ng.assume_init());
        let mut n: c_int = 0;
        ffi::MPI_Comm_size(node, &mut n);
        let local: Vec<c_int> = (0..n).collect();
        let mut global = vec![0 as c_int; n as usize];
        ffi::MPI_Group_translate_ranks(ng, n, local.as_ptr(), wg, global.as_mut_ptr());
        for r in global {
            if let Some(x) = near.get_mut(r as usize) {
                *x = true;
            }
        }
        ffi::MPI_Group_free(&mut wg);
        ffi::MPI_Group_free(&mut ng);
        ffi::MPI_Comm_free(&mut node);
    }
    Ok(near)
}

/// The initialized MPI state (initializing it on first use).
pub(crate) fn mpi() -> Result<&'static Mpi> {
    STATE
        .get_or_init(|| {
            let m = init_mpi()?;
            start_progress();
            Ok(m)
        })
        .as_ref()
        .map_err(|e| Error::BadAddress {
            addr: "mpi://".into(),
            reason: e.clone(),
        })
}

/// Starts the progress thread: Open MPI applies a peer's one-sided writes (through UCX) only
/// while this process makes MPI calls, and a rank waiting for a `fence_signal` on plain
/// memory (`wait_u64`) makes none. Every `ACCIO_MPI_PROGRESS_US` (default 50; 0 turns the
/// thread off) it probes for a message, which drives MPI's progress engine without
/// consuming anything, and serves requests for device windows (see [`endpoint::serve`]).
/// The price is that thread's wake-ups; while application threads poll for messages
/// themselves, it only checks every 20 intervals that they still do.
fn start_progress() {
    let us: u64 = std::env::var("ACCIO_MPI_PROGRESS_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    if us == 0 {
        return;
    }
    let t = std::thread::Builder::new()
        .name("accio-mpi-progress".into())
        .spawn(move || {
            let mut seen = POLLS.load(Ordering::Relaxed);
            loop {
                if PROGRESS_STOP.load(Ordering::Acquire) {
                    COARSE_ON.store(false, Ordering::Relaxed);
                    return;
                }
                COARSE_US.store(precise_us(), Ordering::Relaxed);
                // While the application polls MPI itself its calls drive progress: probing too
                // would only contend for the library's locks (see `app_polled`).
                if app_polled(&mut seen) {
                    std::thread::sleep(Duration::from_micros(us * 20));
                    continue;
                }
                let mut flag: c_int = 0;
                // SAFETY: MPI is initialized with MPI_THREAD_MULTIPLE; the status is ignored.
                let rc = unsafe {
                    ffi::MPI_Iprobe(
                        ffi::RSMPI_ANY_SOURCE,
                        ffi::RSMPI_ANY_TAG,
                        world(),
                        &mut flag,
                        ffi::RSMPI_STATUS_IGNORE,
                    )
                };
                let mut done: c_int = 0;
                // SAFETY: MPI_Finalized may be called at any time.
                unsafe { ffi::MPI_Finalized(&mut done) };
                if rc != 0 || done != 0 {
                    return;
                }
                endpoint::serve();
                std::thread::sleep(Duration::from_micros(us));
            }
        });
    if let Ok(t) = t {
        COARSE_US.store(precise_us(), Ordering::Relaxed);
        COARSE_ON.store(true, Ordering::Relaxed);
        *lock(&PROGRESS) = Some(t);
    }
}

/// Microseconds since the first call, from the system clock.
fn precise_us() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// The clock of the message path's close probes (see `MpiEndpoint::check_open_soon`):
/// microseconds as the progress thread last read them at one of its wake-ups (at most
/// `20 * ACCIO_MPI_PROGRESS_US` apart, later on a loaded machine), one load instead of a
/// clock read per message (a clock read was about a tenth of an 8-byte message's cost);
/// the system clock when the thread is off.
pub(crate) fn coarse_us() -> u64 {
    if COARSE_ON.load(Ordering::Relaxed) {
        COARSE_US.load(Ordering::Relaxed)
    } else {
        precise_us()
    }
}

/// See [`coarse_us`].
static COARSE_US: AtomicU64 = AtomicU64::new(0);
static COARSE_ON: AtomicBool = AtomicBool::new(false);

/// Counts the message polls of application threads (see `start_progress`).
static POLLS: AtomicU64 = AtomicU64::new(0);

/// Notes a message poll. A load and a store, not an atomic add: the progress thread only
/// asks whether the count moved, and a count lost to a race between two polling threads
/// still moves it.
///
/// Every poll also routes connection requests, at most once a millisecond (see
/// [`pump_soon`]), and serves requests for this process's device windows (see
/// [`endpoint::serve`]).
pub(crate) fn count_poll() {
    POLLS.store(
        POLLS.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
    if let Some(Ok(m)) = STATE.get() {
        // An error here is the probe's; the next poll, or the listener, probes again.
        let _ = pump_soon(m);
    }
    endpoint::serve();
}

/// Whether application threads polled MPI since the caller last asked (`seen` holds the
/// count it saw then). Background threads (the progress thread, a listener's `accept`) stay
/// out of MPI while this holds: every MPI call of theirs takes the locks the polling threads
/// take all the time (with Open MPI's osc ucx, UCX's worker spinlock in every progress
/// call), and on a machine with as many cores as busy ranks a background thread woken onto
/// a rank's core preempts the thread that holds them and then spins for its whole time
/// slice. Measured with per-copy tracepoints on 2 MiB streaming between two ranks on two
/// vCPUs: gaps of 1-3 ms between a receiver's copies, with the world's acceptor and the
/// progress thread spinning in `pthread_spin_lock` under `MPI_Iprobe`.
pub(crate) fn app_polled(seen: &mut u64) -> bool {
    let now = POLLS.load(Ordering::Relaxed);
    let moved = now != *seen;
    *seen = now;
    moved
}

/// When a hot path pumps connection requests next (see [`pump_soon`]), in [`coarse_us`].
static PUMP_AT: AtomicU64 = AtomicU64::new(0);

/// Routes connection requests from a thread that polls MPI anyway ([`count_poll`]), at
/// most every [`CLOSE_PROBE_EVERY`]: while application threads poll, listeners' `accept`
/// leaves MPI alone (see [`app_polled`]) and relies on this.
fn pump_soon(m: &Mpi) -> Result<()> {
    let now = coarse_us();
    if now < PUMP_AT.load(Ordering::Relaxed) {
        return Ok(());
    }
    PUMP_AT.store(
        now + CLOSE_PROBE_EVERY.as_micros() as u64,
        Ordering::Relaxed,
    );
    m.pump()
}

/// Asks the progress thread to stop (before MPI_Finalize).
static PROGRESS_STOP: AtomicBool = AtomicBool::new(false);
/// The progress thread, joined at exit.
static PROGRESS: Mutex<Option<std::thread::JoinHandle<()>>> = Mutex::new(None);

fn tag(conn: u32, dir: u32, kind: c_int) -> c_int {
    TAG_BASE + ((conn * 2 + dir) as c_int) * KINDS + kind
}

/// Non-blocking probe-and-receive of one message from `src` with `tag`.
fn try_take(src: c_int, tag: c_int, buf: &mut Vec<u8>) -> Result<Option<usize>> {
    buf.clear();
    try_take_at(src, tag, buf, 0)
}

/// As [`try_take`], but keeps the first `at` bytes of `buf` and appends the message to
/// them; returns the message's length.
pub(crate) fn try_take_at(
    src: c_int,
    tag: c_int,
    buf: &mut Vec<u8>,
    at: usize,
) -> Result<Option<usize>> {
    count_poll();
    let Some((mut msg, n)) = probe(src, tag)? else {
        return Ok(None);
    };
    receive(&mut msg, n, buf, at)?;
    Ok(Some(n))
}

/// A message from `src` with `tag`, matched (`MPI_Improbe`) but not received yet, and its
/// length; the caller receives it with [`receive`].
#[inline]
fn probe(src: c_int, tag: c_int) -> Result<Option<(ffi::MPI_Message, usize)>> {
    let mut flag: c_int = 0;
    let mut msg = MaybeUninit::<ffi::MPI_Message>::uninit();
    let mut st = MaybeUninit::<ffi::MPI_Status>::uninit();
    check(
        // SAFETY: out-pointers are valid; MPI is initialized.
        unsafe {
            ffi::MPI_Improbe(
                src,
                tag,
                world(),
                &mut flag,
                msg.as_mut_ptr(),
                st.as_mut_ptr(),
            )
        },
        "MPI_Improbe",
    )?;
    if flag == 0 {
        return Ok(None);
    }
    let mut count: c_int = 0;
    // SAFETY: a matched message's status and handle were written by MPI_Improbe.
    let (msg, st) = unsafe { (msg.assume_init(), st.assume_init()) };
    check(
        // SAFETY: `st` is the status of the matched message.
        unsafe { ffi::MPI_Get_count(&st, byte(), &mut count) },
        "MPI_Get_count",
    )?;
    Ok(Some((msg, count.max(0) as usize)))
}

/// Receives a message [`probe`] matched, `n` bytes long, after the first `at` bytes of
/// `buf` (which it keeps).
#[inline]
fn receive(msg: &mut ffi::MPI_Message, n: usize, buf: &mut Vec<u8>, at: usize) -> Result<()> {
    buf.truncate(at);
    buf.reserve(n);
    check(
        // SAFETY: `buf` has capacity for `at + n` bytes; MPI_Mrecv writes exactly the
        // message after the first `at`.
        unsafe {
            ffi::MPI_Mrecv(
                buf.as_mut_ptr().add(at).cast(),
                n as c_int,
                byte(),
                msg,
                ffi::RSMPI_STATUS_IGNORE,
            )
        },
        "MPI_Mrecv",
    )?;
    // SAFETY: the first `at` bytes were there, MPI_Mrecv wrote the next `n`.
    unsafe { buf.set_len(at + n) };
    Ok(())
}

fn send_blocking(buf: &[u8], dest: c_int, tag: c_int) -> Result<()> {
    // SAFETY: `buf` outlives the blocking send.
    check(
        unsafe {
            ffi::MPI_Send(
                buf.as_ptr().cast(),
                buf.len() as c_int,
                byte(),
                dest,
                tag,
                world(),
            )
        },
        "MPI_Send",
    )
}

/// How a rank waits for MPI: it polls (the caller's loop makes the MPI call) while spinning
/// for a bounded time, then polls between short sleeps, and after [`Backoff::LONG`] between
/// sleeps of 100 µs, so a waiting rank leaves the core to a peer on a small machine.
///
/// The short sleeps are not only politeness. Between network namespaces (Open MPI's tcp
/// path over a veth pair) a message reached a busy-polling receiver only when a timer
/// interrupt came on: 4.0 ms one-way (one tick at 250 Hz) for Open MPI itself, 1.12 ms for
/// accio, whose progress thread woke every 1 ms, and 0.15 ms with that thread woken every
/// 40 µs (`scripts/compare-mpi.sh`, loaded machine). A sleep arms a timer on the waiting
/// rank's own core, so the wait itself brings the interrupt.
struct Backoff {
    polls: u32,
    spin: Duration,
    since: Option<Instant>,
}

impl Backoff {
    /// Spinning of waits for a peer off the node (and for connections).
    const SPIN: Duration = Duration::from_micros(50);
    /// Spinning of waits for a peer on this node: its messages arrive without an interrupt,
    /// and a receiver asleep when the next large message comes delays it by a sleep (50 µs
    /// on a 2 MiB message's 200 µs).
    const SPIN_NEAR: Duration = Duration::from_millis(1);
    /// Waits longer than this sleep 100 µs at a time.
    const LONG: Duration = Duration::from_millis(20);

    fn new(spin: Duration) -> Backoff {
        Backoff {
            polls: 0,
            spin,
            since: None,
        }
    }

    fn wait(&mut self) {
        self.polls += 1;
        // The clock is read every 32 polls (a read costs about as much as a poll).
        if !self.polls.is_multiple_of(32) {
            std::hint::spin_loop();
            return;
        }
        let waited = self.since.get_or_insert_with(Instant::now).elapsed();
        if waited < self.spin {
            std::hint::spin_loop();
        } else if waited < Self::LONG {
            // About 50 µs with Linux's default timer slack.
            std::thread::sleep(Duration::from_micros(1));
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// For waits off the message path (a listener waiting for connections): a short spin,
    /// then sleeps, so an idle acceptor thread neither takes a core nor contends for MPI's
    /// locks with the threads that move data.
    fn wait_idle(&mut self) {
        self.polls += 1;
        if self.polls < 100 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

impl Mpi {
    /// Routes connection requests that reached this rank to their listeners, and refuses
    /// those for ports nobody listens on. Any thread may pump; one does at a time.
    fn pump(&self) -> Result<()> {
        let Ok(_g) = self.pump.try_lock() else {
            return Ok(());
        };
        let mut buf = Vec::new();
        loop {
            let mut flag: c_int = 0;
            let mut st = MaybeUninit::<ffi::MPI_Status>::uninit();
            check(
                // SAFETY: out-pointers are valid.
                unsafe {
                    ffi::MPI_Iprobe(
                        ffi::RSMPI_ANY_SOURCE,
                        CONNECT_TAG,
                        world(),
                        &mut flag,
                        st.as_mut_ptr(),
                    )
                },
                "MPI_Iprobe",
            )?;
            if flag == 0 {
                break;
            }
            // SAFETY: the probe matched and wrote the status.
            let src = unsafe { st.assume_init() }.MPI_SOURCE;
            if try_take(src, CONNECT_TAG, &mut buf)? != Some(16) {
                continue;
            }
            let port = u32::from_le_bytes(buf[0..4].try_into().expect("4"));
            let conn = u32::from_le_bytes(buf[4..8].try_into().expect("4"));
            let table = u64::from_le_bytes(buf[8..16].try_into().expect("8"));
            let q = lock(&self.listeners).get(&port).cloned();
            match q {
                Some(q) => lock(&q).push_back(Request { src, conn, table }),
                None => refuse(src, conn)?,
            }
        }
        self.reap_graves();
        Ok(())
    }

    /// A fresh page-aligned view of `len` bytes of the arena, followed by a guard page that
    /// no window uses. Arena memory is not reused: offsets and memory are both fresh.
    fn carve(&self, len: usize) -> Result<(MemView, usize)> {
        let mut next = lock(&self.arena_next);
        let start = *next;
        let end = start + len.next_multiple_of(PAGE) + PAGE;
        if end > self.arena.len() {
            return Err(Error::invalid(
                "register",
                format!(
                    "the mpi window arena ({} GiB, ACCIO_MPI_ARENA_GIB) is used up",
                    self.arena.len() >> 30
                ),
            ));
        }
        *next = end;
        let view = MemView::sub(Arc::clone(&self.arena), start, len)
            .ok_or_else(|| Error::invalid("register", "arena view"))?;
        Ok((view, start))
    }

    fn attach(&self, region: &Arc<Region>) -> Result<()> {
        if Arc::ptr_eq(region, &self.arena) {
            return Ok(());
        }
        let mut a = lock(&self.attached);
        let key = region.as_ptr() as usize;
        if let Some((_, n)) = a.get_mut(&key) {
            *n += 1;
            return Ok(());
        }
        check(
            // SAFETY: the region stays mapped while `attached` holds it (until detach).
            unsafe {
                ffi::MPI_Win_attach(
                    self.win,
                    region.as_ptr().cast(),
                    region.len() as ffi::MPI_Aint,
                )
            },
            "MPI_Win_attach",
        )
        .map_err(|_| {
            Error::invalid(
                "register_view",
                format!(
                    "MPI refused to attach one more memory region ({} attached besides the \
                     arena; Open MPI's osc ucx allows 32): register views of fewer regions, \
                     or use register",
                    a.len()
                ),
            )
        })?;
        a.insert(key, (Arc::clone(region), 1));
        Ok(())
    }

    fn detach(&self, region: &Arc<Region>) {
        if Arc::ptr_eq(region, &self.arena) {
            return;
        }
        let mut a = lock(&self.attached);
        let key = region.as_ptr() as usize;
        if let Some((_, n)) = a.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                // SAFETY: the region was attached by `attach` and is still mapped.
                unsafe { ffi::MPI_Win_detach(self.win, region.as_ptr().cast()) };
                // Kept mapped for good: Open MPI's osc ucx caches peers' remote keys by
                // address, and a new mapping at a detached region's address made a peer
                // unpack a stale key and crash. The cost is memory of views' regions.
                if let Some((r, _)) = a.remove(&key) {
                    lock(&self.retired).push(r);
                }
            }
        }
    }

    fn reap_graves(&self) {
        let mut g = lock(&self.graves);
        let mut buf = Vec::new();
        g.retain_mut(|grave| {
            if !grave.peer_closed
                && matches!(try_take(grave.peer, grave.close_tag, &mut buf), Ok(Some(_)))
            {
                grave.peer_closed = true;
            }
            if grave.peer_closed {
                for r in grave.regions.drain(..) {
                    self.detach(&r);
                }
            }
            !grave.peer_closed
        });
    }
}

fn refuse(src: c_int, conn: u32) -> Result<()> {
    let mut reply = [0u8; 16];
    reply[0..4].copy_from_slice(&0u32.to_le_bytes());
    send_blocking(&reply, src, tag(conn, 1, KIND_SETUP))
}

/// An endpoint closed on this side whose peer has not closed yet: its memory stays
/// attached (the peer may still write to it) until the peer's close arrives.
struct Grave {
    peer: c_int,
    close_tag: c_int,
    peer_closed: bool,
    regions: Vec<Arc<Region>>,
}

/// Every rank's bytes, in rank order. Collective.
pub(crate) fn allgather(record: &[u8]) -> Result<Vec<Vec<u8>>> {
    let m = mpi()?;
    let n = m.size as usize;
    let mine = record.len() as c_int;
    let mut lens = vec![0 as c_int; n];
    check(
        // SAFETY: buffers sized for one int per rank.
        unsafe {
            ffi::MPI_Allgather(
                (&mine as *const c_int).cast(),
                1,
                ffi::RSMPI_INT32_T,
                lens.as_mut_ptr().cast(),
                1,
                ffi::RSMPI_INT32_T,
                world(),
            )
        },
        "MPI_Allgather",
    )?;
    let mut displs = Vec::with_capacity(n);
    let mut total = 0;
    for l in &lens {
        displs.push(total as c_int);
        total += *l as usize;
    }
    let mut all = vec![0u8; total];
    check(
        // SAFETY: `all` holds the sum of every rank's length; displacements follow from it.
        unsafe {
            ffi::MPI_Allgatherv(
                record.as_ptr().cast(),
                mine,
                byte(),
                all.as_mut_ptr().cast(),
                lens.as_ptr(),
                displs.as_ptr(),
                byte(),
                world(),
            )
        },
        "MPI_Allgatherv",
    )?;
    Ok((0..n)
        .map(|r| all[displs[r] as usize..displs[r] as usize + lens[r] as usize].to_vec())
        .collect())
}

#[allow(dead_code)]
fn _unused(_: *mut c_void) {}
