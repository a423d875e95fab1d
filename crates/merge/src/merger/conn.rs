//! Per-connection state: one producer's endpoint, its windows and its progress.

use std::time::Instant;

use accio::Endpoint;

use super::slots::SlotWin;

pub(super) struct Conn {
    pub(super) ep: Box<dyn Endpoint>,
    pub(super) peer: String,
    /// Set by hello.
    pub(super) producer: Option<u32>,
    pub(super) slots: Vec<SlotWin>,
    /// Rooms in the file granted to it (direct mode): all in its producer's hands.
    pub(super) rooms: Vec<Room>,
    /// Acquires queued in `Core::waiters`.
    pub(super) waiting: u32,
    /// Direct mode: the payload room each queued acquire asks for, in order (0: a slot's).
    pub(super) wants: std::collections::VecDeque<u64>,
    pub(super) next_seq: u64,
    pub(super) blocks: u64,
    pub(super) bytes: u64,
    /// Bye received (and answered once synced).
    pub(super) done: bool,
    /// Why the connection must go (set while handling a message).
    pub(super) drop_reason: Option<Why>,
    /// Last time a message came or the peer was probed for liveness.
    pub(super) last_heard: Instant,
}

pub(super) enum Why {
    /// The peer is gone (died or closed).
    Gone(String),
    /// It broke the protocol.
    Protocol(String),
}

/// Room in the output file granted to a direct producer.
#[derive(Clone, Copy, Debug)]
pub(super) struct Room {
    pub(super) id: u32,
    /// File offset of the payload.
    pub(super) at: u64,
    /// Payload bytes it holds.
    pub(super) bytes: u64,
    /// Counted in `Direct::inflight`: granted and not yet written into. The rest of a room
    /// after a short block, which its producer keeps for its next blocks, is not.
    pub(super) counted: bool,
}

impl Conn {
    pub(super) fn granted(&self) -> u32 {
        self.slots.iter().filter(|s| s.granted).count() as u32 + self.rooms.len() as u32
    }
}
