//! Messages between producers and the merger. Each is one endpoint message: a type byte and
//! little-endian fields. Decoding checks lengths and types and never panics: a producer may
//! be buggy or hostile, and its bad message costs only its own connection.

/// Protocol version; a producer of another version is refused.
pub const PROTOCOL: u16 = 6;

/// Producer id a producer sends to let the merger pick one.
pub const ANY_PRODUCER: u32 = u32::MAX;

/// The rest of a room lent for writing in place, after a block of `len` bytes was
/// committed into it (`room` payload bytes, in a file of alignment `align`): `Some((shift,
/// bytes))` when the rest can hold a block of at least one byte, its payload `shift` bytes
/// after the block's and `bytes` long; `None` when it cannot (it becomes a hole). Both
/// sides compute it, so the producer goes on writing there without a message: short
/// blocks are packed one after the other, as a file written by one process would hold
/// them.
pub fn room_rest(align: u64, room: u64, len: u64) -> Option<(u64, u64)> {
    let used = len.div_ceil(align).checked_mul(align)?;
    // The rest starts where the block's padded payload ends; it needs a header (`align`
    // bytes: `round_up(64)` for any alignment from 64) and room for one byte.
    let rest = room.checked_sub(used)?;
    (rest >= 2 * align).then(|| (used + align, rest - align))
}

/// Longest text a `Fail` carries.
const MAX_TEXT: usize = 4096;

