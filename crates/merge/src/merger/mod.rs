//! The merger: accepts producers, lends them slots (or room in the output file), writes
//! committed blocks (or only their headers) to its sink.
//!
//! # Threads
//!
//! One **accept thread** waits in `Listener::accept` (100 ms ticks, so `close` is noticed)
//! and hands new endpoints over. One **progress thread** owns everything else — the sink,
//! every connection, the slot accounting — and polls the endpoints with `try_recv`; when a
//! whole round finds nothing it backs off (yield, then sleeps growing from 20 µs to
//! 500 µs). A single owner needs no locks on the hot path, keeps each producer's blocks in
//! order for free, and writes blocks with one `pwritev` each from the slot memory. Polling
//! was chosen over a waiting primitive because the endpoint contract has no way to wait on
//! many endpoints at once; under load the thread is never idle (it is the one writing), and
//! idle it costs a wake-up every 500 µs. The machines accio is measured on have two cores
//! (`MACHINE_NOTES.md` trait 3), which rules out a spinning progress thread.
//!
//! # Slots and the memory budget
//!
//! The budget is a pool of `budget / slot_bytes` slots, each its own shareable memory
//! region, allocated and faulted in when the merger starts listening: no producer ever
//! waits for the merger's page faults, and the merger's memory is the budget from the
//! first block on. A slot lent to a producer is a window on that producer's endpoint
//! ([`Endpoint::register_view`] of the slot's memory). A producer holds at most `credit`
//! slots (granted, not yet committed); a request beyond what is free waits in a FIFO
//! queue, so the producer blocks (or sees "would block") and nothing queues without bound.
//! A connection keeps its windows between blocks (its producer has them mapped). When
//! every slot is lent and a waiting producer has none free, the merger moves one: it
//! withdraws an idle window from another connection and registers the same memory for the
//! waiter. Peak memory is therefore `budget` plus per-connection rings, whatever the
//! producer count.
//!
//! Slots go back to the pool when their producer finishes or dies. The slots of a
//! connection dropped for breaking the protocol do not: that peer may still be running
//! with the slots mapped, so they are replaced by fresh memory.
//!
//! Why a pool: with fresh memory registered per connection, the merger thread zeroed and
//! faulted in 2 MiB for every slot of every connection and freed it when the connection
//! ended; once producers outnumber `budget / slot_bytes / credit`, every move paid that
//! too, so nearly every block did. `accio bench merge /dev/shm --backend shm --producers
//! 256 --buffers 2 --placement processes`, old and new binaries interleaved, 3 runs each:
//! 0.53–0.58 GB/s before, 0.87–0.95 GB/s with the pool (60 producers, where nothing
//! moves: medians 1.15 and 1.21 GB/s over 5 runs each).
//!
//! # Write modes: in place (one copy) or through slots (two)
//!
//! With [`WriteMode::Direct`] the budget is not slot memory but *room in the output file*:
//! an acquire reserves the room asked for, up to `slot_bytes` (a reserved header marks
//! it), the producer writes its payload there itself through the file the merger lent it,
//! once the block's length is known (`write_block` from the caller's bytes, a buffer or the
//! record packer from a staging buffer at commit): one `pwrite`, or on tmpfs while other
//! producers are connected, pages inserted with `UFFDIO_COPY`, which takes no inode lock,
//! and alone a `pwrite` of part of a large block beside a helper thread inserting the
//! rest (`crate::insert`, `crate::helper`); then it commits; the merger writes the block's
//! header over the
//! reserved one and acknowledges. The bytes are copied once,
//! by the producers, in parallel; the merger thread writes 64-byte headers and holds no
//! slot memory, so its memory is its rings whatever the budget. It stores those headers
//! through a mapping of the file claimed ahead (`fallocate`, or on tmpfs a larger size and
//! each room's header page faulted in), not with `pwrite`: a
//! `pwrite` waits for the inode lock behind every payload write in progress, and the
//! merger thread, which grants room and acknowledges commits, waited with it
//! (`container/headers.rs` has the measurement, and why faults do not replace
//! `fallocate` there). The budget bounds the
//! rooms in flight (granted, not committed). A producer asks for room its blocks will fill
//! (as many blocks of its last one's size as fit a slot) and keeps what a short block
//! leaves of a room for its next blocks, so blocks lie one after the other in the file;
//! room never committed becomes a hole (`docs/FORMAT.md`): a producer's unused prefetched
//! room at its goodbye, room too small for the block at hand, the room of a producer that
//! died. At close the writer compacts the file over its holes (`docs/FORMAT.md`, "Size"):
//! a closed file is its data and the container's overhead, whatever the block sizes. A
//! producer killed mid-block leaves its room reserved, never a
//! torn block: the header that makes a block visible is written only after the commit,
//! over a payload whose CRC the producer computed from the bytes it wrote (or, on tmpfs
//! while the merger has a CPU to itself, the merger from the file after the commit:
//! `Core::update_policy`), and readers check it.
//!
//! [`WriteMode::Auto`] picks direct where producers share the machine (`shm://`) and the
//! sink writes in place on a file system known to take shared writable mappings and
//! `fallocate` (tmpfs, ext2/3/4, xfs, btrfs; the block alignment at least a page), and
//! copies elsewhere: tcp producers may be on other machines; the Arrow and Parquet sinks
//! re-encode every batch; NFS, FUSE, 9p or overlayfs may refuse shared mappings, share
//! them badly between machines or write them back slowly. Forcing direct where it cannot
//! work is an error naming the reason. A producer that broke the protocol keeps the file
//! open, so in direct mode it could still write into the file: the trust boundary is the
//! user, as for `shm://` itself (owner-only).
//!
//! `accio bench merge /dev/shm --backend shm --placement processes --write-mode
//! direct,copy` measures both side by side (each figure's `write_mode` says which).
//!
//! # Liveness
//!
//! `try_recv` reports a peer that closed, but over shm not one that was killed (the
//! hang-up is only looked at by waiting calls). So a connection that has been silent for
//! 100 ms is probed with a receive that waits zero seconds (one `poll` system call; the
//! merger's shm endpoints do not spin). A dead producer is found within ~100 ms, its
//! uncommitted slots are reclaimed and the waiting producers get them.
//!
//! # Acknowledgement
//!
//! A commit is acknowledged once its block is in the file (page cache), or with
//! [`SyncPolicy::EveryCommit`] once it is synced: the commits of one polling round are
//! written, the file is `fdatasync`ed once, then all of them are acknowledged (group
//! commit).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use accio::{Addr, Endpoint};

