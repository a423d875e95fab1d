//! The wire format, and the parser that turns a byte stream into frames.
//!
//! A connection opens with the authenticated greeting (see [`crate::auth`]): the listener
//! sends its 64-byte [`Hello`] at once; the connecting side answers with its own [`Hello`]
//! and its [`PROOF_LEN`]-byte proof; the listener answers with a [`VERDICT_LEN`]-byte
//! verdict ([`VERDICT_OK`] and its own proof, or [`VERDICT_REFUSED`]). Then a stream of
//! frames follows. Every frame is a fixed 40-byte little-endian [`Header`], followed by a payload only for the
//! kinds that carry data ([`Kind::Message`], [`Kind::Write`], [`Kind::ReadData`]):
//!
//! ```text
//! bytes  0..1   kind     Kind (unknown kinds are rejected)
//! bytes  1..2   flags    FLAG_ACK for Write and Signal; every other bit must be 0
//! bytes  2..4   reserved must be 0
//! bytes  4..8   aux u32  Register: access bits; Fault: fault code; otherwise 0
//! bytes  8..16  len      payload length, or the length of the addressed range
//! bytes 16..24  offset   window offset addressed by the frame
//! bytes 24..32  seq      RMA sequence number, read id or acknowledged sequence
//! bytes 32..40  value    Signal: the 8-byte value; Fault: the access bits it lacked
//! ```
//!
//! [`decode_header`] is pure and checks everything a header alone can tell — the kind,
//! flags, fields that must be zero, and every length and offset against [`Limits`] — so
//! that a receiver never allocates or addresses memory on the word of a bad frame. What
//! needs state (does a window cover the range? is there a pending read with this id?) is
//! checked by the endpoint after decoding.
//!
//! [`FrameReader`] is the stream parser the endpoint's reader thread runs; it is generic
//! over its [`Source`] so that the fuzz target drives the very same code over bytes in
//! memory.

mod decode;
mod reader;
#[cfg(test)]
mod tests;

use std::fmt;

use accio_core::Access;

pub use decode::{decode_header, FrameError};
pub use reader::{FrameReader, RawBuf, ReadError, Source};

/// Size of every frame header in bytes.
pub const HEADER_LEN: usize = 40;

/// Size of the greeting each side sends first.
pub const HELLO_LEN: usize = 64;

/// Bytes of a greeting up to and including its version: enough to refuse another version.
pub const VERSION_END: usize = 10;

/// Size of a proof of the shared secret: an HMAC-SHA256 tag.
pub const PROOF_LEN: usize = 32;

/// What the connecting side sends after the listener's greeting: its greeting and proof.
pub const CLIENT_AUTH_LEN: usize = HELLO_LEN + PROOF_LEN;

/// Size of the listener's verdict: 8 bytes of [`VERDICT_OK`] or [`VERDICT_REFUSED`], then
/// the listener's proof (zeros when it refuses).
pub const VERDICT_LEN: usize = 8 + PROOF_LEN;

/// The listener's verdict accepting the connecting side's proof.
pub const VERDICT_OK: [u8; 8] = *b"AUTH-OK\0";

/// The listener's verdict refusing the connecting side's proof (it then closes).
pub const VERDICT_REFUSED: [u8; 8] = *b"AUTH-NO\0";

/// Size of the random challenge in each greeting.
pub const NONCE_LEN: usize = 32;

/// First bytes of the greeting.
pub const MAGIC: [u8; 8] = *b"ACCIOTCP";

/// Protocol version this crate speaks; a peer with another version is refused. Version 2
/// added the authenticated greeting (the listener speaks first, with a challenge).
pub const VERSION: u16 = 2;

/// Flag of [`Kind::Write`] and [`Kind::Signal`]: the initiator wants an [`Kind::Ack`] with
/// the frame's sequence number once it has been applied.
pub const FLAG_ACK: u8 = 1;

/// Default limit on a message's length (1 GiB, the contract's minimum).
pub const DEFAULT_MAX_MESSAGE: u64 = 1 << 30;

/// Limit on the length of any RMA range and of any window (1 TiB). Windows are bounded
/// by memory long before this; the bound keeps every sum of offset and length far from
/// overflow and gives the decoder a definite answer.
pub const MAX_RMA: u64 = 1 << 40;

/// Largest message credit a [`Kind::Credit`] frame or a greeting may carry (256 TiB):
/// far above any real window, far below where sums of credits could overflow.
pub const MAX_CREDIT: u64 = 1 << 48;

/// Payloads at least this long are "large": the reader stops reading ahead past their
/// headers, so that their bytes go from the kernel straight into the final buffer.
pub const LARGE_PAYLOAD: usize = 64 * 1024;

