//! Per-destination aggregation buffers, as YGM and Conveyors do it: many small messages to
//! many destinations leave as few large batches, with a bound on the memory buffered.
//!
//! # Sender: [`Aggregator`]
//!
//! One endpoint per destination (`dests[i]` reaches destination `i`). Memory is one
//! pre-faulted pool of `memory_bytes`, cut into slots of `batch_bytes`; a destination
//! holds a slot while it has messages buffered. [`Aggregator::send`] appends a frame to the
//! destination's slot; a slot is sent as one message (a *batch*) when the next frame does
//! not fit. When every slot is taken and another destination needs one, the fullest slot
//! is sent and handed over. [`Aggregator::flush`] sends every slot. A message larger than
//! a slot is sent alone, through a scratch buffer (after the destination's buffered ones,
//! so order holds). Appending allocates nothing and makes no system call.
//!
//! # Receiver: [`Deaggregator`]
//!
//! Every message carries its sender's id and a sequence number per (sender, destination),
//! so the receiver delivers each message exactly once and in per-sender order, and a lost,
//! repeated or misrouted batch is an error ([`Error::Gap`], [`Error::Duplicate`],
//! [`CheckError::WrongDestination`]) rather than silent corruption. A batch is checked
//! whole before any of it is delivered.
//!
//! # Wire format (little-endian)
//!
//! A batch: magic `ACA1`, kind 1 (u8), flags (u8; bit 0: checked), 2 zero bytes, sender
//! u32, destination u32, first sequence u64, message count u32, 4 zero bytes; then per
//! message its length u32 and, in checked mode, (sender u32, destination u32, sequence
//! u64, target u64); then its bytes.
//!
//! ```
//! use std::time::Duration;
//! use accio_coalesce::{AggConfig, Aggregator, Deaggregator};
//!
//! # fn main() -> accio_coalesce::Result<()> {
//! let name = format!("shm://agg-doc-{}", std::process::id());
//! let listener = accio::listen(&name)?;
//! let receiver = std::thread::spawn(move || -> accio_coalesce::Result<Vec<Vec<u8>>> {
//!     let ep = listener.accept(Some(Duration::from_secs(5)))?;
//!     let mut de = Deaggregator::new(0);
//!     let (mut buf, mut got) = (Vec::new(), Vec::new());
//!     while got.len() < 1000 {
//!         for m in de.recv(&*ep, &mut buf, Some(Duration::from_secs(5)))? {
//!             got.push(m.data.to_vec());
//!         }
//!     }
//!     Ok(got)
//! });
//! let ep = accio::connect(&name, Duration::from_secs(5))?;
//! let mut agg = Aggregator::new(vec![&*ep], AggConfig::new(7))?;
//! for i in 0..1000u32 {
//!     agg.send(0, &i.to_le_bytes())?;
//! }
//! agg.flush()?;
//! let got = receiver.join().unwrap()?;
//! assert_eq!(got[999], 999u32.to_le_bytes());
//! assert!(agg.stats().batches < 10);
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use accio_core::Endpoint;

use crate::buf::PageBuf;
use crate::error::{CheckError, Error, Result};

const MAGIC: [u8; 4] = *b"ACA1";
const BATCH: u8 = 1;
const FLAG_CHECKED: u8 = 1;
/// Bytes of a batch header.
pub const BATCH_HEADER: usize = 32;
/// Bytes before a message's data in an unchecked / checked batch.
const FRAME: usize = 4;
const FRAME_CHECKED: usize = 28;
const NONE: u32 = u32::MAX;

/// Settings of an [`Aggregator`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AggConfig {
    sender: u32,
    batch_bytes: usize,
    memory_bytes: usize,
    checked: bool,
}

impl AggConfig {
    /// Defaults for the sender with id `sender` (the id receivers see): 64 KiB batches
    /// (the bandwidth plateau of `shm` and `tcp` messages in `accio bench transport`),
    /// 4 MiB of buffers (64 destinations buffered at once), unchecked.
    pub fn new(sender: u32) -> AggConfig {
        AggConfig {
            sender,
            batch_bytes: 64 << 10,
            memory_bytes: 4 << 20,
            checked: false,
        }
    }

