//! The backend proper (feature `mpi`): MPI through `mpi::ffi`.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use accio_core::{
    Access, Addr, Capabilities, Endpoint, Error, Listener, Mark, MemView, OffsetAllocator,
    Progress, Region, RemoteMap, Result, RmaFlags, Side, Window, WindowDesc, WindowTable, PAGE,
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
const KINDS: c_int = 3;
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
/// Messages up to this size are sent from a copy and kept in flight; larger ones block until
/// received, without a copy.
const MAX_BUFFERED: usize = MAX_PENDING_BYTES;
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
/// consuming anything. The price is that thread's wake-ups; while application threads poll
/// for messages themselves, it only checks every 20 intervals that they still do.
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
                    return;
                }
                // While the application polls MPI itself its calls drive progress: probing too
                // would only contend for the library's locks on a machine with few cores.
                let calls = POLLS.load(Ordering::Relaxed);
                if calls != seen {
                    seen = calls;
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
                std::thread::sleep(Duration::from_micros(us));
            }
        });
    if let Ok(t) = t {
        *lock(&PROGRESS) = Some(t);
    }
}

/// Counts the message polls of application threads (see `start_progress`).
static POLLS: AtomicU64 = AtomicU64::new(0);
/// Asks the progress thread to stop (before MPI_Finalize).
static PROGRESS_STOP: AtomicBool = AtomicBool::new(false);
/// The progress thread, joined at exit.
static PROGRESS: Mutex<Option<std::thread::JoinHandle<()>>> = Mutex::new(None);

fn tag(conn: u32, dir: u32, kind: c_int) -> c_int {
    TAG_BASE + ((conn * 2 + dir) as c_int) * KINDS + kind
}