/// Default size of the reader's staging buffer (headers and small payloads).
pub const STAGING_LEN: usize = 64 * 1024;

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A message of `len` payload bytes.
    Message = 0x01,
    /// RMA write: `len` payload bytes for the receiver's window range at `offset`.
    Write = 0x02,
    /// RMA read request for `len` bytes at `offset`; `seq` is the read id.
    ReadRequest = 0x03,
    /// Answer to a read request `seq`: `len` payload bytes.
    ReadData = 0x04,
    /// Store `value` (8 bytes, atomically, release) at window offset `offset`.
    Signal = 0x05,
    /// Acknowledge sequence `seq` once every earlier frame was applied.
    FenceRequest = 0x06,
    /// Every frame up to sequence `seq` was applied.
    Ack = 0x07,
    /// The sender registered a window: `offset`, `len`, access bits in `aux`.
    Register = 0x08,
    /// The sender withdrew the window starting at `offset`.
    Unregister = 0x09,
    /// The receiver of RMA `seq` refused it: fault code in `aux`, range in `offset`/`len`,
    /// the missing right in `value`.
    Fault = 0x0a,
    /// The receiver consumed `len` bytes of message credit: the sender may send that
    /// much more (see the endpoint's flow control).
    Credit = 0x0b,
}

impl Kind {
    /// The kind with this wire value.
    pub fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            0x01 => Kind::Message,
            0x02 => Kind::Write,
            0x03 => Kind::ReadRequest,
            0x04 => Kind::ReadData,
            0x05 => Kind::Signal,
            0x06 => Kind::FenceRequest,
            0x07 => Kind::Ack,
            0x08 => Kind::Register,
            0x09 => Kind::Unregister,
            0x0a => Kind::Fault,
            0x0b => Kind::Credit,
            _ => return None,
        })
    }

    /// True for the kinds followed by `len` payload bytes.
    pub fn has_payload(self) -> bool {
        matches!(self, Kind::Message | Kind::Write | Kind::ReadData)
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Message => "message",
            Kind::Write => "write",
            Kind::ReadRequest => "read-request",
            Kind::ReadData => "read-data",
            Kind::Signal => "signal",
            Kind::FenceRequest => "fence-request",
            Kind::Ack => "ack",
            Kind::Register => "register",
            Kind::Unregister => "unregister",
            Kind::Fault => "fault",
            Kind::Credit => "credit",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the peer refused an RMA ([`Kind::Fault`]'s `aux`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum FaultCode {
    /// No single window covers the range.
    OutOfWindow = 1,
    /// The covering window lacks the right in `value`.
    AccessDenied = 2,
    /// The covering window is device memory, and its driver's copy failed.
    Device = 3,
}

impl FaultCode {
    /// The code with this wire value.
    pub fn from_u32(v: u32) -> Option<FaultCode> {
        match v {
            1 => Some(FaultCode::OutOfWindow),
            2 => Some(FaultCode::AccessDenied),
            3 => Some(FaultCode::Device),
            _ => None,
        }
    }
}

/// Limits a decoder enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest message payload accepted.
    pub max_message: u64,
    /// Largest RMA range or window accepted.
    pub max_rma: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message: DEFAULT_MAX_MESSAGE,
            max_rma: MAX_RMA,
        }
    }
}

/// A decoded, validated frame header. Build outgoing ones with the constructors, which
/// produce exactly what [`decode_header`] accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the frame is.
    pub kind: Kind,
    /// [`FLAG_ACK`] or 0.
    pub flags: u8,
    /// Kind-specific: access bits (Register), fault code (Fault).
    pub aux: u32,
    /// Payload length, or the length of the addressed range.
    pub len: u64,
    /// Window offset.
    pub offset: u64,
    /// Sequence number, read id or acknowledged sequence.
    pub seq: u64,
    /// Signal value; missing access bits (Fault).
    pub value: u64,
}

impl Header {
    fn new(kind: Kind) -> Header {
        Header {
            kind,
            flags: 0,
            aux: 0,
            len: 0,
            offset: 0,
            seq: 0,
            value: 0,
        }
    }

    /// A message header for `len` payload bytes.
    pub fn message(len: usize) -> Header {
        Header {
            len: len as u64,
            ..Header::new(Kind::Message)
        }
    }

    /// An RMA write of `len` bytes to `offset`, acknowledged if `ack`.
    pub fn write(seq: u64, offset: u64, len: usize, ack: bool) -> Header {
        Header {
            flags: if ack { FLAG_ACK } else { 0 },
            len: len as u64,
            offset,
            seq,
            ..Header::new(Kind::Write)
        }
    }

    /// A read request for `len` bytes at `offset`, with read id `seq`.
    pub fn read_request(seq: u64, offset: u64, len: usize) -> Header {
        Header {
            len: len as u64,
            offset,
            seq,
            ..Header::new(Kind::ReadRequest)
        }
    }