    /// Largest batch, header included (default 64 KiB; at least 64 bytes).
    pub fn batch_bytes(mut self, n: usize) -> AggConfig {
        self.batch_bytes = n;
        self
    }

    /// Memory for all buffers together (default 4 MiB; at least one batch).
    pub fn memory_bytes(mut self, n: usize) -> AggConfig {
        self.memory_bytes = n;
        self
    }

    /// Checked mode (default off): every message carries (sender, destination, sequence,
    /// target) and the [`Deaggregator`] verifies them.
    pub fn checked(mut self, on: bool) -> AggConfig {
        self.checked = on;
        self
    }
}

/// What an aggregator has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AggStats {
    /// Messages accepted by `send`.
    pub messages: u64,
    /// Bytes of message data accepted.
    pub payload_bytes: u64,
    /// Batches sent.
    pub batches: u64,
    /// Bytes handed to the endpoints (batch headers and frames included).
    pub wire_bytes: u64,
    /// Slots sent early to make room for another destination.
    pub steals: u64,
    /// Messages too large for a slot, sent alone.
    pub oversize: u64,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    owner: u32,
    used: usize,
    count: u32,
    first_seq: u64,
}

/// Per-destination buffers over a set of endpoints (see the [module docs](self)).
pub struct Aggregator<'e> {
    dests: Vec<&'e dyn Endpoint>,
    cfg: AggConfig,
    pool: PageBuf,
    slots: Vec<Slot>,
    slot_of: Vec<u32>,
    free: Vec<u32>,
    seq: Vec<u64>,
    scratch: Vec<u8>,
    stats: AggStats,
}

impl std::fmt::Debug for Aggregator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator")
            .field("dests", &self.dests.len())
            .field("config", &self.cfg)
            .field("stats", &self.stats)
            .finish()
    }
}

