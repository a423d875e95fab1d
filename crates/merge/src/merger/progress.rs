//! The progress thread: the polling loop, sending, group commit, dropping and reaping connections.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use accio::{Endpoint, ErrorKind, Progress, Region};

use super::conn::{Conn, Why};
use super::{
    Event, MergerStats, Shared, SyncPolicy, LAST_WORD_PATIENCE, MAX_IDLE_SLEEP, PROBE_EVERY,
    ROUND_MSGS, SEND_PATIENCE,
};
use crate::error::{MergeError, Result};
use crate::sink::{Sink, SinkSummary};
use crate::wire::Msg;

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

pub(super) struct Core {
    pub(super) slot_bytes: usize,
    /// Every slot's memory; `free` lists those lent to no connection.
    pub(super) pool: Vec<Arc<Region>>,
    pub(super) free: Vec<usize>,
    pub(super) credit: u32,
    pub(super) sync: SyncPolicy,
    pub(super) sink: Option<Box<dyn Sink>>,
    /// Set when producers write in place ([`super::WriteMode::Direct`]).
    pub(super) direct: Option<super::Direct>,
    pub(super) conns: BTreeMap<u64, Conn>,
    pub(super) next_key: u64,
    /// Connections waiting for a slot, one entry per wanted slot, in request order.
    pub(super) waiters: VecDeque<u64>,
    pub(super) next_slot: u32,
    pub(super) ids_used: BTreeSet<u32>,
    pub(super) next_auto_id: u32,
    pub(super) failed: Option<String>,
    pub(super) shared: Arc<Shared>,
    pub(super) tx: Vec<u8>,
    pub(super) rx: Vec<u8>,
    /// Messages (acks, bye-acks) held until the next sync, with `EveryCommit`.
    pub(super) unsynced: Vec<(u64, Msg)>,
    pub(super) stats: MergerStats,
}

impl Core {
    pub(super) fn run(mut self) -> Result<SinkSummary> {
        let mut idle = 0u32;
        loop {
            let fresh: Vec<_> = std::mem::take(&mut *self.shared.inbox.lock().expect("inbox"));
            for ep in fresh {
                self.add(ep);
            }
            let work = self.round();
            self.update_policy();
            if self
                .direct
                .as_ref()
                .is_some_and(|d| d.blocked_since.is_some())
            {
                // Grants held back by the writers limit are made past it after a while.
                self.grant_waiters();
            }
            self.flush_unsynced();
            self.cut_off_at_deadline();
            self.reap();
            // An idle pause starts here when the round found nothing to do; published with
            // the other counters, so a snapshot can count the pause under way.
            self.stats.idle_since = (work == 0).then(Instant::now);
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
                let t = self.stats.idle_since.unwrap_or_else(Instant::now);
                if idle < 16 {
                    std::thread::yield_now();
                } else {
                    let us = 20u64 << ((idle - 16) / 8).min(5);
                    std::thread::sleep(Duration::from_micros(us).min(MAX_IDLE_SLEEP));
                }
                self.stats.idle_ns += t.elapsed().as_nanos() as u64;
                self.stats.idle_since = None;
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
                rooms: Vec::new(),
                waiting: 0,
                wants: Default::default(),
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

    pub(super) fn send(&mut self, key: u64, m: &Msg) {
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

    /// Sends `m` now, or after the next sync with [`SyncPolicy::EveryCommit`].
    pub(super) fn later(&mut self, key: u64, m: Msg) {
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

    /// The sink failed: every later commit is refused, and every producer is told now, so
    /// none keeps filling buffers for nothing.
    pub(super) fn sink_failed(&mut self, reason: String) {
        self.failed = Some(reason.clone());
        (self.shared.events)(&Event::SinkFailed {
            reason: reason.clone(),
        });
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
            c.wants.clear();
        }
    }

    fn publish(&mut self) {
        self.stats.slots = match &self.direct {
            Some(d) => d.inflight,
            None => self.pool.len() - self.free.len(),
        };
        let mut now = self.stats;
        now.dropped += self.shared.handshake_drops.load(Ordering::SeqCst);
        let mut st = self.shared.stats.lock().expect("merger stats lock");
        if *st != now {
            *st = now;
            self.shared.changed.notify_all();
        }
    }
}
