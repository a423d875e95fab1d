//! The merger: accepts producers, lends them slots, writes committed slots to its sink.
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

use accio::{Access, Addr, Endpoint, ErrorKind, Listener, MemView, Progress, Region, Window};

use crate::container::BlockKind;
use crate::error::{MergeError, Result};
use crate::sink::{Block, Sink, SinkSummary};
use crate::wire::{Msg, ANY_PRODUCER, PROTOCOL};

/// Default memory budget: 256 MiB of slots.
pub const DEFAULT_BUDGET: usize = 256 << 20;
/// Default slot size: 2 MiB, the seed's buffer size (100 × 2 MB files per worker) and large
/// enough that the per-block handoff (a few small messages) is noise beside the copy.
pub const DEFAULT_SLOT_BYTES: usize = 2 << 20;
/// Default credit: 2 slots per producer, so one can be filled while the other is written.
pub const DEFAULT_CREDIT: u32 = 2;

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
    /// Nanoseconds it spent idle (sleeping or yielding between empty polling rounds).
    pub idle_ns: u64,
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
    events: Option<EventFn>,
}

impl fmt::Debug for MergerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MergerBuilder")
            .field("budget", &self.budget)
            .field("slot_bytes", &self.slot_bytes)
            .field("credit", &self.credit)
            .field("sync", &self.sync)
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

    /// Receives every [`Event`] instead of the default stderr printer.
    pub fn on_event(mut self, f: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.events = Some(Arc::new(f));
        self
    }

    /// Listens on `addr` (`shm://NAME` or `tcp://HOST:PORT`) and starts merging into `sink`.
    pub fn listen(self, addr: &str, sink: Box<dyn Sink>) -> Result<Merger> {
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
        let pool = (0..max_slots)
            .map(|_| new_slot(self.slot_bytes))
            .collect::<Result<Vec<_>>>()?;
        let core = Core {
            slot_bytes: self.slot_bytes,
            free: (0..pool.len()).rev().collect(),
            pool,
            credit: self.credit,
            sync: self.sync,
            sink: Some(sink),
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
            shared,
            accept: Some(accept),
            progress: Some(progress),
        })
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

/// The merger's listener. Its shm endpoints do not spin: the merger polls many endpoints
/// and probes idle ones for liveness with a zero-timeout receive, which must cost one
/// `poll` system call, not a 50 µs spin.
fn bind(addr: &str) -> Result<Box<dyn Listener>> {
    let shm = accio::ShmOptions {
        spin: Duration::ZERO,
        ..accio::ShmOptions::from_env()
    };
    Ok(accio::listen_with(addr, &accio::Options::new().with(shm))?)
}