    /// The data answering read `seq`: `len` payload bytes.
    pub fn read_data(seq: u64, len: usize) -> Header {
        Header {
            len: len as u64,
            seq,
            ..Header::new(Kind::ReadData)
        }
    }

    /// A signal storing `value` at `offset`, acknowledged if `ack`.
    pub fn signal(seq: u64, offset: u64, value: u64, ack: bool) -> Header {
        Header {
            flags: if ack { FLAG_ACK } else { 0 },
            offset,
            seq,
            value,
            ..Header::new(Kind::Signal)
        }
    }

    /// A request to acknowledge sequence `seq`.
    pub fn fence_request(seq: u64) -> Header {
        Header {
            seq,
            ..Header::new(Kind::FenceRequest)
        }
    }

    /// An acknowledgement of every frame up to sequence `seq`.
    pub fn ack(seq: u64) -> Header {
        Header {
            seq,
            ..Header::new(Kind::Ack)
        }
    }

    /// A register notice.
    pub fn register(offset: u64, len: usize, access: Access) -> Header {
        Header {
            aux: u32::from(access.bits()),
            len: len as u64,
            offset,
            ..Header::new(Kind::Register)
        }
    }

    /// An unregister notice.
    pub fn unregister(offset: u64) -> Header {
        Header {
            offset,
            ..Header::new(Kind::Unregister)
        }
    }

    /// A fault report for RMA `seq` on `offset + len`, which needed `need`.
    pub fn fault(seq: u64, code: FaultCode, offset: u64, len: u64, need: Access) -> Header {
        Header {
            aux: code as u32,
            len,
            offset,
            seq,
            value: u64::from(need.bits()),
            ..Header::new(Kind::Fault)
        }
    }

    /// A return of `len` bytes of message credit.
    pub fn credit(len: u64) -> Header {
        Header {
            len,
            ..Header::new(Kind::Credit)
        }
    }

    /// Number of payload bytes following this header.
    pub fn payload_len(&self) -> u64 {
        if self.kind.has_payload() {
            self.len
        } else {
            0
        }
    }

    /// The 40 wire bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.kind as u8;
        b[1] = self.flags;
        b[4..8].copy_from_slice(&self.aux.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.offset.to_le_bytes());
        b[24..32].copy_from_slice(&self.seq.to_le_bytes());
        b[32..40].copy_from_slice(&self.value.to_le_bytes());
        b
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The greeting: magic, version, the largest message the sender accepts, the message
/// credit it grants, and a fresh random challenge for the peer's proof.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Largest message payload the sender of the greeting accepts.
    pub max_message: u64,
    /// Message bytes (each message counting 64 more) the peer may have in flight
    /// towards the sender of the greeting before it must wait for credit.
    pub recv_window: u64,
    /// A fresh random challenge: the peer's proof covers it, so no proof can be replayed
    /// on another connection.
    pub nonce: [u8; NONCE_LEN],
}

impl Hello {
    /// The 64 wire bytes: magic, version (u16), 6 reserved zero bytes, max message
    /// (u64), receive window (u64), nonce (32 bytes).
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.max_message.to_le_bytes());
        b[24..32].copy_from_slice(&self.recv_window.to_le_bytes());
        b[32..].copy_from_slice(&self.nonce);
        b
    }

    /// Decodes and checks a greeting. A prefix that already differs from [`MAGIC`], or
    /// names another version, is reported as such, however short.
    pub fn decode(bytes: &[u8]) -> Result<Hello, FrameError> {
        let n = bytes.len().min(MAGIC.len());
        if bytes[..n] != MAGIC[..n] {
            let mut magic = [0u8; 8];
            magic[..n].copy_from_slice(&bytes[..n]);
            return Err(FrameError::Magic(magic));
        }
        if bytes.len() >= VERSION_END {
            let theirs = u16::from_le_bytes([bytes[8], bytes[9]]);
            if theirs != VERSION {
                return Err(FrameError::Version { theirs });
            }
        }
        if bytes.len() < HELLO_LEN {
            return Err(FrameError::Truncated {
                what: "greeting",
                need: HELLO_LEN,
                got: bytes.len(),
            });
        }
        if bytes[10..16].iter().any(|&b| b != 0) {
            return Err(FrameError::Greeting("has non-zero reserved bytes"));
        }
        let recv_window = u64_at(bytes, 24);
        if !(1..=MAX_CREDIT).contains(&recv_window) {
            return Err(FrameError::Greeting(
                "grants a receive window of 0 or above 256 TiB",
            ));
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&bytes[32..HELLO_LEN]);
        Ok(Hello {
            max_message: u64_at(bytes, 16),
            recv_window,
            nonce,
        })
    }
}