use crate::error::{MergeError, Result};
use crate::sink::{Sink, SinkSummary};

mod accept;
mod conn;
mod messages;
mod progress;
mod slots;

use accept::{accept_main, bind};
use progress::Core;
use slots::new_slot;

/// Default memory budget: 256 MiB of slots.
pub const DEFAULT_BUDGET: usize = 256 << 20;
/// Default slot size: 2 MiB, the seed's buffer size (100 × 2 MB files per worker) and large
/// enough that the per-block handoff (a few small messages) is noise beside the copy.
pub const DEFAULT_SLOT_BYTES: usize = 2 << 20;
/// Default credit: 2 slots per producer, so one can be filled while the other is written.
pub const DEFAULT_CREDIT: u32 = 2;
/// How long grants may wait for the writers limit ([`MergerBuilder::direct_writers`])
/// while no room comes back: past it the budget alone bounds the rooms in flight, so
/// producers that hold rooms without writing (several producers driven by one thread)
/// slow the others down but cannot stop them.
const WRITERS_PATIENCE: Duration = Duration::from_millis(50);

/// Messages handled per connection per polling round, so one busy producer cannot hold
/// the others off.
const ROUND_MSGS: usize = 8;
/// How long the merger waits for room in a producer's message queue before dropping it.
const SEND_PATIENCE: Duration = Duration::from_secs(1);
/// How long the merger tries to tell the producers it drops in one pass why: long enough
/// to ride out a send lock held for a moment (tcp's `try_send` would block then), short
/// enough that peers which stopped reading hold the others up only briefly.
const LAST_WORD_PATIENCE: Duration = Duration::from_millis(100);
/// How often an idle connection is probed for liveness.
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// Longest idle sleep of the progress thread.
const MAX_IDLE_SLEEP: Duration = Duration::from_micros(500);