impl<'e> Aggregator<'e> {
    /// An aggregator sending to `dests` (destination `i` is `dests[i]`). Allocates and
    /// pre-faults its whole buffer pool now.
    pub fn new(dests: Vec<&'e dyn Endpoint>, cfg: AggConfig) -> Result<Aggregator<'e>> {
        if cfg.batch_bytes < 64 || cfg.batch_bytes > u32::MAX as usize {
            return Err(Error::config(
                "aggregator batch size",
                format!(
                    "{} bytes; it must be from 64 bytes to 4 GiB",
                    cfg.batch_bytes
                ),
            ));
        }
        if cfg.memory_bytes < cfg.batch_bytes || cfg.memory_bytes > 1 << 30 {
            return Err(Error::config(
                "aggregator memory",
                format!(
                    "{} bytes; it must hold at least one {}-byte batch and be at most 1 GiB",
                    cfg.memory_bytes, cfg.batch_bytes
                ),
            ));
        }
        if dests.len() >= NONE as usize {
            return Err(Error::config(
                "aggregator destinations",
                format!("{} endpoints are too many", dests.len()),
            ));
        }
        let n = cfg.memory_bytes / cfg.batch_bytes;
        Ok(Aggregator {
            pool: PageBuf::new(n * cfg.batch_bytes)?,
            slots: vec![
                Slot {
                    owner: NONE,
                    used: BATCH_HEADER,
                    count: 0,
                    first_seq: 0,
                };
                n
            ],
            slot_of: vec![NONE; dests.len()],
            free: (0..n as u32).rev().collect(),
            seq: vec![0; dests.len()],
            scratch: Vec::new(),
            stats: AggStats::default(),
            dests,
            cfg,
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> AggStats {
        self.stats
    }

    /// Number of buffer slots (`memory_bytes / batch_bytes`).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Bytes buffered now, batch headers included: never more than the memory bound.
    pub fn buffered_bytes(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.count > 0)
            .map(|s| s.used)
            .sum()
    }

    /// Buffers `msg` for destination `dest`. Sends a batch when the destination's buffer is
    /// full or its slot is needed by another destination; an error from that send is
    /// returned and `msg` was not buffered.
    #[inline]
    pub fn send(&mut self, dest: usize, msg: &[u8]) -> Result<()> {
        self.send_to(dest, 0, msg)
    }

    /// Like [`send`](Aggregator::send), with the target coordinate (a grid index, an
    /// offset) checked mode ships and the receiver checks against its expected range;
    /// unchecked batches do not carry it.
    #[inline]
    pub fn send_to(&mut self, dest: usize, target: u64, msg: &[u8]) -> Result<()> {
        if dest >= self.dests.len() {
            return Err(Error::config(
                "destination",
                format!(
                    "{dest} is not one of the {} endpoints of this aggregator",
                    self.dests.len()
                ),
            ));
        }
        let frame = self.frame_len(msg.len());
        if BATCH_HEADER + frame > self.cfg.batch_bytes {
            return self.send_alone(dest, target, msg);
        }
        let slot = match self.slot_of[dest] {
            NONE => self.acquire(dest)?,
            s => s as usize,
        };
        if self.slots[slot].used + frame > self.cfg.batch_bytes {
            self.send_slot(slot)?;
        }
        let seq = self.seq[dest];
        let s = &mut self.slots[slot];
        let at = slot * self.cfg.batch_bytes + s.used;
        if s.count == 0 {
            s.first_seq = seq;
        }
        s.used += frame;
        s.count += 1;
        let (sender, checked) = (self.cfg.sender, self.cfg.checked);
        let buf = &mut self.pool.as_mut_slice()[at..at + frame];
        write_frame(buf, checked, sender, dest as u32, seq, target, msg);
        self.seq[dest] += 1;
        self.stats.messages += 1;
        self.stats.payload_bytes += msg.len() as u64;
        Ok(())
    }

    fn frame_len(&self, len: usize) -> usize {
        len + if self.cfg.checked {
            FRAME_CHECKED
        } else {
            FRAME
        }
    }

    /// A slot for `dest`: a free one, or the fullest, sent first.
    fn acquire(&mut self, dest: usize) -> Result<usize> {
        let slot = match self.free.pop() {
            Some(s) => s as usize,
            None => {
                let victim = (0..self.slots.len())
                    .max_by_key(|&s| (self.slots[s].used, std::cmp::Reverse(s)))
                    .expect("at least one slot");
                self.send_slot(victim)?;
                self.slot_of[self.slots[victim].owner as usize] = NONE;
                self.stats.steals += 1;
                victim
            }
        };
        self.slots[slot].owner = dest as u32;
        self.slot_of[dest] = slot as u32;
        Ok(slot)
    }

    /// Sends slot `s` as one batch (nothing if empty); on error it stays as it was.
    fn send_slot(&mut self, s: usize) -> Result<()> {
        let slot = self.slots[s];
        if slot.count == 0 {
            return Ok(());
        }
        let start = s * self.cfg.batch_bytes;
        let buf = &mut self.pool.as_mut_slice()[start..start + slot.used];
        write_header(
            buf,
            self.cfg.checked,
            self.cfg.sender,
            slot.owner,
            slot.first_seq,
            slot.count,
        );
        self.dests[slot.owner as usize].send(buf)?;
        self.stats.batches += 1;
        self.stats.wire_bytes += slot.used as u64;
        let sl = &mut self.slots[s];
        sl.used = BATCH_HEADER;
        sl.count = 0;
        Ok(())
    }

    /// A message too large for a slot: the destination's buffered ones first, then it alone.
    fn send_alone(&mut self, dest: usize, target: u64, msg: &[u8]) -> Result<()> {
        let s = self.slot_of[dest];
        if s != NONE {
            self.send_slot(s as usize)?;
        }
        let frame = self.frame_len(msg.len());
        let seq = self.seq[dest];
        self.scratch.clear();
        self.scratch.resize(BATCH_HEADER + frame, 0);
        let (sender, checked) = (self.cfg.sender, self.cfg.checked);
        write_header(&mut self.scratch, checked, sender, dest as u32, seq, 1);
        write_frame(
            &mut self.scratch[BATCH_HEADER..],
            checked,
            sender,
            dest as u32,
            seq,
            target,
            msg,
        );
        self.dests[dest].send(&self.scratch)?;
        self.seq[dest] += 1;
        self.stats.messages += 1;
        self.stats.payload_bytes += msg.len() as u64;
        self.stats.batches += 1;
        self.stats.oversize += 1;
        self.stats.wire_bytes += self.scratch.len() as u64;
        Ok(())
    }

    /// Sends every buffered message.
    pub fn flush(&mut self) -> Result<()> {
        for s in 0..self.slots.len() {
            self.send_slot(s)?;
        }
        Ok(())
    }

    /// Sends what is buffered for `dest` now.
    pub fn flush_dest(&mut self, dest: usize) -> Result<()> {
        match self.slot_of.get(dest) {
            Some(&s) if s != NONE => self.send_slot(s as usize),
            _ => Ok(()),
        }
    }
}

fn write_header(b: &mut [u8], checked: bool, sender: u32, dest: u32, first: u64, count: u32) {
    b[..4].copy_from_slice(&MAGIC);
    b[4] = BATCH;
    b[5] = if checked { FLAG_CHECKED } else { 0 };
    b[6..8].fill(0);
    b[8..12].copy_from_slice(&sender.to_le_bytes());
    b[12..16].copy_from_slice(&dest.to_le_bytes());
    b[16..24].copy_from_slice(&first.to_le_bytes());
    b[24..28].copy_from_slice(&count.to_le_bytes());
    b[28..32].fill(0);
}

#[inline(always)]
fn write_frame(
    b: &mut [u8],
    checked: bool,
    sender: u32,
    dest: u32,
    seq: u64,
    target: u64,
    msg: &[u8],
) {
    b[..4].copy_from_slice(&(msg.len() as u32).to_le_bytes());
    let at = if checked {
        b[4..8].copy_from_slice(&sender.to_le_bytes());
        b[8..12].copy_from_slice(&dest.to_le_bytes());
        b[12..20].copy_from_slice(&seq.to_le_bytes());
        b[20..28].copy_from_slice(&target.to_le_bytes());
        FRAME_CHECKED
    } else {
        FRAME
    };
    b[at..at + msg.len()].copy_from_slice(msg);
}

/// One delivered message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivered<'b> {
    /// The sender's id.
    pub sender: u32,
    /// Its sequence number from that sender to this receiver (0, 1, 2, ...).
    pub seq: u64,
    /// The target coordinate, in checked mode.
    pub target: Option<u64>,
    /// The message.
    pub data: &'b [u8],
}

/// The messages of one verified batch, in order.
#[derive(Clone, Debug)]
pub struct Batch<'b> {
    sender: u32,
    seq: u64,
    left: u32,
    checked: bool,
    rest: &'b [u8],
}

impl<'b> Batch<'b> {
    /// The sender of every message in the batch.
    pub fn sender(&self) -> u32 {
        self.sender
    }
}

impl<'b> Iterator for Batch<'b> {
    type Item = Delivered<'b>;