/// Non-blocking probe-and-receive of one message from `src` with `tag`.
fn try_take(src: c_int, tag: c_int, buf: &mut Vec<u8>) -> Result<Option<usize>> {
    POLLS.fetch_add(1, Ordering::Relaxed);
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
    let (mut msg, st) = unsafe { (msg.assume_init(), st.assume_init()) };
    check(
        // SAFETY: `st` is the status of the matched message.
        unsafe { ffi::MPI_Get_count(&st, byte(), &mut count) },
        "MPI_Get_count",
    )?;
    let n = count.max(0) as usize;
    buf.clear();
    buf.reserve(n);
    check(
        // SAFETY: `buf` has capacity for `n` bytes; MPI_Mrecv writes exactly the message.
        unsafe {
            ffi::MPI_Mrecv(
                buf.as_mut_ptr().cast(),
                count,
                byte(),
                &mut msg,
                ffi::RSMPI_STATUS_IGNORE,
            )
        },
        "MPI_Mrecv",
    )?;
    // SAFETY: MPI_Mrecv wrote `n` bytes.
    unsafe { buf.set_len(n) };
    Ok(Some(n))
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

/// Waits politely: spins briefly, then yields, then sleeps, so a waiting rank leaves the
/// core to a peer on a small machine.
struct Backoff(u32);

impl Backoff {
    fn wait(&mut self) {
        self.0 += 1;
        if self.0 < 2000 {
            std::hint::spin_loop();
        } else if self.0 < 20_000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// For waits off the message path (a listener waiting for connections): a short spin,
    /// then sleeps, so an idle acceptor thread neither takes a core nor contends for MPI's
    /// locks with the threads that move data.
    fn wait_idle(&mut self) {
        self.0 += 1;
        if self.0 < 100 {
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

// ---- listener -------------------------------------------------------------------------

#[derive(Debug)]
struct MpiListener {
    addr: Addr,
    port: u32,
    queue: Arc<Mutex<VecDeque<Request>>>,
}

pub(crate) fn listen(addr: &Addr) -> Result<Box<dyn Listener>> {
    let Addr::Mpi { rank, port } = *addr else {
        return Err(Error::BadAddress {
            addr: addr.to_string(),
            reason: "not an mpi:// address".into(),
        });
    };
    let m = mpi().map_err(|e| rename(e, addr))?;
    if rank != m.rank as u32 {
        return Err(Error::BadAddress {
            addr: addr.to_string(),
            reason: format!(
                "this process is rank {}: it can listen only on mpi://{}[:PORT]",
                m.rank, m.rank
            ),
        });
    }
    if port >= EPHEMERAL {
        return Err(Error::BadAddress {
            addr: addr.to_string(),
            reason: format!("ports from {EPHEMERAL} up name connecting ends"),
        });
    }
    let mut l = lock(&m.listeners);
    if l.contains_key(&port) {
        return Err(Error::AddrInUse {
            addr: addr.to_string(),
        });
    }
    let queue = Arc::new(Mutex::new(VecDeque::new()));
    l.insert(port, Arc::clone(&queue));
    Ok(Box::new(MpiListener {
        addr: addr.clone(),
        port,
        queue,
    }))
}

fn rename(e: Error, addr: &Addr) -> Error {
    match e {
        Error::BadAddress { reason, .. } => Error::BadAddress {
            addr: addr.to_string(),
            reason,
        },
        e => e,
    }
}

impl Listener for MpiListener {
    fn local_addr(&self) -> &Addr {
        &self.addr
    }

    fn accept(&self, timeout: Option<Duration>) -> Result<Box<dyn Endpoint>> {
        let m = mpi()?;
        let t0 = Instant::now();
        let mut b = Backoff(0);
        loop {
            m.pump()?;
            let req = lock(&self.queue).pop_front();
            if let Some(r) = req {
                let ep = MpiEndpoint::new(
                    m,
                    r.src,
                    self.addr.clone(),
                    Addr::Mpi {
                        rank: r.src as u32,
                        port: EPHEMERAL | r.conn,
                    },
                    tag(r.conn, 1, 0),
                    tag(r.conn, 0, 0),
                    r.table,
                )?;
                let mut reply = [0u8; 16];
                reply[0..4].copy_from_slice(&1u32.to_le_bytes());
                reply[8..16].copy_from_slice(&ep.table.addr.to_le_bytes());
                send_blocking(&reply, r.src, tag(r.conn, 1, KIND_SETUP))?;
                return Ok(Box::new(ep));
            }
            if let Some(t) = timeout {
                if t0.elapsed() >= t {
                    return Err(Error::Timeout {
                        op: "accept",
                        resource: self.addr.to_string(),
                        after: t,
                    });
                }
            }
            b.wait_idle();
        }
    }
}

impl Drop for MpiListener {
    fn drop(&mut self) {
        let Ok(m) = mpi() else { return };
        lock(&m.listeners).remove(&self.port);
        for r in lock(&self.queue).drain(..) {
            let _ = refuse(r.src, r.conn);
        }
    }
}

// ---- connect --------------------------------------------------------------------------

pub(crate) fn connect(addr: &Addr, timeout: Duration) -> Result<Box<dyn Endpoint>> {
    let Addr::Mpi { rank, port } = *addr else {
        return Err(Error::BadAddress {
            addr: addr.to_string(),
            reason: "not an mpi:// address".into(),
        });
    };
    let m = mpi().map_err(|e| rename(e, addr))?;
    if rank >= m.size as u32 {
        return Err(Error::BadAddress {
            addr: addr.to_string(),
            reason: format!("rank {rank} is outside the MPI world of {} ranks", m.size),
        });
    }
    let conn = m.next_conn.fetch_add(1, Ordering::Relaxed);
    if conn >= m.max_conn {
        return Err(Error::invalid(
            "connect",
            format!(
                "{addr}: this process used all {} connection tags MPI offers",
                m.max_conn
            ),
        ));
    }
    let peer = rank as c_int;
    let local = Addr::Mpi {
        rank: m.rank as u32,
        port: EPHEMERAL | conn,
    };
    let mut ep = MpiEndpoint::new(
        m,
        peer,
        local,
        addr.clone(),
        tag(conn, 0, 0),
        tag(conn, 1, 0),
        0,
    )?;
    let mut req = [0u8; 16];
    req[0..4].copy_from_slice(&port.to_le_bytes());
    req[4..8].copy_from_slice(&conn.to_le_bytes());
    req[8..16].copy_from_slice(&ep.table.addr.to_le_bytes());
    send_blocking(&req, peer, CONNECT_TAG)?;
    let t0 = Instant::now();
    let mut b = Backoff(0);
    let mut buf = Vec::new();
    loop {
        m.pump()?;
        if try_take(peer, tag(conn, 1, KIND_SETUP), &mut buf)? == Some(16) {
            if u32::from_le_bytes(buf[0..4].try_into().expect("4")) != 1 {
                ep.refused = true;
                return Err(Error::BadAddress {
                    addr: addr.to_string(),
                    reason: format!("nobody listens on port {port} of rank {rank}"),
                });
            }
            ep.peer_table = u64::from_le_bytes(buf[8..16].try_into().expect("8"));
            return Ok(Box::new(ep));
        }
        if t0.elapsed() >= timeout {
            // The request may still be served later; this side is gone then.
            ep.refused = true;
            return Err(Error::Timeout {
                op: "connect",
                resource: addr.to_string(),
                after: timeout,
            });
        }
        b.wait();
    }
}

// ---- endpoint -------------------------------------------------------------------------

/// The window table an endpoint publishes in attached memory for its peer to read.
struct Table {
    view: MemView,
    addr: u64,
}

impl Table {
    fn publish(&self, windows: &WindowTable<(Window, u64)>) -> Result<()> {
        let max = (TABLE_BYTES - TABLE_HEADER) / 32;
        if windows.len() > max {
            return Err(Error::invalid(
                "register",
                format!("more than {max} windows on one mpi endpoint"),
            ));
        }
        let base = self.view.as_ptr().cast::<u64>();
        // SAFETY: `base` points to TABLE_BYTES of mapped, 8-aligned memory; the peer reads it
        // with MPI_Get under the sequence protocol (odd = being written).
        unsafe {
            let seq = ptr::read_volatile(base);
            ptr::write_volatile(base, seq + 1);
            std::sync::atomic::fence(Ordering::SeqCst);
            let mut e = base.add(TABLE_HEADER / 8);
            for (d, (_, addr)) in windows.iter() {
                ptr::write_volatile(e, d.offset);
                ptr::write_volatile(e.add(1), d.len);
                ptr::write_volatile(e.add(2), d.access.bits() as u64);
                ptr::write_volatile(e.add(3), *addr);
                e = e.add(4);
            }
            ptr::write_volatile(base.add(1), windows.len() as u64);
            std::sync::atomic::fence(Ordering::SeqCst);
            ptr::write_volatile(base, seq + 2);
        }
        Ok(())
    }
}

/// An endpoint's own windows (with each one's MPI address), its offset allocator, and the
/// memory it attached.
type Own = (
    WindowTable<(Window, u64)>,
    OffsetAllocator,
    Vec<Arc<Region>>,
);

struct MpiEndpoint {
    m: &'static Mpi,
    peer: c_int,
    local: Addr,
    peer_addr: Addr,
    tx: c_int,
    rx: c_int,
    table: Table,
    peer_table: u64,
    refused: bool,
    windows: Mutex<Own>,
    peer_windows: Mutex<WindowTable<u64>>,
    send_lock: Mutex<SendQueue>,
    recv_lock: Mutex<Vec<u8>>,
    peer_closed: AtomicBool,
    /// When the hot paths probe for the peer's close next (see [`CLOSE_PROBE_EVERY`]).
    close_probe_at: Mutex<Instant>,
    issued: AtomicU64,
}

// SAFETY: MPI request handles are opaque and used under `send_lock`; MPI allows any thread
// (MPI_THREAD_MULTIPLE).
unsafe impl Send for MpiEndpoint {}
// SAFETY: as for Send; shared state is behind mutexes and atomics.
unsafe impl Sync for MpiEndpoint {}

impl std::fmt::Debug for MpiEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiEndpoint")
            .field("local", &self.local.to_string())
            .field("peer", &self.peer_addr.to_string())
            .finish_non_exhaustive()
    }
}

impl MpiEndpoint {
    fn new(
        m: &'static Mpi,
        peer: c_int,
        local: Addr,
        peer_addr: Addr,
        tx: c_int,
        rx: c_int,
        peer_table: u64,
    ) -> Result<MpiEndpoint> {
        let (view, _) = m.carve(TABLE_BYTES)?;
        let region = Arc::clone(&m.arena);
        let mut a: ffi::MPI_Aint = 0;
        check(
            // SAFETY: the view is mapped; MPI_Get_address only computes the address.
            unsafe { ffi::MPI_Get_address(view.as_ptr().cast(), &mut a) },
            "MPI_Get_address",
        )?;
        Ok(MpiEndpoint {
            m,
            peer,
            local,
            peer_addr,
            tx,
            rx,
            table: Table {
                view,
                addr: a as u64,
            },
            peer_table,
            refused: false,
            windows: Mutex::new((
                WindowTable::default(),
                OffsetAllocator::default(),
                vec![region],
            )),
            peer_windows: Mutex::new(WindowTable::default()),
            send_lock: Mutex::new(SendQueue::default()),
            recv_lock: Mutex::new(Vec::new()),
            peer_closed: AtomicBool::new(false),
            close_probe_at: Mutex::new(Instant::now()),
            issued: AtomicU64::new(0),
        })
    }

    fn gone(&self) -> Error {
        Error::PeerGone {
            peer: self.peer_addr.to_string(),
            cause: "the peer closed the connection".into(),
        }
    }

    /// Fails with PeerGone once the peer's close arrived (checking for it without waiting).
    fn check_open(&self) -> Result<()> {
        if self.peer_closed.load(Ordering::Acquire) {
            return Err(self.gone());
        }
        let mut buf = Vec::new();
        if try_take(self.peer, self.rx + KIND_CLOSE, &mut buf)?.is_some() {
            self.peer_closed.store(true, Ordering::Release);
            return Err(self.gone());
        }
        Ok(())
    }

    /// As [`check_open`](Self::check_open), but probes MPI at most every
    /// [`CLOSE_PROBE_EVERY`]: for the paths a message takes, where a probe per call would
    /// double the MPI calls of a small message.
    fn check_open_soon(&self) -> Result<()> {
        if self.peer_closed.load(Ordering::Acquire) {
            return Err(self.gone());
        }
        let now = Instant::now();
        {
            let mut at = lock(&self.close_probe_at);
            if now < *at {
                return Ok(());
            }
            *at = now + CLOSE_PROBE_EVERY;
        }
        self.check_open()
    }

    fn flush(&self) -> Result<()> {
        // SAFETY: valid window and rank.
        check(
            unsafe { ffi::MPI_Win_flush(self.peer, self.m.win) },
            "MPI_Win_flush",
        )
    }

    /// Re-reads the peer's published window table.
    fn refresh_peer(&self) -> Result<()> {
        let mut head = [0u64; 2];
        for _ in 0..1000 {
            self.get_raw(head.as_mut_ptr().cast(), 16, self.peer_table)?;
            if head[0] % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let n = head[1] as usize;
            let mut entries = vec![0u64; n * 4];
            if n > 0 {
                self.get_raw(
                    entries.as_mut_ptr().cast(),
                    n * 32,
                    self.peer_table + TABLE_HEADER as u64,
                )?;
            }
            let mut again = [0u64; 1];
            self.get_raw(again.as_mut_ptr().cast(), 8, self.peer_table)?;
            if again[0] != head[0] {
                continue;
            }
            let mut t = WindowTable::default();
            for e in entries.chunks(4) {
                let desc = WindowDesc {
                    offset: e[0],
                    len: e[1],
                    access: Access::from_bits(e[2] as u8).unwrap_or(Access::NONE),
                };
                t.insert(desc, e[3])?;
            }
            *lock(&self.peer_windows) = t;
            return Ok(());
        }
        Err(Error::Protocol {
            peer: self.peer_addr.to_string(),
            reason: "its window table kept changing while being read".into(),
        })
    }

    fn get_raw(&self, dst: *mut u8, len: usize, disp: u64) -> Result<()> {
        check(
            // SAFETY: `dst` has `len` writable bytes; the flush completes the get before return.
            unsafe {
                ffi::MPI_Get(
                    dst.cast(),
                    len as c_int,
                    byte(),
                    self.peer,
                    disp as ffi::MPI_Aint,
                    len as c_int,
                    byte(),
                    self.m.win,
                )
            },
            "MPI_Get",
        )?;
        self.flush()
    }

    /// The peer's address (MPI displacement) for `[off, off+len)` with rights `need`.
    fn remote(&self, off: u64, len: usize, need: Access) -> Result<u64> {
        // The peer sets our stale word (before its unregister returns) when it withdrew a
        // window: re-read its table before trusting the copy.
        // SAFETY: the stale word lies in this endpoint's table view, 8-aligned.
        let stale = unsafe { &*self.table.view.as_ptr().add(STALE_AT).cast::<AtomicU64>() };
        if stale.load(Ordering::Acquire) != 0 {
            stale.store(0, Ordering::Release);
            self.refresh_peer()?;
        }
        let find = |t: &WindowTable<u64>| {
            t.find(off, len as u64, need, Side::Remote, &self.peer_addr)
                .map(|(d, a)| a + (off - d.offset))
        };
        if let Ok(a) = find(&lock(&self.peer_windows)) {
            return Ok(a);
        }
        self.refresh_peer()?;
        find(&lock(&self.peer_windows))
    }

    /// The local address of `[off, off+len)` in this endpoint's windows.
    fn local_ptr(&self, off: u64, len: usize) -> Result<*mut u8> {
        let w = lock(&self.windows);
        let (d, (win, _)) =
            w.0.find(off, len as u64, Access::NONE, Side::Local, &self.local)?;
        // SAFETY: the range lies inside the window's view.
        Ok(unsafe { win.view().as_ptr().add((off - d.offset) as usize) })
    }

    fn put(&self, src: *const u8, len: usize, disp: u64) -> Result<()> {
        in_chunks(len, |done, n| {
            check(
                // SAFETY: `src` has `len` readable bytes until local completion (flushed by the
                // caller before it returns); `disp` lies in a window of the peer.
                unsafe {
                    ffi::MPI_Put(
                        src.add(done).cast(),
                        n as c_int,
                        byte(),
                        self.peer,
                        (disp + done as u64) as ffi::MPI_Aint,
                        n as c_int,
                        byte(),
                        self.m.win,
                    )
                },
                "MPI_Put",
            )
        })?;
        self.issued.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    fn get(&self, dst: *mut u8, len: usize, disp: u64) -> Result<()> {
        in_chunks(len, |done, n| {
            check(
                // SAFETY: `dst` has `len` writable bytes; flushed below before return.
                unsafe {
                    ffi::MPI_Get(
                        dst.add(done).cast(),
                        n as c_int,
                        byte(),
                        self.peer,
                        (disp + done as u64) as ffi::MPI_Aint,
                        n as c_int,
                        byte(),
                        self.m.win,
                    )
                },
                "MPI_Get",
            )
        })?;
        self.flush()
    }

    fn complete_write(&self, flags: RmaFlags) -> Result<()> {
        if flags == RmaFlags::SYNC {
            self.flush()
        } else {
            // SAFETY: valid window and rank.
            check(
                unsafe { ffi::MPI_Win_flush_local(self.peer, self.m.win) },
                "MPI_Win_flush_local",
            )
        }
    }

    fn register_region(
        &self,
        region: Arc<Region>,
        view: MemView,
        access: Access,
    ) -> Result<Window> {
        let mut a: ffi::MPI_Aint = 0;
        check(
            // SAFETY: the view is mapped.
            unsafe { ffi::MPI_Get_address(view.as_ptr().cast(), &mut a) },
            "MPI_Get_address",
        )?;
        self.m.attach(&region)?;
        let mut w = lock(&self.windows);
        let off = w.1.allocate(view.len());
        let win = Window::new(view, off, access);
        w.0.insert(win.desc(), (win.clone(), a as u64))?;
        w.2.push(region);
        self.table.publish(&w.0)?;
        Ok(win)
    }
}

impl Endpoint for MpiEndpoint {
    fn backend(&self) -> &'static str {
        "mpi"
    }

    fn local_addr(&self) -> &Addr {
        &self.local
    }

    fn peer_addr(&self) -> &Addr {
        &self.peer_addr
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            map_remote: false,
            cpu_free_rma: false,
            max_try_send: MAX_TRY_SEND,
        }
    }

    fn send(&self, msg: &[u8]) -> Result<()> {
        if msg.len() > i32::MAX as usize {
            return Err(Error::MessageTooLarge {
                op: "send",
                endpoint: self.peer_addr.to_string(),
                len: msg.len(),
                limit: i32::MAX as usize,
            });
        }
        let mut q = lock(&self.send_lock);
        self.check_open_soon()?;
        if msg.len() <= MAX_BUFFERED {
            // Buffered (a copy travels with the request): a sender never waits for a receiver
            // that is busy elsewhere, as the contract asks, and several messages stay in
            // flight (see `sendq`).
            let mut b = Backoff(0);
            loop {
                q.reap()?;
                if q.has_room(msg.len()) {
                    break;
                }
                self.check_open_soon()?;
                b.wait();
            }
            return q.post_copy(msg, self.peer, self.tx + KIND_MSG);
        }
        // Larger messages wait for their receive; the lock keeps earlier buffered sends
        // ahead of this one (MPI matches in posting order).
        let mut req = MaybeUninit::<ffi::MPI_Request>::uninit();
        check(
            // SAFETY: `msg` outlives the request: this call waits for it (or cancels it).
            unsafe {
                ffi::MPI_Isend(
                    msg.as_ptr().cast(),
                    msg.len() as c_int,
                    byte(),
                    self.peer,
                    self.tx + KIND_MSG,
                    world(),
                    req.as_mut_ptr(),
                )
            },
            "MPI_Isend",
        )?;
        // SAFETY: MPI_Isend succeeded and wrote the request.
        let mut req = unsafe { req.assume_init() };
        let mut b = Backoff(0);
        loop {
            let mut flag: c_int = 0;
            check(
                // SAFETY: active request.
                unsafe { ffi::MPI_Test(&mut req, &mut flag, ffi::RSMPI_STATUS_IGNORE) },
                "MPI_Test",
            )?;
            if flag != 0 {
                return Ok(());
            }
            if let Err(e) = self.check_open_soon() {
                // SAFETY: the request is active; cancel then wait frees it, so `msg` is
                // no longer referenced by MPI when we return.
                unsafe {
                    ffi::MPI_Cancel(&mut req);
                    ffi::MPI_Wait(&mut req, ffi::RSMPI_STATUS_IGNORE);
                }
                return Err(e);
            }
            b.wait();
        }
    }

    fn try_send(&self, msg: &[u8]) -> Result<Progress<()>> {
        if msg.len() > MAX_TRY_SEND {
            return Err(Error::MessageTooLarge {
                op: "try_send",
                endpoint: self.peer_addr.to_string(),
                len: msg.len(),
                limit: MAX_TRY_SEND,
            });
        }
        let mut q = match self.send_lock.try_lock() {
            Ok(p) => p,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(Progress::WouldBlock),
        };
        self.check_open_soon()?;
        q.reap()?;
        if !q.has_room(msg.len()) {
            return Ok(Progress::WouldBlock);
        }
        q.post_copy(msg, self.peer, self.tx + KIND_MSG)?;
        Ok(Progress::Ready(()))
    }

    fn recv_timeout(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<usize> {
        let _g = lock(&self.recv_lock);
        let t0 = Instant::now();
        let mut b = Backoff(0);
        let mut misses = 0u32;
        loop {
            if let Some(n) = try_take(self.peer, self.rx + KIND_MSG, buf)? {
                return Ok(n);
            }
            misses += 1;
            if !misses.is_multiple_of(CLOSE_PROBE_MISSES) {
                b.wait();
                continue;
            }
            if self.check_open().is_err() {
                // Messages sent before the close still arrive.
                if let Some(n) = try_take(self.peer, self.rx + KIND_MSG, buf)? {
                    return Ok(n);
                }
                return Err(self.gone());
            }
            if let Some(t) = timeout {
                if t0.elapsed() >= t {
                    return Err(Error::Timeout {
                        op: "recv",
                        resource: self.peer_addr.to_string(),
                        after: t,
                    });
                }
            }
            b.wait();
        }
    }

    fn try_recv(&self, buf: &mut Vec<u8>) -> Result<Progress<usize>> {
        let _g = match self.recv_lock.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Ok(Progress::WouldBlock),
        };
        if let Some(n) = try_take(self.peer, self.rx + KIND_MSG, buf)? {
            return Ok(Progress::Ready(n));
        }
        if self.check_open().is_err() {
            if let Some(n) = try_take(self.peer, self.rx + KIND_MSG, buf)? {
                return Ok(Progress::Ready(n));
            }
            return Err(self.gone());
        }
        Ok(Progress::WouldBlock)
    }

    fn register(&self, len: usize, access: Access) -> Result<Window> {
        if len == 0 {
            return Err(Error::invalid(
                "register",
                "a window needs at least one byte",
            ));
        }
        let (view, _) = self.m.carve(len)?;
        self.register_region(Arc::clone(&self.m.arena), view, access)
    }

    fn register_view(&self, view: &MemView, access: Access) -> Result<Window> {
        if view.is_empty() {
            return Err(Error::invalid("register_view", "the view is empty"));
        }
        if !(view.as_ptr() as usize).is_multiple_of(PAGE) {
            return Err(Error::invalid(
                "register_view",
                "the view does not start on a page boundary",
            ));
        }
        self.register_region(Arc::clone(view.region()), view.clone(), access)
    }

    fn unregister(&self, offset: u64) -> Result<()> {
        let mut w = lock(&self.windows);
        // The memory stays attached (the peer may have RMA in flight) until the endpoint
        // closes; only the published table forgets it, so later peer RMA is refused.
        w.0.remove(offset).ok_or_else(|| {
            Error::invalid(
                "unregister",
                format!("no window starts at offset {offset:#x} of {}", self.local),
            )
        })?;
        self.table.publish(&w.0)?;
        drop(w);
        if self.peer_table != 0 && !self.peer_closed.load(Ordering::Acquire) {
            // Tell the peer its copy of our table is stale, before any later message.
            let one = 1u64.to_ne_bytes();
            self.put(one.as_ptr(), 8, self.peer_table + STALE_AT as u64)?;
            self.flush()?;
        }
        Ok(())
    }

    fn write_to(&self, local_off: u64, len: usize, remote_off: u64, flags: RmaFlags) -> Result<()> {
        let src = self.local_ptr(local_off, len)?;
        let disp = self.remote(remote_off, len, Access::WRITE)?;
        self.check_open()?;
        self.put(src, len, disp)?;
        self.complete_write(flags)
    }

    fn read_from(
        &self,
        local_off: u64,
        len: usize,
        remote_off: u64,
        _flags: RmaFlags,
    ) -> Result<()> {
        let dst = self.local_ptr(local_off, len)?;
        let disp = self.remote(remote_off, len, Access::READ)?;
        self.check_open()?;
        self.get(dst, len, disp)
    }

    fn vwrite_to(&self, src: &[u8], remote_off: u64, flags: RmaFlags) -> Result<()> {
        let disp = self.remote(remote_off, src.len(), Access::WRITE)?;
        self.check_open()?;
        self.put(src.as_ptr(), src.len(), disp)?;
        // `src` is borrowed only for this call: at least local completion before returning.
        self.complete_write(flags)
    }

    fn vread_from(&self, dst: &mut [u8], remote_off: u64, _flags: RmaFlags) -> Result<()> {
        let disp = self.remote(remote_off, dst.len(), Access::READ)?;
        self.check_open()?;
        self.get(dst.as_mut_ptr(), dst.len(), disp)
    }

    fn fence_mark(&self) -> Result<Mark> {
        Ok(Mark(self.issued.load(Ordering::Acquire)))
    }

    fn fence_wait(&self, _mark: Mark) -> Result<()> {
        // One flush completes every RMA issued to the peer, the marked ones included.
        self.flush()
    }

    fn fence_signal(&self, local: Option<(u64, u64)>, remote: Option<(u64, u64)>) -> Result<()> {
        for (off, _) in local.iter().chain(remote.iter()) {
            if off % 8 != 0 {
                return Err(Error::invalid(
                    "fence_signal",
                    format!("offset {off:#x} is not 8-byte aligned"),
                ));
            }
        }
        let lp = local
            .map(|(off, v)| self.local_ptr(off, 8).map(|p| (p, v)))
            .transpose()?;
        let rp = remote
            .map(|(off, v)| self.remote(off, 8, Access::WRITE).map(|d| (d, v)))
            .transpose()?;
        self.check_open()?;
        // Every earlier RMA completes at the peer before either value is stored.
        self.flush()?;
        if let Some((p, v)) = lp {
            // SAFETY: `p` is 8-aligned (window bases are page aligned, the offset is 8-aligned)
            // and inside a local window.
            unsafe { (*p.cast::<std::sync::atomic::AtomicU64>()).store(v, Ordering::Release) };
        }
        if let Some((d, v)) = rp {
            let val = v.to_ne_bytes();
            self.put(val.as_ptr(), 8, d)?;
            // Completed at the peer, not only locally: an MPI library may hold a put in its
            // queue until the next MPI call, and the caller's next step may be a wait on
            // plain memory (`wait_u64`) that makes none; `val` also lives on this frame.
            self.flush()?;
        }
        Ok(())
    }

    fn map_remote(&self, _remote_off: u64, _len: usize) -> Result<RemoteMap> {
        Err(Error::Unsupported {
            op: "map_remote",
            backend: "mpi",
        })
    }
}

impl Drop for MpiEndpoint {
    fn drop(&mut self) {
        {
            let mut q = lock(&self.send_lock);
            let t0 = Instant::now();
            while !q.is_empty() && t0.elapsed() < Duration::from_secs(1) {
                let _ = q.reap();
                std::thread::yield_now();
            }
            // Requests never completed keep their buffers: leak them rather than free memory
            // MPI may still read.
            q.abandon();
        }
        if !self.refused {
            let _ = send_blocking(&[], self.peer, self.tx + KIND_CLOSE);
        }
        let mut buf = Vec::new();
        let peer_closed = self.refused
            || self.peer_closed.load(Ordering::Acquire)
            || matches!(
                try_take(self.peer, self.rx + KIND_CLOSE, &mut buf),
                Ok(Some(_))
            );
        let regions: Vec<Arc<Region>> = lock(&self.windows).2.drain(..).collect();
        if peer_closed {
            for r in &regions {
                self.m.detach(r);
            }
        } else {
            lock(&self.m.graves).push(Grave {
                peer: self.peer,
                close_tag: self.rx + KIND_CLOSE,
                peer_closed: false,
                regions,
            });
        }
    }
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