/// How block bytes get into the output file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WriteMode {
    /// [`WriteMode::Direct`] where it works (an `shm://` merger whose sink writes in place
    /// on a file system that takes shared writable mappings, see [`crate::DirectSink`]),
    /// [`WriteMode::Copy`] elsewhere (default).
    #[default]
    Auto,
    /// Producers write payloads straight into room the merger reserved in the output
    /// file, through a shared mapping of it: one copy in all, made by the producers in
    /// parallel. The merger writes only headers (commit records). Refused where it cannot
    /// work.
    Direct,
    /// Producers fill slots of the merger's memory, and the merger thread copies each into
    /// the file (`pwritev`): two copies, the second on one thread. Works with any sink and
    /// any transport.
    Copy,
}

impl WriteMode {
    /// Name in tool output and bench figures.
    pub fn name(self) -> &'static str {
        match self {
            WriteMode::Auto => "auto",
            WriteMode::Direct => "direct",
            WriteMode::Copy => "copy",
        }
    }
}

impl std::str::FromStr for WriteMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(WriteMode::Auto),
            "direct" => Ok(WriteMode::Direct),
            "copy" => Ok(WriteMode::Copy),
            o => Err(format!("write mode {o:?} is not auto, direct or copy")),
        }
    }
}

/// When the merger makes the output durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Never `fsync` (page-cache speed; a crash of the machine may lose data).
    Never,
    /// `fsync` once, at close (default).
    #[default]
    OnClose,
    /// `fdatasync` before acknowledging commits (grouped per polling round), and at close.
    EveryCommit,
}

/// Something the merger wants its owner to know. The default handler prints the
/// unexpected ones (lost producers, dropped connections, sink failures) to stderr.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A producer said hello.
    Connected {
        /// Its id.
        producer: u32,
        /// Its address.
        peer: String,
    },
    /// A producer finished normally (all its commits written).
    Finished {
        /// Its id.
        producer: u32,
        /// Blocks written for it.
        blocks: u64,
        /// Payload bytes written for it.
        bytes: u64,
    },
    /// A producer went away without finishing; its uncommitted slots were reclaimed.
    Lost {
        /// Its id.
        producer: u32,
        /// Blocks written for it before.
        blocks: u64,
        /// Why it is considered gone.
        reason: String,
    },
    /// A connection was dropped for breaking the protocol (or failing its handshake).
    Dropped {
        /// The peer's address.
        peer: String,
        /// What it did wrong.
        reason: String,
    },
    /// Slots that a producer dropped for a protocol error may still write could not be
    /// replaced with fresh memory: they stay out of use, and the budget is that many
    /// slots smaller from now on.
    SlotsWithheld {
        /// The dropped peer.
        peer: String,
        /// How many slots.
        slots: usize,
        /// Why fresh memory could not be had.
        reason: String,
    },
    /// The sink failed; every later commit is refused.
    SinkFailed {
        /// The error, naming the file and the cause.
        reason: String,
    },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Connected { producer, peer } => write!(f, "producer {producer} connected from {peer}"),
            Event::Finished { producer, blocks, bytes } => {
                write!(f, "producer {producer} finished: {blocks} blocks, {bytes} bytes")
            }
            Event::Lost { producer, blocks, reason } => write!(
                f,
                "producer {producer} lost after {blocks} blocks ({reason}); its uncommitted slots were reclaimed"
            ),
            Event::Dropped { peer, reason } => write!(f, "dropped connection from {peer}: {reason}"),
            Event::SlotsWithheld { peer, slots, reason } => write!(
                f,
                "{slots} slot(s) that {peer} may still write stay out of use, the budget \
                 shrinks by as much: fresh memory for them failed: {reason}"
            ),
            Event::SinkFailed { reason } => write!(f, "output failed, refusing further blocks: {reason}"),
        }
    }
}