    fn next(&mut self) -> Option<Delivered<'b>> {
        if self.left == 0 {
            return None;
        }
        let b = self.rest;
        let len = u32_at(b, 0) as usize;
        let (target, at) = if self.checked {
            (Some(u64_at(b, 20)), FRAME_CHECKED)
        } else {
            (None, FRAME)
        };
        let d = Delivered {
            sender: self.sender,
            seq: self.seq,
            target,
            data: &b[at..at + len],
        };
        self.rest = &b[at + len..];
        self.seq += 1;
        self.left -= 1;
        Some(d)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The receiving side of [`Aggregator`]s: unpacks batches from any number of senders (see
/// the [module docs](self)).
#[derive(Debug, Clone)]
pub struct Deaggregator {
    me: u32,
    checked: bool,
    targets: Option<Range<u64>>,
    next: HashMap<u32, u64>,
}

impl Deaggregator {
    /// A receiver whose id (its index in the senders' destination lists) is `self_id`.
    pub fn new(self_id: u32) -> Deaggregator {
        Deaggregator {
            me: self_id,
            checked: false,
            targets: None,
            next: HashMap::new(),
        }
    }

    /// Checked mode (default off): batches without per-message metadata are refused, and
    /// every message's metadata is verified.
    pub fn checked(mut self, on: bool) -> Deaggregator {
        self.checked = on;
        self
    }

    /// The target coordinates checked messages may name (default: any).
    pub fn targets(mut self, range: Range<u64>) -> Deaggregator {
        self.targets = Some(range);
        self
    }

    /// How many messages from `sender` were delivered so far (its next sequence number).
    pub fn delivered(&self, sender: u32) -> u64 {
        self.next.get(&sender).copied().unwrap_or(0)
    }

    /// Receives one batch from `ep` into `buf` (waiting at most `timeout`) and unpacks it.
    pub fn recv<'b>(
        &mut self,
        ep: &dyn Endpoint,
        buf: &'b mut Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Batch<'b>> {
        ep.recv_timeout(buf, timeout)?;
        self.unpack_from(&ep.peer_addr().to_string(), buf)
    }

    /// Verifies one received batch whole and returns its messages; a batch that fails
    /// delivers nothing and leaves the sequence state as it was.
    pub fn unpack<'b>(&mut self, batch: &'b [u8]) -> Result<Batch<'b>> {
        self.unpack_from("an aggregator", batch)
    }