/// `text` cut to at most [`MAX_TEXT`] bytes, on a character boundary.
fn clip_text(text: &str) -> &str {
    let mut end = text.len().min(MAX_TEXT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// One protocol message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Producer → merger, first message: protocol version and the producer id wanted
    /// ([`ANY_PRODUCER`] for any).
    Hello {
        /// [`PROTOCOL`].
        version: u16,
        /// Requested id.
        producer: u32,
    },
    /// Merger → producer: accepted.
    Welcome {
        /// The producer's id.
        producer: u32,
        /// Bytes of every slot.
        slot_bytes: u64,
        /// Slots the producer may hold at once (granted and committed, not yet written).
        credit: u32,
    },
    /// Merger → producer, right before `Welcome` when producers write the output in
    /// place: every `Grant` from now on is room in this file (its `offset` is where the
    /// payload goes), to be mapped and written there. The file itself comes with the
    /// message, as a descriptor (`Endpoint::send_file`): the producer never opens a path
    /// it was sent.
    Direct {
        /// The file's block alignment: a block at `B` puts its payload at
        /// `B + round_up(64)` and ends at the payload's end rounded up (`docs/FORMAT.md`),
        /// which tells the producer where the rest of a room it is still lent starts.
        align: u32,
        /// The output file's path (bytes of an absolute Unix path), for messages only.
        path: Vec<u8>,
    },
    /// Producer → merger: grant me one more slot. Writing in place, `bytes` is the
    /// payload room wanted (0: a whole slot's; else a multiple of the alignment, at most
    /// the slot size): a producer asks for room its blocks will fill, so that the file
    /// holds no unfilled room. Through slots it is 0 (a slot is a slot).
    Acquire {
        /// Payload bytes of room wanted, 0 for a slot's worth.
        bytes: u64,
    },
    /// Merger → producer: slot `slot` is yours; it is the peer window at `offset`.
    Grant {
        /// Slot number (the merger's).
        slot: u32,
        /// Offset of the slot's window in the merger's registered space.
        offset: u64,
    },
    /// Producer → merger: slot `slot` holds `len` bytes of block `seq`.
    Commit {
        /// Slot number.
        slot: u32,
        /// The producer's sequence number (0, 1, 2, ... in commit order).
        seq: u64,
        /// Payload bytes.
        len: u64,
        /// CRC32C of the payload, or `None` from a producer writing in place after the
        /// merger said it checksums ([`Msg::Policy`]): it reads the block from the file.
        crc: Option<u32>,
        /// Block kind code.
        kind: u8,
    },
    /// Producer → merger: slot `slot` goes back unused.
    Release {
        /// Slot number.
        slot: u32,
    },
    /// Merger → producer: block `seq` is in the file (and synced, in sync mode).
    Ack {
        /// Sequence number.
        seq: u64,
    },
    /// Producer → merger: no more commits; answer with `ByeAck` once all are written.
    Bye,
    /// Merger → producer: every commit is written; the connection may close.
    ByeAck,
    /// Merger → producer writing in place: how the blocks committed from now on are
    /// written. Sent when it changes, as producers come and go.
    Policy {
        /// The merger checksums the blocks: it has a CPU to itself (fewer producers than
        /// CPUs), so that a producer's only work per block is its copy. The producers
        /// checksum otherwise.
        merger_checksums: bool,
        /// Other producers are connected too: on tmpfs a producer then inserts its pages
        /// (`insert` module: no inode lock to take turns on), where alone it splits each
        /// large block between a `pwrite` and a helper thread inserting pages (and
        /// checksums it itself, whatever `merger_checksums` says: `helper` module).
        shared: bool,
    },
    /// Merger → producer: the merge failed for this producer (sink error, protocol error).
    Fail {
        /// Lowercase text naming the file or message and the cause.
        reason: String,
    },
}

const HELLO: u8 = 1;
const WELCOME: u8 = 2;
const ACQUIRE: u8 = 3;
const GRANT: u8 = 4;
const COMMIT: u8 = 5;
const RELEASE: u8 = 6;
const ACK: u8 = 7;
const BYE: u8 = 8;
const BYE_ACK: u8 = 9;
const FAIL: u8 = 10;
const DIRECT: u8 = 11;
const POLICY: u8 = 12;

impl Msg {
    /// Encodes into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        match self {
            Msg::Hello { version, producer } => {
                out.push(HELLO);
                out.extend_from_slice(&version.to_le_bytes());
                out.extend_from_slice(&producer.to_le_bytes());
            }
            Msg::Welcome {
                producer,
                slot_bytes,
                credit,
            } => {
                out.push(WELCOME);
                out.extend_from_slice(&producer.to_le_bytes());
                out.extend_from_slice(&slot_bytes.to_le_bytes());
                out.extend_from_slice(&credit.to_le_bytes());
            }
            Msg::Direct { align, path } => {
                out.push(DIRECT);
                out.extend_from_slice(&align.to_le_bytes());
                out.extend_from_slice(path);
            }
            Msg::Acquire { bytes } => {
                out.push(ACQUIRE);
                out.extend_from_slice(&bytes.to_le_bytes());
            }
            Msg::Grant { slot, offset } => {
                out.push(GRANT);
                out.extend_from_slice(&slot.to_le_bytes());
                out.extend_from_slice(&offset.to_le_bytes());
            }
            Msg::Commit {
                slot,
                seq,
                len,
                crc,
                kind,
            } => {
                out.push(COMMIT);
                out.extend_from_slice(&slot.to_le_bytes());
                out.extend_from_slice(&seq.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&crc.unwrap_or(0).to_le_bytes());
                out.push(*kind);
                out.push(u8::from(crc.is_some()));
            }
            Msg::Policy {
                merger_checksums,
                shared,
            } => {
                out.push(POLICY);
                out.push(u8::from(*merger_checksums) | u8::from(*shared) << 1);
            }
            Msg::Release { slot } => {
                out.push(RELEASE);
                out.extend_from_slice(&slot.to_le_bytes());
            }
            Msg::Ack { seq } => {
                out.push(ACK);
                out.extend_from_slice(&seq.to_le_bytes());
            }
            Msg::Bye => out.push(BYE),
            Msg::ByeAck => out.push(BYE_ACK),
            Msg::Fail { reason } => {
                out.push(FAIL);
                out.extend_from_slice(clip_text(reason).as_bytes());
            }
        }
    }

    /// Decodes one message; the error says what is wrong with it.
    pub fn decode(b: &[u8]) -> Result<Msg, String> {
        let Some((&ty, body)) = b.split_first() else {
            return Err("empty message".into());
        };
        let want = |n: usize, name: &str| {
            if body.len() == n {
                Ok(())
            } else {
                Err(format!(
                    "{name} message of {} bytes, expected {}",
                    b.len(),
                    n + 1
                ))
            }
        };
        let u16_at = |at: usize| u16::from_le_bytes(body[at..at + 2].try_into().expect("2"));
        let u32_at = |at: usize| u32::from_le_bytes(body[at..at + 4].try_into().expect("4"));
        let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8"));
        Ok(match ty {
            HELLO => {
                want(6, "hello")?;
                Msg::Hello {
                    version: u16_at(0),
                    producer: u32_at(2),
                }
            }
            WELCOME => {
                want(16, "welcome")?;
                Msg::Welcome {
                    producer: u32_at(0),
                    slot_bytes: u64_at(4),
                    credit: u32_at(12),
                }
            }
            ACQUIRE => {
                want(8, "acquire")?;
                Msg::Acquire { bytes: u64_at(0) }
            }
            GRANT => {
                want(12, "grant")?;
                Msg::Grant {
                    slot: u32_at(0),
                    offset: u64_at(4),
                }
            }
            COMMIT => {
                want(26, "commit")?;
                Msg::Commit {
                    slot: u32_at(0),
                    seq: u64_at(4),
                    len: u64_at(12),
                    crc: match (body[25], u32_at(20)) {
                        (0, 0) => None,
                        (1, crc) => Some(crc),
                        (0, crc) => {
                            return Err(format!(
                                "commit message without a checksum but {crc:#x} in its place"
                            ))
                        }
                        (f, _) => return Err(format!("commit message with checksum flag {f}")),
                    },
                    kind: body[24],
                }
            }
            POLICY => {
                want(1, "policy")?;
                if body[0] > 3 {
                    return Err(format!("policy message with flags {:#x}", body[0]));
                }
                Msg::Policy {
                    merger_checksums: body[0] & 1 != 0,
                    shared: body[0] & 2 != 0,
                }
            }
            RELEASE => {
                want(4, "release")?;
                Msg::Release { slot: u32_at(0) }
            }
            ACK => {
                want(8, "ack")?;
                Msg::Ack { seq: u64_at(0) }
            }
            BYE => {
                want(0, "bye")?;
                Msg::Bye
            }
            BYE_ACK => {
                want(0, "bye-ack")?;
                Msg::ByeAck
            }
            DIRECT => {
                let path = body.get(4..).unwrap_or_default();
                if path.is_empty() || path.len() > MAX_TEXT || path.contains(&0) {
                    return Err(format!(
                        "direct message with a path of {} bytes (1..={MAX_TEXT}, no NUL)",
                        path.len()
                    ));
                }
                let align = u32_at(0);
                if !align.is_power_of_two() || !(64..=1 << 20).contains(&align) {
                    return Err(format!(
                        "direct message with alignment {align} (a power of two in 64..=1048576)"
                    ));
                }
                Msg::Direct {
                    align,
                    path: path.to_vec(),
                }
            }
            FAIL => Msg::Fail {
                // Bytes that are not UTF-8 become U+FFFD (three bytes each): clipped again
                // after, so that a decoded reason encodes back to itself.
                reason: clip_text(&String::from_utf8_lossy(&body[..body.len().min(MAX_TEXT)]))
                    .to_owned(),
            },
            t => return Err(format!("unknown message type {t}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the container fuzz target: a failure reason of bytes that are not UTF-8
    /// grew when decoded (each such byte becomes a three-byte U+FFFD) and was cut
    /// somewhere else when encoded again, so it did not round-trip.
    #[test]
    fn a_fail_reason_of_invalid_utf8_round_trips_after_decoding() {
        for body in [
            vec![0xFFu8; MAX_TEXT],
            vec![0xE2u8; 3000],
            "é".repeat(3000).into_bytes(),
        ] {
            let mut wire = vec![FAIL];
            wire.extend_from_slice(&body);
            let m = Msg::decode(&wire).unwrap();
            let mut out = Vec::new();
            m.encode(&mut out);
            assert_eq!(Msg::decode(&out).unwrap(), m);
            let Msg::Fail { reason } = &m else {
                panic!("{m:?}")
            };
            assert!(reason.len() <= MAX_TEXT, "{}", reason.len());
        }
    }

    #[test]
    fn the_rest_of_a_room_starts_after_the_block_and_its_header() {
        let a = 4096;
        // 8,000 bytes take two pages; the rest has a header page and the remaining pages.
        assert_eq!(
            room_rest(a, 2 << 20, 8000),
            Some((3 * a, (2 << 20) - 3 * a))
        );
        // A full room, or a rest of only a header's worth, leaves nothing to lend.
        assert_eq!(room_rest(a, 2 << 20, 2 << 20), None);
        assert_eq!(room_rest(a, 3 * a, 2 * a), None);
        assert_eq!(room_rest(a, 3 * a, a), Some((2 * a, a)));
        // An empty block takes only its header.
        assert_eq!(room_rest(64, 640, 0), Some((64, 576)));
        // A length past the room (refused by the merger before) is no rest.
        assert_eq!(room_rest(a, a, u64::MAX), None);
    }

    #[test]
    fn every_message_round_trips() {
        let all = [
            Msg::Hello {
                version: PROTOCOL,
                producer: ANY_PRODUCER,
            },
            Msg::Welcome {
                producer: 3,
                slot_bytes: 2 << 20,
                credit: 2,
            },
            Msg::Direct {
                align: 4096,
                path: b"/dev/shm/out.accio".to_vec(),
            },
            Msg::Acquire { bytes: 0 },
            Msg::Acquire { bytes: 12288 },
            Msg::Grant {
                slot: 9,
                offset: 0x10_0000,
            },
            Msg::Commit {
                slot: 9,
                seq: 77,
                len: 12345,
                crc: Some(0xabcd),
                kind: 1,
            },
            Msg::Commit {
                slot: 9,
                seq: 78,
                len: 1,
                crc: None,
                kind: 1,
            },
            Msg::Policy {
                merger_checksums: true,
                shared: false,
            },
            Msg::Policy {
                merger_checksums: false,
                shared: true,
            },
            Msg::Policy {
                merger_checksums: true,
                shared: true,
            },
            Msg::Policy {
                merger_checksums: false,
                shared: false,
            },
            Msg::Release { slot: 4 },
            Msg::Ack { seq: 77 },
            Msg::Bye,
            Msg::ByeAck,
            Msg::Fail {
                reason: "writing /x: no space".into(),
            },
        ];
        let mut buf = Vec::new();
        for m in all {
            m.encode(&mut buf);
            assert_eq!(Msg::decode(&buf).unwrap(), m);
        }
    }

    #[test]
    fn short_and_unknown_messages_are_refused_with_a_reason() {
        assert_eq!(
            Msg::decode(&[COMMIT, 1, 2]).unwrap_err(),
            "commit message of 3 bytes, expected 27"
        );
        assert_eq!(Msg::decode(&[99]).unwrap_err(), "unknown message type 99");
        let mut commit = Vec::new();
        Msg::Commit {
            slot: 1,
            seq: 2,
            len: 3,
            crc: Some(0xdead_beef),
            kind: 1,
        }
        .encode(&mut commit);
        *commit.last_mut().unwrap() = 0;
        assert_eq!(
            Msg::decode(&commit).unwrap_err(),
            "commit message without a checksum but 0xdeadbeef in its place"
        );
        *commit.last_mut().unwrap() = 2;
        assert_eq!(
            Msg::decode(&commit).unwrap_err(),
            "commit message with checksum flag 2"
        );
        assert_eq!(
            Msg::decode(&[POLICY, 7]).unwrap_err(),
            "policy message with flags 0x7"
        );
        assert_eq!(Msg::decode(&[]).unwrap_err(), "empty message");
        assert_eq!(
            Msg::decode(&[DIRECT, 100, 0, 0, 0, b'/']).unwrap_err(),
            "direct message with alignment 100 (a power of two in 64..=1048576)"
        );
        assert_eq!(
            Msg::decode(&[DIRECT, 0, 16, 0]).unwrap_err(),
            "direct message with a path of 0 bytes (1..=4096, no NUL)"
        );
    }
}