type EventFn = Arc<dyn Fn(&Event) + Send + Sync>;

/// Counters of a running merger.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MergerStats {
    /// Producers connected now (said hello, not finished or lost).
    pub active: usize,
    /// Producers that finished normally.
    pub finished: usize,
    /// Producers lost (died, or hung up without finishing).
    pub lost: usize,
    /// Connections dropped for protocol errors or failed handshakes.
    pub dropped: usize,
    /// Blocks written.
    pub blocks: u64,
    /// Payload bytes written.
    pub bytes: u64,
    /// Slot windows registered now.
    pub slots: usize,
    /// Most slot windows registered at once.
    pub peak_slots: usize,
    /// Windows moved from an idle connection to a waiting one.
    pub moves: u64,
    /// Nanoseconds the merger thread spent in the sink's `write` (the file writes).
    pub sink_write_ns: u64,
    /// Nanoseconds it spent idle (sleeping or yielding between empty polling rounds),
    /// pauses under way not counted (see [`MergerStats::idle_ns_at`]).
    pub idle_ns: u64,
    /// When the idle pause under way began, if one is.
    pub idle_since: Option<Instant>,
}

impl MergerStats {
    /// [`idle_ns`](Self::idle_ns) as of `now`, the pause under way counted up to then:
    /// the difference of two snapshots' values is the idle time between their `now`s,
    /// not a whole pause that began before the first.
    pub fn idle_ns_at(&self, now: Instant) -> u64 {
        self.idle_ns
            + self
                .idle_since
                .map_or(0, |t| now.saturating_duration_since(t).as_nanos() as u64)
    }
}

/// What a closed merger wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergeSummary {
    /// The sink's summary.
    pub sink: SinkSummary,
    /// Final counters.
    pub stats: MergerStats,
}

/// Configuration of a merger (a builder).
#[derive(Clone)]
pub struct MergerBuilder {
    budget: usize,
    slot_bytes: usize,
    credit: u32,
    sync: SyncPolicy,
    mode: WriteMode,
    writers: Option<usize>,
    events: Option<EventFn>,
}

impl fmt::Debug for MergerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MergerBuilder")
            .field("budget", &self.budget)
            .field("slot_bytes", &self.slot_bytes)
            .field("credit", &self.credit)
            .field("sync", &self.sync)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Default for MergerBuilder {
    fn default() -> Self {
        MergerBuilder {
            budget: DEFAULT_BUDGET,
            slot_bytes: DEFAULT_SLOT_BYTES,
            credit: DEFAULT_CREDIT,
            sync: SyncPolicy::default(),
            mode: WriteMode::default(),
            writers: None,
            events: None,
        }
    }
}

impl MergerBuilder {
    /// The defaults.
    pub fn new() -> MergerBuilder {
        MergerBuilder::default()
    }

    /// Memory for slots, in bytes (default [`DEFAULT_BUDGET`]); at least one slot.
    pub fn budget(mut self, bytes: usize) -> Self {
        self.budget = bytes;
        self
    }

    /// Bytes per slot, a multiple of 4096 (default [`DEFAULT_SLOT_BYTES`]): the largest
    /// block a producer can commit.
    pub fn slot_bytes(mut self, bytes: usize) -> Self {
        self.slot_bytes = bytes;
        self
    }

    /// Slots one producer may hold at once (default [`DEFAULT_CREDIT`]).
    pub fn credit(mut self, slots: u32) -> Self {
        self.credit = slots;
        self
    }

    /// When to make the output durable (default [`SyncPolicy::OnClose`]).
    pub fn sync(mut self, policy: SyncPolicy) -> Self {
        self.sync = policy;
        self
    }

    /// How block bytes reach the file (default [`WriteMode::Auto`]).
    pub fn write_mode(mut self, mode: WriteMode) -> Self {
        self.mode = mode;
        self
    }