    fn unpack_from<'b>(&mut self, peer: &str, b: &'b [u8]) -> Result<Batch<'b>> {
        let bad = |reason: String| Error::protocol(peer, reason);
        if b.len() < BATCH_HEADER {
            return Err(bad(format!(
                "batch of {} bytes is shorter than its {BATCH_HEADER}-byte header",
                b.len()
            )));
        }
        if b[..4] != MAGIC || b[4] != BATCH {
            return Err(bad(format!(
                "batch starts with {:02x?}, not the aggregation magic \"ACA1\" and kind 1",
                &b[..5]
            )));
        }
        let flags = b[5];
        if flags & !FLAG_CHECKED != 0 {
            return Err(bad(format!("batch has unknown flags {flags:#04x}")));
        }
        let checked = flags & FLAG_CHECKED != 0;
        let (sender, dest, first, count) =
            (u32_at(b, 8), u32_at(b, 12), u64_at(b, 16), u32_at(b, 24));
        if self.checked && !checked {
            return Err(CheckError::MissingMetadata {
                what: "aggregated batch",
                peer: peer.to_string(),
            }
            .into());
        }
        if dest != self.me {
            return Err(CheckError::WrongDestination {
                datum: format!("batch of {count} messages"),
                sender,
                expected: self.me,
                actual: dest,
            }
            .into());
        }
        if count == 0 {
            return Err(bad(format!("empty batch from sender {sender}")));
        }
        let head = if checked { FRAME_CHECKED } else { FRAME };
        let mut rest = &b[BATCH_HEADER..];
        for i in 0..count {
            let seq = first.wrapping_add(u64::from(i));
            if rest.len() < head {
                return Err(bad(format!(
                    "batch from sender {sender} ends inside the header of message {seq}"
                )));
            }
            let len = u32_at(rest, 0) as usize;
            if checked {
                let (s, d, q, target) = (
                    u32_at(rest, 4),
                    u32_at(rest, 8),
                    u64_at(rest, 12),
                    u64_at(rest, 20),
                );
                if s != sender || q != seq {
                    return Err(bad(format!(
                        "message {seq} in a batch of sender {sender} names sender {s}, sequence {q}"
                    )));
                }
                if d != self.me {
                    return Err(CheckError::WrongDestination {
                        datum: format!("message {seq}"),
                        sender,
                        expected: self.me,
                        actual: d,
                    }
                    .into());
                }
                if let Some(r) = &self.targets {
                    if !r.contains(&target) {
                        return Err(CheckError::WrongRegion {
                            datum: format!("message {seq}"),
                            sender,
                            offset: target,
                            len: 0,
                            region: r.clone(),
                        }
                        .into());
                    }
                }
            }
            if rest.len() - head < len {
                return Err(bad(format!(
                    "message {seq} from sender {sender} declares {len} bytes, {} remain",
                    rest.len() - head
                )));
            }
            rest = &rest[head + len..];
        }
        if !rest.is_empty() {
            return Err(bad(format!(
                "{} bytes follow the {count} messages of a batch from sender {sender}",
                rest.len()
            )));
        }
        let expected = self.delivered(sender);
        if first < expected {
            return Err(Error::Duplicate {
                sender,
                seq: first,
                expected,
            });
        }
        if first > expected {
            return Err(Error::Gap {
                sender,
                seq: first,
                expected,
            });
        }
        self.next
            .insert(sender, first.wrapping_add(u64::from(count)));
        Ok(Batch {
            sender,
            seq: first,
            left: count,
            checked,
            rest: &b[BATCH_HEADER..],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{pair, Rng, WAIT};

    /// Receives until `counts[d]` messages came from endpoint `d`; returns them per
    /// endpoint, checking sequence numbers on the way.
    fn drain(eps: Vec<Box<dyn Endpoint>>, counts: Vec<usize>) -> Vec<Vec<Vec<u8>>> {
        let mut out = vec![Vec::new(); eps.len()];
        let mut buf = Vec::new();
        for (d, ep) in eps.iter().enumerate() {
            let mut de = Deaggregator::new(d as u32);
            while out[d].len() < counts[d] {
                for m in de.recv(&**ep, &mut buf, Some(WAIT)).unwrap() {
                    assert_eq!((m.sender, m.seq), (9, out[d].len() as u64));
                    out[d].push(m.data.to_vec());
                }
            }
        }
        out
    }

    #[test]
    fn the_memory_bound_holds_and_the_fullest_buffer_makes_room() {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..5).map(|_| pair("shm")).unzip();
        let dests: Vec<&dyn Endpoint> = txs.iter().map(|e| &**e).collect();
        let cfg = AggConfig::new(9).batch_bytes(256).memory_bytes(600);
        let mut agg = Aggregator::new(dests, cfg).unwrap();
        assert_eq!(agg.slots(), 2);
        let mut rng = Rng(99);
        let mut sent = vec![Vec::new(); 5];
        for i in 0..3000u32 {
            let d = rng.below(5) as usize;
            let msg: Vec<u8> = (0..rng.below(60)).map(|k| (i + k as u32) as u8).collect();
            agg.send(d, &msg).unwrap();
            assert!(
                agg.buffered_bytes() <= 512,
                "{} bytes buffered",
                agg.buffered_bytes()
            );
            sent[d].push(msg);
        }
        agg.flush().unwrap();
        assert_eq!(agg.buffered_bytes(), 0);
        let s = agg.stats();
        assert!(s.steals > 100, "{s:?}");
        assert_eq!(s.messages, 3000);
        let counts = sent.iter().map(Vec::len).collect();
        assert_eq!(drain(rxs, counts), sent);
    }

    #[test]
    fn a_message_larger_than_a_batch_goes_alone_after_the_buffered_ones() {
        let (tx, rx) = pair("tcp");
        let mut agg = Aggregator::new(vec![&*tx], AggConfig::new(9).batch_bytes(128)).unwrap();
        let msgs: Vec<Vec<u8>> = vec![vec![1; 10], vec![2; 20], vec![3; 500], vec![4; 5]];
        for m in &msgs {
            agg.send(0, m).unwrap();
        }
        agg.flush().unwrap();
        let s = agg.stats();
        assert_eq!((s.batches, s.oversize, s.messages), (3, 1, 4));
        assert_eq!(s.payload_bytes, 535);
        assert_eq!(drain(vec![rx], vec![4]), vec![msgs]);
    }

    #[test]
    fn configurations_out_of_range_are_refused_with_the_setting_named() {
        let (tx, _rx) = pair("tcp");
        let e = Aggregator::new(vec![&*tx], AggConfig::new(1).batch_bytes(16))
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid aggregator batch size: 16 bytes"), "{e}");
        let e = Aggregator::new(
            vec![&*tx],
            AggConfig::new(1).batch_bytes(1 << 20).memory_bytes(1 << 19),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("invalid aggregator memory"), "{e}");
    }
}
