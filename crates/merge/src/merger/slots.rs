//! The slot pool: lending windows to waiting connections, moving idle ones, taking them back.

use std::sync::Arc;
use std::time::Instant;

use accio::{Access, ErrorKind, MemView, Region, Window};

use super::conn::{Conn, Room, Why};
use super::progress::Core;
use super::{Event, WRITERS_PATIENCE};
use crate::error::{MergeError, Result};
use crate::wire::Msg;

/// Most active producers whose blocks the merger checksums itself (see
/// `Core::update_policy`).
const MERGER_CHECKSUMS_FOR: usize = 1;

/// One window lent to a connection.
pub(super) struct SlotWin {
    pub(super) id: u32,
    pub(super) window: Window,
    pub(super) granted: bool,
    /// Which slot of the pool it is.
    pub(super) pool: usize,
}

/// One slot's memory: shareable (an shm producer maps it), faulted in now.
pub(super) fn new_slot(bytes: usize) -> Result<Arc<Region>> {
    Region::shareable(bytes, "accio-merge-slot", true)
        .map(Arc::new)
        .map_err(|e| MergeError::Config(format!("cannot allocate the merger's slots: {e}")))
}

impl Core {
    /// Grants free slots to waiting connections, in request order.
    pub(super) fn grant_waiters(&mut self) {
        if self.direct.is_some() {
            return self.grant_rooms();
        }
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

    /// Direct mode: reserves room in the file for waiting connections, in request order,
    /// while fewer than the budget's worth are in flight; each room as large as its
    /// producer asked (the blocks it expects to write there), at most a slot.
    fn grant_rooms(&mut self) {
        while let Some(&key) = self.waiters.front() {
            let d = self.direct.as_mut().expect("direct mode");
            if d.inflight >= d.max {
                return; // the budget is in producers' hands: the waiter waits
            }
            if d.inflight >= d.writers {
                let since = *d.blocked_since.get_or_insert_with(Instant::now);
                if since.elapsed() < WRITERS_PATIENCE {
                    return; // enough writers in flight: the waiter waits for one to finish
                }
            }
            let Some(c) = self.conns.get_mut(&key) else {
                self.waiters.pop_front();
                continue;
            };
            if c.drop_reason.is_some() || c.done {
                self.waiters.pop_front();
                continue;
            }
            let bytes = match c.wants.pop_front() {
                Some(0) | None => self.slot_bytes as u64,
                Some(b) => b,
            };
            let sink = self.sink.as_mut().expect("sink present until close");
            let at = match sink.direct().expect("direct sink").reserve(bytes) {
                Ok(at) => at,
                Err(e) => return self.sink_failed(e.to_string()),
            };
            d.inflight += 1;
            d.blocked_since = None;
            self.stats.peak_slots = self.stats.peak_slots.max(d.inflight);
            let id = self.next_slot;
            self.next_slot = self.next_slot.wrapping_add(1);
            c.rooms.push(Room {
                id,
                at,
                bytes,
                counted: true,
            });
            c.waiting -= 1;
            self.waiters.pop_front();
            self.send(
                key,
                &Msg::Grant {
                    slot: id,
                    offset: at,
                },
            );
        }
    }

    /// Direct mode: how producers write ([`Msg::Policy`]), told to them when it changes.
    ///
    /// Who checksums the blocks: the merger while one producer writes, leaving it a CPU
    /// of its own (fewer producers than CPUs), and the sink reads blocks back cheaply
    /// (tmpfs): the producer's only work per block is then its copy, and the checksum is
    /// read back from the file on the other CPU (1 producer into /dev/shm, 12 interleaved
    /// runs: 0.91x the single-stream ceiling, median, against 0.89). Its one thread reads
    /// back and checksums at about one producer's copy rate, so with more producers they
    /// checksum what they wrote, even with CPUs to spare: 8 producer processes on a
    /// 16-core Xeon, the merger checksumming, merged at 4.20 GB/s with its thread in
    /// commits 94% of the time (4.47 GB/s), against a 16-stream ceiling of 31.5. With as
    /// many producers as CPUs or more, every CPU is busy, and the merger thread, which
    /// every grant passes through, must stay free. Every commit says whether it carries a
    /// checksum, so one in flight across the change is fine.
    ///
    /// Whether other producers are connected (idle ones too): then, on tmpfs, producers
    /// insert their pages instead of taking turns on the inode lock (`crate::insert`).
    pub(super) fn update_policy(&mut self) {
        let active = self.stats.active;
        let Some(d) = self.direct.as_mut() else {
            return;
        };
        let merger_checksums = d.reads_back && active <= MERGER_CHECKSUMS_FOR && active < d.cpus;
        let shared = active > 1;
        if (merger_checksums, shared) == (d.merger_checksums, d.shared) {
            return;
        }
        d.merger_checksums = merger_checksums;
        d.shared = shared;
        let policy = d.policy();
        let keys: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.producer.is_some() && !c.done && c.drop_reason.is_none())
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            self.send(key, &policy);
        }
    }

    /// Direct mode: marks rooms that will not be committed as holes and frees their share
    /// of the budget.
    pub(super) fn abandon_rooms(&mut self, rooms: &[Room], released: bool) {
        if let Some(d) = self.direct.as_mut() {
            d.inflight -= rooms.iter().filter(|r| r.counted).count();
        }
        if self.failed.is_some() {
            return; // the sink refuses writes; a scan skips the unmarked rooms as damage
        }
        let sink = self.sink.as_mut().expect("sink present until close");
        let d = sink.direct().expect("direct sink");
        for r in rooms {
            if let Err(e) = d.abandon(r.at, r.bytes, released) {
                return self.sink_failed(e.to_string());
            }
        }
    }

    /// Gives the slots of a removed connection back to the pool; those of a peer that
    /// broke the protocol (and may still be running, with them mapped) get fresh memory.
    pub(super) fn return_slots(&mut self, c: &Conn) {
        if !c.rooms.is_empty() {
            // Gone or cut off: it may still have the rooms mapped.
            self.abandon_rooms(&c.rooms, false);
        }
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
}