    /// Direct mode: rooms in flight (granted, not committed) across all producers before
    /// further grants wait for one to come back (default: the CPUs this process may run
    /// on, plus one; the budget bounds them too).
    ///
    /// Producers' writes into one file take turns on its inode lock (tmpfs and ext4 hold
    /// it for a whole `pwrite`), so more writers than CPUs only queue in the kernel, and
    /// a long queue is slow there: past about 4 ms of waiting the lock is handed to the
    /// sleeping waiter first in line, and the CPUs idle while it wakes. Waiting for a
    /// grant instead costs nothing while the writers in flight keep the lock busy.
    /// (Producers that insert their pages, on tmpfs while several are connected, take no
    /// inode lock; more writers than CPUs would still only share the CPUs.)
    /// Measured with `pwrite`s, `accio bench merge /dev/shm --write-mode direct`, 2 MiB
    /// blocks, this machine's 2 CPUs, 3 runs each: 16 producers 2.35 and 2.38 GB/s with
    /// 128 rooms in flight, 2.58 and 2.61 with 3; 60 producers 2.25 and 2.22 against 2.39
    /// and 2.43 (2 rooms) and 2.08 and 2.50 (3); 1 producer unchanged. A grant that waited
    /// 50 ms (`WRITERS_PATIENCE`) while no room came back is made past the limit.
    pub fn direct_writers(mut self, rooms: usize) -> Self {
        self.writers = Some(rooms.max(1));
        self
    }

    /// Receives every [`Event`] instead of the default stderr printer.
    pub fn on_event(mut self, f: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.events = Some(Arc::new(f));
        self
    }

    /// Listens on `addr` (`shm://NAME` or `tcp://HOST:PORT`) and starts merging into `sink`.
    pub fn listen(self, addr: &str, mut sink: Box<dyn Sink>) -> Result<Merger> {
        if self.slot_bytes == 0 || !self.slot_bytes.is_multiple_of(4096) {
            return Err(MergeError::Config(format!(
                "slot size {} is not a positive multiple of 4096",
                self.slot_bytes
            )));
        }
        let max_slots = self.budget / self.slot_bytes;
        if max_slots == 0 {
            return Err(MergeError::Config(format!(
                "a budget of {} bytes holds no {}-byte slot",
                self.budget, self.slot_bytes
            )));
        }
        if self.credit == 0 {
            return Err(MergeError::Config("credit must be at least 1 slot".into()));
        }
        let mode = resolve_mode(self.mode, addr, self.slot_bytes, &mut *sink)?;
        let listener = bind(addr)?;
        let addr = listener.local_addr().clone();
        let events: EventFn = self.events.unwrap_or_else(|| {
            Arc::new(|e: &Event| {
                if !matches!(e, Event::Connected { .. } | Event::Finished { .. }) {
                    eprintln!("accio-merge: {e}");
                }
            })
        });
        let shared = Arc::new(Shared {
            closing: AtomicBool::new(false),
            close_deadline: Mutex::new(None),
            abandoned: AtomicBool::new(false),
            handshake_drops: AtomicUsize::new(0),
            inbox: Mutex::new(Vec::new()),
            stats: Mutex::new(MergerStats::default()),
            changed: Condvar::new(),
            events,
        });
        let accept = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("accio-merge-accept".into())
                .spawn(move || accept_main(listener, shared))
                .map_err(|e| MergeError::Config(format!("cannot start the accept thread: {e}")))?
        };
        // Direct producers write into the file: the budget bounds the rooms in flight,
        // and the merger holds no slot memory at all.
        let direct = match mode {
            WriteMode::Direct => {
                let d = sink.direct().expect("checked by resolve_mode");
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
                Some(Direct {
                    max: max_slots,
                    writers: self.writers.unwrap_or(cpus + 1),
                    blocked_since: None,
                    cpus,
                    reads_back: d.reads_back_cheaply(),
                    align: d.reserve_align(),
                    merger_checksums: false,
                    shared: false,
                    inflight: 0,
                    path: d.file_path().as_os_str().as_encoded_bytes().to_vec(),
                    file: d.lend().map_err(|e| {
                        MergeError::file("reopening to lend to producers", d.file_path(), e)
                    })?,
                })
            }
            _ => None,
        };
        let pool = if direct.is_some() {
            Vec::new()
        } else {
            (0..max_slots)
                .map(|_| new_slot(self.slot_bytes))
                .collect::<Result<Vec<_>>>()?
        };
        let core = Core {
            slot_bytes: self.slot_bytes,
            free: (0..pool.len()).rev().collect(),
            pool,
            credit: self.credit,
            sync: self.sync,
            sink: Some(sink),
            direct,
            conns: BTreeMap::new(),
            next_key: 0,
            waiters: VecDeque::new(),
            next_slot: 0,
            ids_used: BTreeSet::new(),
            next_auto_id: 0,
            failed: None,
            shared: shared.clone(),
            tx: Vec::with_capacity(64),
            rx: Vec::with_capacity(64),
            unsynced: Vec::new(),
            stats: MergerStats::default(),
        };
        let progress = std::thread::Builder::new()
            .name("accio-merge".into())
            .spawn(move || core.run())
            .map_err(|e| MergeError::Config(format!("cannot start the merger thread: {e}")))?;
        Ok(Merger {
            addr,
            mode,
            shared,
            accept: Some(accept),
            progress: Some(progress),
        })
    }
}

