//! Handling a producer's messages: hello, acquire, release, commit (the write), bye.

use std::time::Instant;

use super::conn::{Room, Why};
use super::progress::Core;
use super::Event;
use crate::container::{BlockKind, Rest};
use crate::error::MergeError;
use crate::sink::{Block, DirectBlock};
use crate::wire::{Msg, ANY_PRODUCER, PROTOCOL};

impl Core {
    pub(super) fn handle(&mut self, key: u64, m: Msg) -> std::result::Result<(), Why> {
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
            if let Some(d) = &self.direct {
                // The file goes first, so it is there when the message announcing it is.
                if let Err(e) = c.ep.send_file(&d.file) {
                    return Err(Why::Gone(format!("cannot hand it the output file: {e}")));
                }
                let path = d.path.clone();
                let align = d.align as u32;
                self.send(key, &Msg::Direct { align, path });
            }
            self.send(
                key,
                &Msg::Welcome {
                    producer: id,
                    slot_bytes: self.slot_bytes as u64,
                    credit: self.credit,
                },
            );
            if let Some(d) = self
                .direct
                .as_ref()
                .filter(|d| d.merger_checksums || d.shared)
            {
                let policy = d.policy();
                self.send(key, &policy);
            }
            (self.shared.events)(&Event::Connected { producer: id, peer });
            if let Some(why) = self.failed.clone() {
                self.send(key, &Msg::Fail { reason: why });
            }
            return Ok(());
        }
        match m {
            Msg::Acquire { bytes } => {
                if c.granted() + c.waiting >= self.credit {
                    return Err(Why::Protocol(format!(
                        "asked for a slot beyond its credit of {}",
                        self.credit
                    )));
                }
                let align = self.direct.as_ref().map_or(1, |d| d.align);
                if bytes > self.slot_bytes as u64 || !bytes.is_multiple_of(align) {
                    return Err(Why::Protocol(format!(
                        "asked for {bytes} bytes of room: at most the slot size {} and a \
                         multiple of the alignment {align}",
                        self.slot_bytes
                    )));
                }
                if let Some(why) = self.failed.clone() {
                    self.send(key, &Msg::Fail { reason: why });
                    return Ok(());
                }
                c.waiting += 1;
                if self.direct.is_some() {
                    c.wants.push_back(bytes);
                }
                self.waiters.push_back(key);
                self.grant_waiters();
                Ok(())
            }
            Msg::Release { slot } if self.direct.is_some() => {
                let i = c.rooms.iter().position(|r| r.id == slot).ok_or_else(|| {
                    Why::Protocol(format!("released room {slot}, which it does not hold"))
                })?;
                let room = c.rooms.swap_remove(i);
                self.abandon_rooms(&[room], true);
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
                let rooms = std::mem::take(&mut c.rooms);
                self.waiters.retain(|&k| k != key);
                c.waiting = 0;
                c.wants.clear();
                self.stats.active -= 1;
                self.stats.finished += 1;
                if !rooms.is_empty() {
                    self.abandon_rooms(&rooms, true);
                }
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
        crc: Option<u32>,
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
        if BlockKind::from_code(kind).is_space() {
            return Err(Why::Protocol(format!(
                "commit of a block of kind {}: only the merger writes those",
                BlockKind::from_code(kind).name()
            )));
        }
        if self.direct.is_some() {
            return self.commit_direct(key, slot, seq, len, crc, kind);
        }
        let Some(crc) = crc else {
            return Err(Why::Protocol(format!(
                "commit of block {seq} without a checksum into a slot of the merger's"
            )));
        };
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
                self.sink_failed(e.to_string());
            }
        }
        self.grant_waiters();
        Ok(())
    }

    /// A commit of a direct producer: its bytes are in the file; write the header. The
    /// rest of its room, when it can hold another block, stays lent to the producer
    /// ([`crate::wire::room_rest`]: both sides know where it starts).
    #[allow(clippy::too_many_arguments)]
    fn commit_direct(
        &mut self,
        key: u64,
        slot: u32,
        seq: u64,
        len: u64,
        crc: Option<u32>,
        kind: u8,
    ) -> std::result::Result<(), Why> {
        let align = self.direct.as_ref().expect("direct").align;
        let c = self.conns.get_mut(&key).expect("live connection");
        let producer = c.producer.expect("said hello");
        let Some(i) = c.rooms.iter().position(|r| r.id == slot) else {
            return Err(Why::Protocol(format!(
                "commit into room {slot}, which it does not hold"
            )));
        };
        let room = c.rooms.swap_remove(i);
        if len > room.bytes {
            return Err(Why::Protocol(format!(
                "commit of {len} bytes into a room of {}",
                room.bytes
            )));
        }
        c.next_seq += 1;
        if room.counted {
            self.direct.as_mut().expect("direct").inflight -= 1;
        }
        if let Some(why) = self.failed.clone() {
            self.send(key, &Msg::Fail { reason: why });
            self.grant_waiters();
            return Ok(());
        }
        let kept = crate::wire::room_rest(align, room.bytes, len);
        if let Some((at, bytes)) = kept {
            let c = self.conns.get_mut(&key).expect("live connection");
            c.rooms.push(Room {
                id: room.id,
                at: room.at + at,
                bytes,
                counted: false,
            });
        }
        let block = DirectBlock {
            producer,
            seq,
            kind: BlockKind::from_code(kind),
            len,
            crc,
        };
        // The producer is done with the room: the next writer may start while this block
        // is checksummed (when it came without a checksum) and recorded.
        self.grant_waiters();
        let sink = self.sink.as_mut().expect("sink present until close");
        let t = Instant::now();
        let written = sink.direct().expect("direct sink").commit(
            room.at,
            room.bytes,
            &block,
            if kept.is_some() {
                Rest::Lent
            } else {
                Rest::Hole
            },
        );
        self.stats.sink_write_ns += t.elapsed().as_nanos() as u64;
        match written {
            Ok(()) => {
                let c = self.conns.get_mut(&key).expect("live connection");
                c.blocks += 1;
                c.bytes += len;
                self.stats.blocks += 1;
                self.stats.bytes += len;
                self.later(key, Msg::Ack { seq });
            }
            Err(e) => self.sink_failed(e.to_string()),
        }
        Ok(())
    }
}