fn accept_main(listener: Box<dyn Listener>, shared: Arc<Shared>) {
    while !shared.closing.load(Ordering::SeqCst) {
        match listener.accept(Some(Duration::from_millis(100))) {
            Ok(ep) => shared.inbox.lock().expect("merger inbox lock").push(ep),
            Err(e) if e.kind() == ErrorKind::Timeout => {}
            Err(e) => {
                shared.handshake_drops.fetch_add(1, Ordering::SeqCst);
                (shared.events)(&Event::Dropped {
                    peer: listener.local_addr().to_string(),
                    reason: format!("handshake failed: {e}"),
                });
                // Avoid a hot loop on a persistent accept error (e.g. out of descriptors).
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// One window lent to a connection.
struct SlotWin {
    id: u32,
    window: Window,
    granted: bool,
    /// Which slot of the pool it is.
    pool: usize,
}

/// One slot's memory: shareable (an shm producer maps it), faulted in now.
fn new_slot(bytes: usize) -> Result<Arc<Region>> {
    Region::shareable(bytes, "accio-merge-slot", true)
        .map(Arc::new)
        .map_err(|e| MergeError::Config(format!("cannot allocate the merger's slots: {e}")))
}

struct Conn {
    ep: Box<dyn Endpoint>,
    peer: String,
    /// Set by hello.
    producer: Option<u32>,
    slots: Vec<SlotWin>,
    /// Acquires queued in `Core::waiters`.
    waiting: u32,
    next_seq: u64,
    blocks: u64,
    bytes: u64,
    /// Bye received (and answered once synced).
    done: bool,
    /// Why the connection must go (set while handling a message).
    drop_reason: Option<Why>,
    /// Last time a message came or the peer was probed for liveness.
    last_heard: Instant,
}

enum Why {
    /// The peer is gone (died or closed).
    Gone(String),
    /// It broke the protocol.
    Protocol(String),
}

impl Conn {
    fn granted(&self) -> u32 {
        self.slots.iter().filter(|s| s.granted).count() as u32
    }
}

/// Tells a producer about to be dropped why, best effort: the connection goes either way,
/// so a peer that is gone, or does not take the message by `until` (shared by everyone
/// dropped in one pass, see [`LAST_WORD_PATIENCE`]), is not told.
fn send_last_word(ep: &dyn Endpoint, msg: &[u8], until: Instant) {
    while let Ok(Progress::WouldBlock) = ep.try_send(msg) {
        if Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

struct Core {
    slot_bytes: usize,
    /// Every slot's memory; `free` lists those lent to no connection.
    pool: Vec<Arc<Region>>,
    free: Vec<usize>,
    credit: u32,
    sync: SyncPolicy,
    sink: Option<Box<dyn Sink>>,
    conns: BTreeMap<u64, Conn>,
    next_key: u64,
    /// Connections waiting for a slot, one entry per wanted slot, in request order.
    waiters: VecDeque<u64>,
    next_slot: u32,
    ids_used: BTreeSet<u32>,
    next_auto_id: u32,
    failed: Option<String>,
    shared: Arc<Shared>,
    tx: Vec<u8>,
    rx: Vec<u8>,
    /// Messages (acks, bye-acks) held until the next sync, with `EveryCommit`.
    unsynced: Vec<(u64, Msg)>,
    stats: MergerStats,
}

impl Core {
    fn run(mut self) -> Result<SinkSummary> {
        let mut idle = 0u32;
        loop {
            let fresh: Vec<_> = std::mem::take(&mut *self.shared.inbox.lock().expect("inbox"));
            for ep in fresh {
                self.add(ep);
            }
            let work = self.round();
            self.flush_unsynced();
            self.cut_off_at_deadline();
            self.reap();
            self.publish();
            if self.shared.abandoned.load(Ordering::SeqCst) {
                // Dropped without close: hang up on everyone and leave the file as a crash
                // would (every written block readable by a scan, no index).
                return Err(MergeError::Config(
                    "the merger was dropped without close".into(),
                ));
            }
            if self.shared.closing.load(Ordering::SeqCst)
                && self.conns.is_empty()
                && self.shared.inbox.lock().expect("inbox").is_empty()
            {
                break;
            }
            if work > 0 {
                idle = 0;
            } else {
                idle = idle.saturating_add(1);
                let t = Instant::now();
                if idle < 16 {
                    std::thread::yield_now();
                } else {
                    let us = 20u64 << ((idle - 16) / 8).min(5);
                    std::thread::sleep(Duration::from_micros(us).min(MAX_IDLE_SLEEP));
                }
                self.stats.idle_ns += t.elapsed().as_nanos() as u64;
            }
        }
        let sink = self.sink.take().expect("sink present until close");
        let path = sink.path().to_path_buf();
        // Closed even after a failure: the index makes the blocks written so far whole.
        let summary = sink.finish(self.sync != SyncPolicy::Never);
        match (&self.failed, summary) {
            (Some(why), _) => Err(MergeError::Sink {
                path,
                reason: format!("the merge failed: {why}"),
            }),
            (None, s) => s,
        }
    }

    fn add(&mut self, ep: Box<dyn Endpoint>) {
        let key = self.next_key;
        self.next_key += 1;
        let peer = ep.peer_addr().to_string();
        self.conns.insert(
            key,
            Conn {
                ep,
                peer,
                producer: None,
                slots: Vec::new(),
                waiting: 0,
                next_seq: 0,
                blocks: 0,
                bytes: 0,
                done: false,
                drop_reason: None,
                last_heard: Instant::now(),
            },
        );
    }

    /// One polling pass over every connection; returns the number of messages handled.
    fn round(&mut self) -> usize {
        let keys: Vec<u64> = self.conns.keys().copied().collect();
        let mut work = 0;
        let now = Instant::now();
        for key in keys {
            for _ in 0..ROUND_MSGS {
                let Some(c) = self.conns.get_mut(&key) else {
                    break;
                };
                if c.drop_reason.is_some() {
                    break;
                }
                let mut rx = std::mem::take(&mut self.rx);
                let mut got = c.ep.try_recv(&mut rx);
                if matches!(got, Ok(Progress::WouldBlock))
                    && now.duration_since(c.last_heard) >= PROBE_EVERY
                {
                    // `try_recv` does not notice a peer that was killed (shm learns it from
                    // a hang-up that only waiting calls look at); a receive that waits zero
                    // seconds does, and costs one system call.
                    c.last_heard = now;
                    got = match c.ep.recv_timeout(&mut rx, Some(Duration::ZERO)) {
                        Ok(n) => Ok(Progress::Ready(n)),
                        Err(e) if e.kind() == ErrorKind::Timeout => Ok(Progress::WouldBlock),
                        Err(e) => Err(e),
                    };
                }
                if matches!(got, Ok(Progress::Ready(_))) {
                    c.last_heard = now;
                }
                let r = match got {
                    Ok(Progress::Ready(_)) => {
                        work += 1;
                        let r = match Msg::decode(&rx) {
                            Ok(m) => self.handle(key, m),
                            Err(why) => Err(Why::Protocol(why)),
                        };
                        self.rx = rx;
                        r
                    }
                    Ok(Progress::WouldBlock) => {
                        self.rx = rx;
                        break;
                    }
                    Err(e) => {
                        self.rx = rx;
                        Err(match e.kind() {
                            ErrorKind::PeerGone => Why::Gone(e.to_string()),
                            _ => Why::Protocol(e.to_string()),
                        })
                    }
                };
                if let Err(d) = r {
                    if let Some(c) = self.conns.get_mut(&key) {
                        c.drop_reason = Some(d);
                    }
                    break;
                }
            }
        }
        work
    }

    fn send(&mut self, key: u64, m: &Msg) {
        let Some(c) = self.conns.get_mut(&key) else {
            return;
        };
        m.encode(&mut self.tx);
        // Never block the one merger thread on one producer: the library reads its messages
        // whenever it is called, so its queue fills only if it stopped reading (stuck or
        // hostile). Give it a second, then drop it.
        let start = Instant::now();
        let why = loop {
            match c.ep.try_send(&self.tx) {
                Ok(Progress::Ready(())) => return,
                Ok(Progress::WouldBlock) if start.elapsed() < SEND_PATIENCE => {
                    std::thread::sleep(Duration::from_micros(50));
                }
                Ok(Progress::WouldBlock) => {
                    break Why::Protocol(format!(
                        "stopped reading its messages (queue full for {SEND_PATIENCE:?})"
                    ))
                }
                Err(e) => break Why::Gone(e.to_string()),
            }
        };
        if c.drop_reason.is_none() {
            c.drop_reason = Some(why);
        }
    }

    fn handle(&mut self, key: u64, m: Msg) -> std::result::Result<(), Why> {
        let c = self.conns.get_mut(&key).expect("live connection");
        if c.producer.is_none() {
            let Msg::Hello { version, producer } = m else {
                return Err(Why::Protocol(format!(
                    "expected hello as the first message, got {m:?}"
                )));
            };
            if version != PROTOCOL {
                let reason = format!(
                    "producer speaks merge protocol {version}, this merger speaks {PROTOCOL}"
                );
                self.send(
                    key,
                    &Msg::Fail {
                        reason: reason.clone(),
                    },
                );
                return Err(Why::Protocol(reason));
            }
            let id = if producer == ANY_PRODUCER {
                while self.ids_used.contains(&self.next_auto_id) {
                    self.next_auto_id += 1;
                }
                self.next_auto_id
            } else if self.ids_used.contains(&producer) {
                let reason = format!("producer id {producer} is already taken in this file");
                self.send(
                    key,
                    &Msg::Fail {
                        reason: reason.clone(),
                    },
                );
                return Err(Why::Protocol(reason));
            } else {
                producer
            };
            self.ids_used.insert(id);
            let peer = c.peer.clone();
            c.producer = Some(id);
            self.stats.active += 1;
            self.send(
                key,
                &Msg::Welcome {
                    producer: id,
                    slot_bytes: self.slot_bytes as u64,
                    credit: self.credit,
                },
            );
            (self.shared.events)(&Event::Connected { producer: id, peer });
            if let Some(why) = self.failed.clone() {
                self.send(key, &Msg::Fail { reason: why });
            }
            return Ok(());
        }
        match m {
            Msg::Acquire => {
                if c.granted() + c.waiting >= self.credit {
                    return Err(Why::Protocol(format!(
                        "asked for a slot beyond its credit of {}",
                        self.credit
                    )));
                }
                if let Some(why) = self.failed.clone() {
                    self.send(key, &Msg::Fail { reason: why });
                    return Ok(());
                }
                c.waiting += 1;
                self.waiters.push_back(key);
                self.grant_waiters();
                Ok(())
            }
            Msg::Release { slot } => {
                let s = c
                    .slots
                    .iter_mut()
                    .find(|s| s.id == slot && s.granted)
                    .ok_or_else(|| {
                        Why::Protocol(format!("released slot {slot}, which it does not hold"))
                    })?;
                s.granted = false;
                self.grant_waiters();
                Ok(())
            }
            Msg::Commit {
                slot,
                seq,
                len,
                crc,
                kind,
            } => self.commit(key, slot, seq, len, crc, kind),
            Msg::Bye => {
                c.done = true;
                let producer = c.producer.expect("said hello");
                let (blocks, bytes) = (c.blocks, c.bytes);
                // Its slots stay registered until it hangs up; they are idle and may move.
                for s in &mut c.slots {
                    s.granted = false;
                }
                self.waiters.retain(|&k| k != key);
                c.waiting = 0;
                self.stats.active -= 1;
                self.stats.finished += 1;
                self.later(key, Msg::ByeAck);
                (self.shared.events)(&Event::Finished {
                    producer,
                    blocks,
                    bytes,
                });
                self.grant_waiters();
                Ok(())
            }
            other => Err(Why::Protocol(format!(
                "unexpected message from a producer: {other:?}"
            ))),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn commit(
        &mut self,
        key: u64,
        slot: u32,
        seq: u64,
        len: u64,
        crc: u32,
        kind: u8,
    ) -> std::result::Result<(), Why> {
        let slot_bytes = self.slot_bytes as u64;
        let c = self.conns.get_mut(&key).expect("live connection");
        let producer = c.producer.expect("said hello");
        if c.done {
            return Err(Why::Protocol("commit after bye".into()));
        }
        if seq != c.next_seq {
            return Err(Why::Protocol(format!(
                "commit of sequence {seq}, expected {}",
                c.next_seq
            )));
        }
        if len > slot_bytes {
            return Err(Why::Protocol(format!(
                "commit of {len} bytes into a {slot_bytes}-byte slot"
            )));
        }
        let Some(idx) = c.slots.iter().position(|s| s.id == slot && s.granted) else {
            return Err(Why::Protocol(format!(
                "commit into slot {slot}, which it does not hold"
            )));
        };
        c.next_seq += 1;
        if let Some(why) = self.failed.clone() {
            c.slots[idx].granted = false;
            self.send(key, &Msg::Fail { reason: why });
            self.grant_waiters();
            return Ok(());
        }
        let window = c.slots[idx].window.clone();
        // SAFETY: the producer handed the slot over with this commit and, by the protocol,
        // does not touch it again until it is granted anew (after this write). A producer
        // that breaks that rule can only change its own block's bytes, which the checksum
        // it sent then exposes; the bytes are plain data either way.
        let payload = unsafe { &window.view().as_slice()[..len as usize] };
        let block = Block {
            producer,
            seq,
            kind: BlockKind::from_code(kind),
            payload,
            crc,
        };
        let sink = self.sink.as_mut().expect("sink present until close");
        let t = Instant::now();
        let written = sink.write(&block);
        self.stats.sink_write_ns += t.elapsed().as_nanos() as u64;
        match written {
            Ok(()) => {
                c.slots[idx].granted = false;
                c.blocks += 1;
                c.bytes += len;
                self.stats.blocks += 1;
                self.stats.bytes += len;
                self.later(key, Msg::Ack { seq });
            }
            Err(e @ MergeError::Rejected { .. }) => {
                c.slots[idx].granted = false;
                self.grant_waiters();
                return Err(Why::Protocol(e.to_string()));
            }
            Err(e) => {
                c.slots[idx].granted = false;
                let reason = e.to_string();
                self.failed = Some(reason.clone());
                (self.shared.events)(&Event::SinkFailed {
                    reason: reason.clone(),
                });
                // Tell every producer now, so none keeps filling slots for nothing.
                let keys: Vec<u64> = self.conns.keys().copied().collect();
                for k in keys {
                    self.send(
                        k,
                        &Msg::Fail {
                            reason: reason.clone(),
                        },
                    );
                }
                self.waiters.clear();
                for c in self.conns.values_mut() {
                    c.waiting = 0;
                }
            }
        }
        self.grant_waiters();
        Ok(())
    }

    /// Sends `m` now, or after the next sync with [`SyncPolicy::EveryCommit`].
    fn later(&mut self, key: u64, m: Msg) {
        if self.sync == SyncPolicy::EveryCommit {
            self.unsynced.push((key, m));
        } else {
            self.send(key, &m);
        }
    }

    fn flush_unsynced(&mut self) {
        if self.unsynced.is_empty() {
            return;
        }
        if self.failed.is_none() {
            if let Err(e) = self.sink.as_mut().expect("sink").sync() {
                let reason = e.to_string();
                self.failed = Some(reason.clone());
                (self.shared.events)(&Event::SinkFailed {
                    reason: reason.clone(),
                });
                for (key, _) in std::mem::take(&mut self.unsynced) {
                    self.send(
                        key,
                        &Msg::Fail {
                            reason: reason.clone(),
                        },
                    );
                }
                return;
            }
        }
        for (key, m) in std::mem::take(&mut self.unsynced) {
            self.send(key, &m);
        }
    }

    /// Grants free slots to waiting connections, in request order.
    fn grant_waiters(&mut self) {
        while let Some(&key) = self.waiters.front() {
            let Some(c) = self.conns.get_mut(&key) else {
                self.waiters.pop_front();
                continue;
            };
            if c.drop_reason.is_some() || c.done {
                self.waiters.pop_front();
                continue;
            }
            // 1. A free window already registered on its own connection.
            if let Some(s) = c.slots.iter_mut().find(|s| !s.granted) {
                s.granted = true;
                let m = Msg::Grant {
                    slot: s.id,
                    offset: s.window.offset(),
                };
                c.waiting -= 1;
                self.waiters.pop_front();
                self.send(key, &m);
                continue;
            }
            // 2. Room in the budget for a new window; 3. or an idle one to move.
            if self.free.is_empty() {
                let victim = self
                    .conns
                    .iter()
                    .filter(|(k, c)| **k != key && c.slots.iter().any(|s| !s.granted))
                    .max_by_key(|(_, c)| c.slots.iter().filter(|s| !s.granted).count())
                    .map(|(k, _)| *k);
                let Some(v) = victim else {
                    return; // every window is in use: the waiter waits
                };
                let vc = self.conns.get_mut(&v).expect("victim");
                let i = vc.slots.iter().position(|s| !s.granted).expect("idle slot");
                let w = vc.slots.swap_remove(i);
                // Failure means the victim is gone; its windows go with it anyway.
                let _ = vc.ep.unregister(w.window.offset());
                self.free.push(w.pool);
                self.stats.moves += 1;
            }
            let pool = self.free.pop().expect("a free slot");
            let c = self.conns.get_mut(&key).expect("waiter");
            let view = MemView::whole(self.pool[pool].clone());
            match c.ep.register_view(&view, Access::READ_WRITE) {
                Ok(window) => {
                    let id = self.next_slot;
                    self.next_slot = self.next_slot.wrapping_add(1);
                    let offset = window.offset();
                    c.slots.push(SlotWin {
                        id,
                        window,
                        granted: true,
                        pool,
                    });
                    c.waiting -= 1;
                    let lent = self.pool.len() - self.free.len();
                    self.stats.peak_slots = self.stats.peak_slots.max(lent);
                    self.waiters.pop_front();
                    self.send(key, &Msg::Grant { slot: id, offset });
                }
                Err(e) => {
                    self.free.push(pool);
                    // The connection is broken (or the system is out of memory): drop it,
                    // and let the others go on.
                    self.waiters.pop_front();
                    c.drop_reason = Some(match e.kind() {
                        ErrorKind::PeerGone => Why::Gone(e.to_string()),
                        _ => Why::Protocol(format!("cannot register a slot for it: {e}")),
                    });
                }
            }
        }
    }

    /// Removes connections that are gone or broke the protocol, reclaiming their slots.
    /// Past `close_within`'s deadline, marks every connection still open for dropping
    /// (`reap` then reclaims its slots and reports it lost), after telling its producer.
    fn cut_off_at_deadline(&mut self) {
        if !self.shared.closing.load(Ordering::SeqCst) || self.conns.is_empty() {
            return;
        }
        let deadline = *self.shared.close_deadline.lock().expect("close deadline");
        if deadline.is_none_or(|d| Instant::now() < d) {
            return;
        }
        let reason = "the merger closed before this producer finished".to_string();
        let until = Instant::now() + LAST_WORD_PATIENCE;
        for c in self.conns.values_mut().filter(|c| c.drop_reason.is_none()) {
            if !c.done {
                self.tx.clear();
                Msg::Fail {
                    reason: reason.clone(),
                }
                .encode(&mut self.tx);
                send_last_word(&*c.ep, &self.tx, until);
            }
            c.drop_reason = Some(Why::Gone(reason.clone()));
        }
    }

    fn reap(&mut self) {
        let dead: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.drop_reason.is_some())
            .map(|(k, _)| *k)
            .collect();
        if dead.is_empty() {
            return;
        }
        let until = Instant::now() + LAST_WORD_PATIENCE;
        for key in dead {
            let c = self.conns.remove(&key).expect("dead connection");
            self.return_slots(&c);
            self.waiters.retain(|&k| k != key);
            let reason = match c.drop_reason.expect("dead") {
                Why::Gone(r) => r,
                Why::Protocol(r) => {
                    self.stats.dropped += 1;
                    if c.producer.is_some() && !c.done {
                        self.stats.active -= 1;
                        self.stats.lost += 1;
                    }
                    let mut tx = Vec::new();
                    Msg::Fail {
                        reason: format!("merge protocol error: {r}"),
                    }
                    .encode(&mut tx);
                    send_last_word(&*c.ep, &tx, until);
                    (self.shared.events)(&Event::Dropped {
                        peer: match c.producer {
                            Some(p) => format!("producer {p} at {}", c.peer),
                            None => c.peer.clone(),
                        },
                        reason: r,
                    });
                    continue;
                }
            };
            match (c.producer, c.done) {
                (Some(producer), false) => {
                    self.stats.active -= 1;
                    self.stats.lost += 1;
                    (self.shared.events)(&Event::Lost {
                        producer,
                        blocks: c.blocks,
                        reason,
                    });
                }
                (None, _) => {
                    self.stats.dropped += 1;
                    (self.shared.events)(&Event::Dropped {
                        peer: c.peer.clone(),
                        reason: format!("gone before hello: {reason}"),
                    });
                }
                (Some(_), true) => {} // finished and hung up: the normal end
            }
        }
        self.grant_waiters();
    }

    /// Gives the slots of a removed connection back to the pool; those of a peer that
    /// broke the protocol (and may still be running, with them mapped) get fresh memory.
    fn return_slots(&mut self, c: &Conn) {
        let broke = matches!(c.drop_reason, Some(Why::Protocol(_)));
        let mut withheld = (0, String::new());
        for s in &c.slots {
            if broke {
                match new_slot(self.slot_bytes) {
                    Ok(fresh) => self.pool[s.pool] = fresh,
                    // Out of memory: the slot stays out of the pool (the budget shrinks
                    // by one slot) rather than lend memory a stranger may write.
                    Err(e) => {
                        withheld = (withheld.0 + 1, e.to_string());
                        continue;
                    }
                }
            }
            self.free.push(s.pool);
        }
        if withheld.0 > 0 {
            (self.shared.events)(&Event::SlotsWithheld {
                peer: c.peer.clone(),
                slots: withheld.0,
                reason: withheld.1,
            });
        }
    }

    fn publish(&mut self) {
        self.stats.slots = self.pool.len() - self.free.len();
        let mut now = self.stats;
        now.dropped += self.shared.handshake_drops.load(Ordering::SeqCst);
        let mut st = self.shared.stats.lock().expect("merger stats lock");
        if *st != now {
            *st = now;
            self.shared.changed.notify_all();
        }
    }
}