/// Decides [`WriteMode::Auto`], and refuses a forced [`WriteMode::Direct`] that cannot work.
fn resolve_mode(
    mode: WriteMode,
    addr: &str,
    slot_bytes: usize,
    sink: &mut dyn Sink,
) -> Result<WriteMode> {
    if mode == WriteMode::Copy {
        return Ok(WriteMode::Copy);
    }
    let why_not = (|| -> std::result::Result<(), String> {
        if !matches!(addr.parse::<Addr>(), Ok(Addr::Shm(_))) {
            return Err(format!(
                "{addr} is not an shm:// address: producers may be on other machines"
            ));
        }
        let path = sink.path().display().to_string();
        let d = sink
            .direct()
            .ok_or_else(|| format!("the sink writing {path} re-encodes blocks"))?;
        d.support().map_err(|e| format!("{path}: {e}"))?;
        let align = d.reserve_align();
        if !(slot_bytes as u64).is_multiple_of(align) {
            return Err(format!(
                "the slot size {slot_bytes} is not a multiple of the file's alignment {align}"
            ));
        }
        Ok(())
    })();
    match (mode, why_not) {
        (_, Ok(())) => Ok(WriteMode::Direct),
        (WriteMode::Direct, Err(why)) => Err(MergeError::Config(format!(
            "producers cannot write in place: {why}"
        ))),
        (_, Err(_)) => Ok(WriteMode::Copy),
    }
}

/// Rooms in the file lent to direct producers.
pub(super) struct Direct {
    /// Most rooms in flight (granted, not committed): the budget in slots.
    pub(super) max: usize,
    /// Rooms in flight before grants wait ([`MergerBuilder::direct_writers`]).
    pub(super) writers: usize,
    /// Since when grants have waited for the writers limit, no room coming back.
    pub(super) blocked_since: Option<Instant>,
    /// CPUs this process may run on.
    pub(super) cpus: usize,
    /// The sink reads blocks back cheaply ([`crate::DirectSink::reads_back_cheaply`]).
    pub(super) reads_back: bool,
    /// The file's block alignment ([`crate::DirectSink::reserve_align`]).
    pub(super) align: u64,
    /// The merger checksums the blocks (it has a CPU to itself); producers were told.
    pub(super) merger_checksums: bool,
    /// More than one producer is connected; producers were told ([`crate::wire::Msg::Policy`]).
    pub(super) shared: bool,
    pub(super) inflight: usize,
    /// The file's path, sent to producers for their messages.
    pub(super) path: Vec<u8>,
    /// The file lent to producers, handed over with [`accio::Endpoint::send_file`].
    pub(super) file: std::fs::File,
}

impl Direct {
    /// The policy producers were told last.
    pub(super) fn policy(&self) -> crate::wire::Msg {
        crate::wire::Msg::Policy {
            merger_checksums: self.merger_checksums,
            shared: self.shared,
        }
    }
}

/// State shared between the merger handle and its threads.
struct Shared {
    closing: AtomicBool,
    /// Set with `closing` by `close_within`: when the producers still connected are cut off.
    close_deadline: Mutex<Option<Instant>>,
    /// Set by `Drop`: stop at once and leave the output unclosed.
    abandoned: AtomicBool,
    /// Connections that failed their transport handshake (counted by the accept thread).
    handshake_drops: AtomicUsize,
    inbox: Mutex<Vec<Box<dyn Endpoint>>>,
    stats: Mutex<MergerStats>,
    changed: Condvar,
    events: EventFn,
}

/// A running merger. Dropping it without [`Merger::close`] stops it and leaves the output
/// unclosed (as a crash would: readable by a scan, no index).
pub struct Merger {
    addr: Addr,
    mode: WriteMode,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    progress: Option<JoinHandle<Result<SinkSummary>>>,
}

impl fmt::Debug for Merger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Merger")
            .field("addr", &self.addr)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Merger {
    /// A builder with the defaults.
    pub fn builder() -> MergerBuilder {
        MergerBuilder::new()
    }

    /// The address producers connect to (for `tcp://…:0`, with the real port).
    pub fn addr(&self) -> &Addr {
        &self.addr
    }

    /// How this merger writes blocks ([`WriteMode::Direct`] or [`WriteMode::Copy`]: `Auto`
    /// resolved).
    pub fn write_mode(&self) -> WriteMode {
        self.mode
    }

    /// Current counters.
    pub fn stats(&self) -> MergerStats {
        *self.shared.stats.lock().expect("merger stats lock")
    }

    /// Waits until at least `producers` producers have finished or been lost.
    pub fn wait_done(&self, producers: usize, timeout: Duration) -> Result<MergerStats> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.stats.lock().expect("merger stats lock");
        while st.finished + st.lost < producers {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(MergeError::Timeout {
                    what: format!(
                        "waiting for {producers} producers to finish on {} ({} finished, {} lost)",
                        self.addr, st.finished, st.lost
                    ),
                    after: timeout,
                });
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, left)
                .expect("merger stats lock")
                .0;
        }
        Ok(*st)
    }

    /// Stops accepting producers, waits for the connected ones to finish (or die), then
    /// closes the output (index and trailer; synced unless [`SyncPolicy::Never`]).
    /// Returns the first sink error, if the output failed. A producer that neither
    /// finishes nor dies keeps this waiting: [`Merger::close_within`] bounds the wait.
    pub fn close(self) -> Result<MergeSummary> {
        self.close_with_deadline(None)
    }

    /// [`Merger::close`], waiting at most `patience` for the connected producers: those
    /// still connected then are cut off as if they had died (an [`Event::Lost`] each; they
    /// are told why, and their next call fails). Every block they committed before is in
    /// the output; their uncommitted slots are dropped.
    pub fn close_within(self, patience: Duration) -> Result<MergeSummary> {
        self.close_with_deadline(Some(Instant::now() + patience))
    }

    fn close_with_deadline(mut self, deadline: Option<Instant>) -> Result<MergeSummary> {
        *self.shared.close_deadline.lock().expect("close deadline") = deadline;
        self.shared.closing.store(true, Ordering::SeqCst);
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        let sink = self
            .progress
            .take()
            .expect("progress thread")
            .join()
            .map_err(|_| MergeError::Config("the merger thread panicked".into()))??;
        Ok(MergeSummary {
            sink,
            stats: self.stats(),
        })
    }
}

impl Drop for Merger {
    fn drop(&mut self) {
        if self.progress.is_none() {
            return; // closed
        }
        self.shared.abandoned.store(true, Ordering::SeqCst);
        self.shared.closing.store(true, Ordering::SeqCst);
        if let Some(a) = self.accept.take() {
            let _ = a.join();
        }
        if let Some(p) = self.progress.take() {
            let _ = p.join();
        }
    }
}
