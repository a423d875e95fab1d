//! The wire format, and the parser that turns a byte stream into frames.
//!
//! Both sides first exchange a 32-byte greeting ([`Hello`]), then a stream of frames. Every
//! frame is a fixed 40-byte little-endian [`Header`], followed by a payload only for the
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

use std::fmt;
use std::io;

use accio_core::{copy_bytes, Access, PAGE};

/// Size of every frame header in bytes.
pub const HEADER_LEN: usize = 40;

/// Size of the greeting each side sends first.
pub const HELLO_LEN: usize = 32;

/// First bytes of the greeting.
pub const MAGIC: [u8; 8] = *b"ACCIOTCP";

/// Protocol version this crate speaks; a peer with another version is refused.
pub const VERSION: u16 = 1;

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
}

impl FaultCode {
    /// The code with this wire value.
    pub fn from_u32(v: u32) -> Option<FaultCode> {
        match v {
            1 => Some(FaultCode::OutOfWindow),
            2 => Some(FaultCode::AccessDenied),
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

/// Why bytes are not a valid frame header or greeting. The `Display` text is what an
/// [`accio_core::Error::Protocol`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// Fewer bytes than a header or greeting.
    Truncated {
        /// What was being decoded.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        got: usize,
    },
    /// The type byte names no known frame.
    UnknownKind(u8),
    /// Reserved bytes are not zero.
    Reserved {
        /// The frame kind.
        kind: Kind,
    },
    /// Flag bits this kind does not define.
    Flags {
        /// The frame kind.
        kind: Kind,
        /// The flags byte.
        flags: u8,
    },
    /// A field this kind does not use is not zero.
    UnusedField {
        /// The frame kind.
        kind: Kind,
        /// The field name.
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// A length exceeds its limit.
    TooLong {
        /// The frame kind.
        kind: Kind,
        /// The length.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// A range of zero bytes where at least one is required.
    Empty {
        /// The frame kind.
        kind: Kind,
    },
    /// An offset that is zero, misaligned, or overflows with its length.
    Offset {
        /// The frame kind.
        kind: Kind,
        /// The offset.
        offset: u64,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Access bits outside read/write.
    Access {
        /// The frame kind.
        kind: Kind,
        /// The bits.
        bits: u64,
    },
    /// An unknown fault code.
    FaultCode(u32),
    /// The greeting does not start with [`MAGIC`].
    Magic([u8; 8]),
    /// The peer speaks another protocol version.
    Version {
        /// The peer's version.
        theirs: u16,
    },
    /// A greeting field is invalid.
    Greeting(&'static str),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Truncated { what, need, got } => {
                write!(f, "{what} needs {need} bytes but only {got} arrived")
            }
            FrameError::UnknownKind(k) => write!(f, "frame type {k:#04x} is unknown"),
            FrameError::Reserved { kind } => {
                write!(f, "{kind} frame has non-zero reserved bytes")
            }
            FrameError::Flags { kind, flags } => {
                write!(f, "{kind} frame has undefined flags {flags:#04x}")
            }
            FrameError::UnusedField { kind, field, value } => {
                write!(f, "{kind} frame has {field} {value:#x} where 0 is required")
            }
            FrameError::TooLong { kind, len, limit } => {
                write!(
                    f,
                    "{kind} frame of {len} bytes exceeds the {limit}-byte limit"
                )
            }
            FrameError::Empty { kind } => write!(f, "{kind} frame has length 0"),
            FrameError::Offset { kind, offset, why } => {
                write!(f, "{kind} frame offset {offset:#x} {why}")
            }
            FrameError::Access { kind, bits } => {
                write!(f, "{kind} frame has invalid access bits {bits:#x}")
            }
            FrameError::FaultCode(c) => write!(f, "fault frame has unknown fault code {c}"),
            FrameError::Magic(m) => write!(
                f,
                "not an accio tcp peer (greeting starts with {m:02x?} instead of {MAGIC:02x?})"
            ),
            FrameError::Greeting(why) => write!(f, "the peer's greeting {why}"),
            FrameError::Version { theirs } => write!(
                f,
                "peer speaks accio tcp protocol version {theirs}, this side speaks {VERSION}"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Decodes and validates one header from the first [`HEADER_LEN`] bytes of `bytes`.
///
/// Checks, before anything is allocated on the strength of the header: the kind is known;
/// reserved bytes and undefined flags are zero; fields the kind does not use are zero;
/// a message's length is at most `limits.max_message`; an RMA range or window is 1 to
/// `limits.max_rma` bytes at a non-zero offset that does not overflow (a signal's offset
/// is 8-byte aligned, a window's page aligned); access bits and fault codes are valid.
pub fn decode_header(bytes: &[u8], limits: &Limits) -> Result<Header, FrameError> {
    if bytes.len() < HEADER_LEN {
        return Err(FrameError::Truncated {
            what: "frame header",
            need: HEADER_LEN,
            got: bytes.len(),
        });
    }
    let kind = Kind::from_u8(bytes[0]).ok_or(FrameError::UnknownKind(bytes[0]))?;
    if bytes[2] != 0 || bytes[3] != 0 {
        return Err(FrameError::Reserved { kind });
    }
    let mut aux = [0u8; 4];
    aux.copy_from_slice(&bytes[4..8]);
    let h = Header {
        kind,
        flags: bytes[1],
        aux: u32::from_le_bytes(aux),
        len: u64_at(bytes, 8),
        offset: u64_at(bytes, 16),
        seq: u64_at(bytes, 24),
        value: u64_at(bytes, 32),
    };
    validate(&h, limits)?;
    Ok(h)
}

/// Which header fields a kind uses; the others must be zero.
struct Uses {
    flags: u8,
    aux: bool,
    len: bool,
    offset: bool,
    seq: bool,
    value: bool,
}

fn uses(kind: Kind) -> Uses {
    let u = |flags, aux, len, offset, seq, value| Uses {
        flags,
        aux,
        len,
        offset,
        seq,
        value,
    };
    match kind {
        Kind::Message => u(0, false, true, false, false, false),
        Kind::Write => u(FLAG_ACK, false, true, true, true, false),
        Kind::ReadRequest => u(0, false, true, true, true, false),
        Kind::ReadData => u(0, false, true, false, true, false),
        Kind::Signal => u(FLAG_ACK, false, false, true, true, true),
        Kind::FenceRequest | Kind::Ack => u(0, false, false, false, true, false),
        Kind::Register => u(0, true, true, true, false, false),
        Kind::Unregister => u(0, false, false, true, false, false),
        Kind::Fault => u(0, true, true, true, true, true),
        Kind::Credit => u(0, false, true, false, false, false),
    }
}

fn validate(h: &Header, limits: &Limits) -> Result<(), FrameError> {
    let kind = h.kind;
    let u = uses(kind);
    if h.flags & !u.flags != 0 {
        return Err(FrameError::Flags {
            kind,
            flags: h.flags,
        });
    }
    for (used, field, value) in [
        (u.aux, "aux", u64::from(h.aux)),
        (u.len, "length", h.len),
        (u.offset, "offset", h.offset),
        (u.seq, "sequence", h.seq),
        (u.value, "value", h.value),
    ] {
        if !used && value != 0 {
            return Err(FrameError::UnusedField { kind, field, value });
        }
    }
    let range = |max: u64, nonempty: bool| -> Result<(), FrameError> {
        if h.len > max {
            return Err(FrameError::TooLong {
                kind,
                len: h.len,
                limit: max,
            });
        }
        if nonempty && h.len == 0 {
            return Err(FrameError::Empty { kind });
        }
        Ok(())
    };
    let offset = |align: u64, len: u64| -> Result<(), FrameError> {
        let bad = |why| {
            Err(FrameError::Offset {
                kind,
                offset: h.offset,
                why,
            })
        };
        if h.offset == 0 {
            return bad("is zero (offset 0 is never valid)");
        }
        if !h.offset.is_multiple_of(align) {
            return bad(if align == 8 {
                "is not 8-byte aligned"
            } else {
                "is not page aligned"
            });
        }
        if h.offset.checked_add(len).is_none() {
            return bad("overflows with the frame's length");
        }
        Ok(())
    };
    let access = |bits: u64| -> Result<(), FrameError> {
        match u8::try_from(bits).ok().and_then(Access::from_bits) {
            Some(_) => Ok(()),
            None => Err(FrameError::Access { kind, bits }),
        }
    };
    match kind {
        Kind::Message => range(limits.max_message, false),
        Kind::Write | Kind::ReadRequest => {
            range(limits.max_rma, true)?;
            offset(1, h.len)
        }
        Kind::ReadData => range(limits.max_rma, true),
        Kind::Signal => offset(8, 8),
        Kind::FenceRequest | Kind::Ack => Ok(()),
        Kind::Register => {
            range(limits.max_rma, true)?;
            offset(PAGE as u64, h.len)?;
            access(u64::from(h.aux))
        }
        Kind::Unregister => offset(1, 0),
        Kind::Fault => {
            FaultCode::from_u32(h.aux).ok_or(FrameError::FaultCode(h.aux))?;
            range(limits.max_rma, false)?;
            access(h.value)
        }
        Kind::Credit => range(MAX_CREDIT, true),
    }
}

/// The greeting: magic, version, the largest message the sender accepts, and the
/// message credit it grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// Largest message payload the sender of the greeting accepts.
    pub max_message: u64,
    /// Message bytes (each message counting 64 more) the peer may have in flight
    /// towards the sender of the greeting before it must wait for credit.
    pub recv_window: u64,
}

impl Hello {
    /// The 32 wire bytes: magic, version (u16), 6 reserved zero bytes, max message
    /// (u64), receive window (u64).
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&VERSION.to_le_bytes());
        b[16..24].copy_from_slice(&self.max_message.to_le_bytes());
        b[24..32].copy_from_slice(&self.recv_window.to_le_bytes());
        b
    }

    /// Decodes and checks a greeting. A prefix that already differs from [`MAGIC`] is
    /// reported as such, however short.
    pub fn decode(bytes: &[u8]) -> Result<Hello, FrameError> {
        let n = bytes.len().min(MAGIC.len());
        if bytes[..n] != MAGIC[..n] {
            let mut magic = [0u8; 8];
            magic[..n].copy_from_slice(&bytes[..n]);
            return Err(FrameError::Magic(magic));
        }
        if bytes.len() < HELLO_LEN {
            return Err(FrameError::Truncated {
                what: "greeting",
                need: HELLO_LEN,
                got: bytes.len(),
            });
        }
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&bytes[..8]);
        if magic != MAGIC {
            return Err(FrameError::Magic(magic));
        }
        let theirs = u16::from_le_bytes([bytes[8], bytes[9]]);
        if theirs != VERSION {
            return Err(FrameError::Version { theirs });
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
        Ok(Hello {
            max_message: u64_at(bytes, 16),
            recv_window,
        })
    }
}

/// One destination buffer of a raw read: `len` writable bytes at `ptr`.
#[derive(Clone, Copy, Debug)]
pub struct RawBuf {
    /// First byte.
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

/// Where a [`FrameReader`] gets bytes: a socket in the endpoint, a byte slice in tests and
/// the fuzz target.
///
/// Reads go to raw pointers rather than slices because their destination is often window
/// memory that the local application may access at the same time (the window contract),
/// where a `&mut [u8]` would be a lie.
pub trait Source {
    /// Reads into `bufs` in order (scatter read, like `readv`): fills the first buffer
    /// before any byte goes to the second. Returns the number of bytes read, 0 at end of
    /// stream. Blocks until at least one byte is available.
    ///
    /// # Safety
    /// Each buffer must be valid for writes of `len` bytes for the duration of the call.
    unsafe fn read_raw(&mut self, bufs: &[RawBuf]) -> io::Result<usize>;
}

impl Source for &[u8] {
    unsafe fn read_raw(&mut self, bufs: &[RawBuf]) -> io::Result<usize> {
        let mut total = 0;
        for b in bufs {
            let n = b.len.min(self.len());
            // SAFETY: the caller guarantees `b.ptr` is writable for `b.len` >= n bytes; the
            // source is a distinct immutable slice, so the ranges cannot overlap.
            unsafe { copy_bytes(b.ptr, self.as_ptr(), n) };
            *self = &self[n..];
            total += n;
            if n < b.len {
                break;
            }
        }
        Ok(total)
    }
}

/// Why a [`FrameReader`] stopped.
#[derive(Debug)]
pub enum ReadError {
    /// Reading from the source failed.
    Io(io::Error),
    /// The bytes are not a valid frame.
    Frame(FrameError),
    /// The stream ended inside a frame.
    Truncated {
        /// What was being read (`"a frame header"`, `"the payload of a write frame"`).
        during: String,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "receive failed: {e}"),
            ReadError::Frame(e) => e.fmt(f),
            ReadError::Truncated { during } => {
                write!(f, "the connection ended in the middle of {during}")
            }
        }
    }
}

impl std::error::Error for ReadError {}

/// Parses a stream of frames from a [`Source`], delivering payloads straight into the
/// caller's buffers.
///
/// Headers and small payloads are read ahead into a staging buffer, so that a burst of
/// small frames costs one system call. A payload is first taken from what is staged, then
/// read directly into its destination with a scatter read whose second buffer catches the
/// next header. After a header announcing a large payload ([`LARGE_PAYLOAD`]) the reader
/// stops reading ahead further than one header, so that the bytes of large payloads pass
/// through no intermediate buffer (only the part, if any, that had already been staged
/// before the header was seen is copied once more).
pub struct FrameReader<S> {
    source: S,
    limits: Limits,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    large: bool,
}

impl<S: Source> FrameReader<S> {
    /// A reader with a [`STAGING_LEN`]-byte staging buffer.
    pub fn new(source: S, limits: Limits) -> Self {
        Self::with_staging(source, limits, STAGING_LEN)
    }

    /// A reader with a staging buffer of `staging` bytes (at least [`HEADER_LEN`]).
    pub fn with_staging(source: S, limits: Limits, staging: usize) -> Self {
        FrameReader {
            source,
            limits,
            buf: vec![0u8; staging.max(HEADER_LEN)].into_boxed_slice(),
            start: 0,
            end: 0,
            large: false,
        }
    }

    /// The limits headers are checked against.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn read_into(&mut self, bufs: &[RawBuf]) -> Result<usize, ReadError> {
        loop {
            // SAFETY: every caller passes buffers inside `self.buf` or a destination it
            // guarantees to be writable (see `read_payload_raw`).
            match unsafe { self.source.read_raw(bufs) } {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }

    /// Reads and validates the next header. `Ok(None)` at a clean end of stream (between
    /// frames).
    pub fn next_header(&mut self) -> Result<Option<Header>, ReadError> {
        while self.end - self.start < HEADER_LEN {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            let cap = if self.large {
                HEADER_LEN
            } else {
                self.buf.len()
            };
            let dst = RawBuf {
                // SAFETY: end < HEADER_LEN <= buf.len(), so the pointer is inside `buf`.
                ptr: unsafe { self.buf.as_mut_ptr().add(self.end) },
                len: cap - self.end,
            };
            let n = self.read_into(&[dst])?;
            if n == 0 {
                if self.end == 0 {
                    return Ok(None);
                }
                return Err(ReadError::Truncated {
                    during: "a frame header".into(),
                });
            }
            self.end += n;
        }
        let h = decode_header(&self.buf[self.start..self.start + HEADER_LEN], &self.limits)
            .map_err(ReadError::Frame)?;
        self.start += HEADER_LEN;
        if h.payload_len() < LARGE_PAYLOAD as u64 {
            self.large = false;
        }
        Ok(Some(h))
    }

    /// Reads `len` payload bytes to `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes until the call returns.
    pub unsafe fn read_payload_raw(
        &mut self,
        dst: *mut u8,
        len: usize,
        what: Kind,
    ) -> Result<(), ReadError> {
        let have = (self.end - self.start).min(len);
        // SAFETY: `dst` is writable for `len` >= have bytes (caller contract); the staged
        // bytes are inside `buf`, which cannot overlap memory the caller owns.
        unsafe { copy_bytes(dst, self.buf.as_ptr().add(self.start), have) };
        self.start += have;
        if have == len {
            return Ok(());
        }
        // The staging buffer is empty now.
        self.start = 0;
        self.end = 0;
        self.large = len >= LARGE_PAYLOAD;
        let tail = if self.large {
            HEADER_LEN
        } else {
            self.buf.len()
        };
        let mut done = have;
        while done < len {
            let bufs = [
                RawBuf {
                    // SAFETY: done < len, inside the caller's buffer.
                    ptr: unsafe { dst.add(done) },
                    len: len - done,
                },
                RawBuf {
                    ptr: self.buf.as_mut_ptr(),
                    len: tail,
                },
            ];
            let n = self.read_into(&bufs)?;
            if n == 0 {
                return Err(ReadError::Truncated {
                    during: format!("the payload of a {what} frame"),
                });
            }
            let into_dst = n.min(len - done);
            done += into_dst;
            self.end = n - into_dst;
        }
        Ok(())
    }

    /// Reads `len` payload bytes into `vec` (cleared first). Allocates only if `vec`'s
    /// capacity is below `len`; on error `vec` is left empty.
    pub fn read_payload_vec(
        &mut self,
        vec: &mut Vec<u8>,
        len: usize,
        what: Kind,
    ) -> Result<(), ReadError> {
        vec.clear();
        if vec.capacity() < len {
            // A fresh allocation rather than `reserve`, which could copy the old contents.
            *vec = Vec::with_capacity(len);
        }
        // SAFETY: the vector has capacity for `len` bytes; its spare capacity is written by
        // the read and only then declared initialized.
        unsafe {
            self.read_payload_raw(vec.as_mut_ptr(), len, what)?;
            vec.set_len(len);
        }
        Ok(())
    }

    /// Reads and discards `len` payload bytes (a refused write), through the staging
    /// buffer, without allocating.
    pub fn skip_payload(&mut self, len: u64, what: Kind) -> Result<(), ReadError> {
        let mut left = len;
        loop {
            let have = ((self.end - self.start) as u64).min(left);
            self.start += have as usize;
            left -= have;
            if left == 0 {
                return Ok(());
            }
            self.start = 0;
            self.end = 0;
            let want = left.min(self.buf.len() as u64) as usize;
            let dst = RawBuf {
                ptr: self.buf.as_mut_ptr(),
                len: want,
            };
            let n = self.read_into(&[dst])?;
            if n == 0 {
                return Err(ReadError::Truncated {
                    during: format!("the payload of a {what} frame"),
                });
            }
            self.end = n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_message: 1 << 20,
            max_rma: 1 << 30,
        }
    }

    fn all_valid() -> Vec<Header> {
        vec![
            Header::message(0),
            Header::message(1 << 20),
            Header::write(7, 0x10_0000, 4096, true),
            Header::write(8, 1, 1, false),
            Header::read_request(9, 0x10_0010, 3),
            Header::read_data(9, 3),
            Header::signal(10, 0x10_0008, u64::MAX, true),
            Header::fence_request(11),
            Header::ack(u64::MAX),
            Header::register(0x10_0000, 5000, Access::READ_WRITE),
            Header::unregister(0x10_0000),
            Header::fault(12, FaultCode::AccessDenied, 0x10_0000, 8, Access::WRITE),
            Header::credit(1 << 20),
        ]
    }

    #[test]
    fn every_constructor_round_trips() {
        for h in all_valid() {
            let b = h.encode();
            assert_eq!(decode_header(&b, &limits()), Ok(h), "{h:?}");
        }
    }

    #[test]
    fn unknown_type_is_rejected_by_name() {
        let mut b = Header::ack(1).encode();
        for k in [0u8, 0x0c, 0x7f, 0xff] {
            b[0] = k;
            let e = decode_header(&b, &limits()).unwrap_err();
            assert_eq!(e, FrameError::UnknownKind(k));
        }
        b[0] = 0x7f;
        assert_eq!(
            decode_header(&b, &limits()).unwrap_err().to_string(),
            "frame type 0x7f is unknown"
        );
    }

    #[test]
    fn oversized_lengths_are_rejected() {
        let e = decode_header(&Header::message((1 << 20) + 1).encode(), &limits()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "message frame of 1048577 bytes exceeds the 1048576-byte limit"
        );
        let mut b = Header::write(1, 4096, 1, false).encode();
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            decode_header(&b, &limits()),
            Err(FrameError::TooLong { .. })
        ));
        let b = Header::read_data(1, (1 << 30) + 1).encode();
        assert!(matches!(
            decode_header(&b, &limits()),
            Err(FrameError::TooLong { .. })
        ));
    }

    #[test]
    fn truncated_header_is_rejected() {
        let b = Header::ack(1).encode();
        for n in 0..HEADER_LEN {
            assert_eq!(
                decode_header(&b[..n], &limits()),
                Err(FrameError::Truncated {
                    what: "frame header",
                    need: HEADER_LEN,
                    got: n
                })
            );
        }
    }

    #[test]
    fn bad_fields_are_rejected() {
        let l = limits();
        let mut b = Header::message(3).encode();
        b[2] = 1;
        assert_eq!(
            decode_header(&b, &l),
            Err(FrameError::Reserved {
                kind: Kind::Message
            })
        );
        let mut b = Header::message(3).encode();
        b[1] = FLAG_ACK;
        assert!(matches!(
            decode_header(&b, &l),
            Err(FrameError::Flags { .. })
        ));
        let mut b = Header::message(3).encode();
        b[24] = 1;
        assert!(matches!(
            decode_header(&b, &l),
            Err(FrameError::UnusedField {
                field: "sequence",
                ..
            })
        ));
        for h in [
            Header::write(1, 0, 8, false),
            Header::signal(1, 0x1004, 1, false),
            Header::register(0x1001, 8, Access::READ),
            Header::write(1, u64::MAX - 2, 8, false),
        ] {
            assert!(
                matches!(
                    decode_header(&h.encode(), &l),
                    Err(FrameError::Offset { .. })
                ),
                "{h:?}"
            );
        }
        assert!(matches!(
            decode_header(&Header::write(1, 4096, 0, false).encode(), &l),
            Err(FrameError::Empty { .. })
        ));
        let mut b = Header::register(4096, 8, Access::READ).encode();
        b[4] = 4;
        assert!(matches!(
            decode_header(&b, &l),
            Err(FrameError::Access { .. })
        ));
        let mut b = Header::fault(1, FaultCode::OutOfWindow, 1, 1, Access::READ).encode();
        b[4] = 9;
        assert_eq!(decode_header(&b, &l), Err(FrameError::FaultCode(9)));
    }

    #[test]
    fn hello_round_trips_and_rejects_strangers() {
        let h = Hello {
            max_message: 12345,
            recv_window: 1 << 26,
        };
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
        let e = Hello::decode(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap_err();
        assert!(matches!(e, FrameError::Magic(_)));
        assert!(e.to_string().starts_with("not an accio tcp peer"), "{e}");
        let mut b = h.encode();
        b[8] = 9;
        assert_eq!(
            Hello::decode(&b).unwrap_err().to_string(),
            "peer speaks accio tcp protocol version 9, this side speaks 1"
        );
        assert!(matches!(
            Hello::decode(&b[..5]),
            Err(FrameError::Truncated { .. })
        ));
        let zero_window = Hello {
            recv_window: 0,
            ..h
        };
        assert!(matches!(
            Hello::decode(&zero_window.encode()),
            Err(FrameError::Greeting(_))
        ));
    }

    /// xorshift64*: enough randomness for a stable-Rust fuzz loop without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    fn assert_within_limits(h: &Header, l: &Limits) {
        match h.kind {
            Kind::Message => assert!(h.len <= l.max_message),
            Kind::Write | Kind::ReadRequest => {
                assert!(h.len >= 1 && h.len <= l.max_rma && h.offset != 0);
                assert!(h.offset.checked_add(h.len).is_some());
            }
            Kind::ReadData => assert!(h.len >= 1 && h.len <= l.max_rma),
            Kind::Register => {
                assert!(h.len >= 1 && h.len <= l.max_rma && h.offset.is_multiple_of(PAGE as u64));
                assert!(Access::from_bits(h.aux as u8).is_some() && h.aux < 4);
            }
            Kind::Signal => assert!(h.offset != 0 && h.offset.is_multiple_of(8)),
            Kind::Credit => assert!(h.len >= 1 && h.len <= MAX_CREDIT),
            _ => {}
        }
        assert!(h.payload_len() <= l.max_message.max(l.max_rma));
        // Whatever decodes re-encodes to the same bytes.
        assert_eq!(decode_header(&h.encode(), l), Ok(*h));
    }

    #[test]
    fn random_and_mutated_headers_never_panic_and_stay_within_limits() {
        let l = limits();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let valid = all_valid();
        let mut accepted = 0;
        for i in 0..200_000u32 {
            let mut b = [0u8; HEADER_LEN + 8];
            let n = (rng.next() % (HEADER_LEN as u64 + 9)) as usize;
            if i % 2 == 0 {
                for x in b.iter_mut() {
                    *x = rng.next() as u8;
                }
                b[0] = (rng.next() % 13) as u8;
            } else {
                let base = valid[(rng.next() % valid.len() as u64) as usize].encode();
                b[..HEADER_LEN].copy_from_slice(&base);
                for _ in 0..=(rng.next() % 3) {
                    let at = (rng.next() % HEADER_LEN as u64) as usize;
                    match rng.next() % 3 {
                        0 => b[at] ^= 1 << (rng.next() % 8),
                        1 => b[at] = rng.next() as u8,
                        _ => b[at] = [0, 0xff, 0x80, 1][(rng.next() % 4) as usize],
                    }
                }
            }
            let len = if i % 2 == 0 { n } else { HEADER_LEN };
            if let Ok(h) = decode_header(&b[..len], &l) {
                accepted += 1;
                assert_within_limits(&h, &l);
            }
            let _ = Hello::decode(&b[..n.min(HELLO_LEN)]);
        }
        assert!(accepted > 1000, "only {accepted} headers accepted");
    }

    /// A source that returns at most `chunk` bytes per read, to exercise partial reads.
    struct Chunky<'a>(&'a [u8], usize);
    impl Source for Chunky<'_> {
        unsafe fn read_raw(&mut self, bufs: &[RawBuf]) -> io::Result<usize> {
            let n = self.1.min(self.0.len());
            let mut part = &self.0[..n];
            // SAFETY: forwarded caller contract.
            let got = unsafe { part.read_raw(bufs) }?;
            self.0 = &self.0[got..];
            Ok(got)
        }
    }

    #[test]
    fn reader_delivers_payloads_across_staging_boundaries() {
        let mut stream = Vec::new();
        let sizes = [
            0usize, 1, 39, 40, 41, 100, 5000, 70_000, 200_000, 3, 0, 65_536,
        ];
        for (i, &n) in sizes.iter().enumerate() {
            stream.extend_from_slice(&Header::message(n).encode());
            stream.extend((0..n).map(|j| (i * 31 + j) as u8));
            stream.extend_from_slice(&Header::ack(i as u64).encode());
        }
        for (chunk, staging) in [(usize::MAX, STAGING_LEN), (7, 64), (4096, 100), (1, 40)] {
            let mut r = FrameReader::with_staging(Chunky(&stream, chunk), limits(), staging);
            let mut v = Vec::new();
            for (i, &n) in sizes.iter().enumerate() {
                let h = r.next_header().unwrap().unwrap();
                assert_eq!(h, Header::message(n));
                r.read_payload_vec(&mut v, n, h.kind).unwrap();
                assert!(v.iter().enumerate().all(|(j, &b)| b == (i * 31 + j) as u8));
                assert_eq!(r.next_header().unwrap(), Some(Header::ack(i as u64)));
            }
            assert!(r.next_header().unwrap().is_none());
        }
    }

    #[test]
    fn reader_skips_payloads_and_reports_truncation() {
        let mut stream = Header::write(1, 4096, 100_000, false).encode().to_vec();
        stream.extend(std::iter::repeat_n(7u8, 100_000));
        stream.extend_from_slice(&Header::ack(3).encode());
        stream.extend_from_slice(&Header::message(10).encode()[..20]);
        let mut r = FrameReader::with_staging(Chunky(&stream, 999), limits(), 128);
        let h = r.next_header().unwrap().unwrap();
        r.skip_payload(h.len, h.kind).unwrap();
        assert_eq!(r.next_header().unwrap(), Some(Header::ack(3)));
        let e = r.next_header().unwrap_err();
        assert_eq!(
            e.to_string(),
            "the connection ended in the middle of a frame header"
        );

        let mut stream = Header::message(10).encode().to_vec();
        stream.extend_from_slice(&[1, 2, 3]);
        let mut r = FrameReader::new(&stream[..], limits());
        let h = r.next_header().unwrap().unwrap();
        let mut v = Vec::new();
        let e = r.read_payload_vec(&mut v, 10, h.kind).unwrap_err();
        assert!(v.is_empty());
        assert_eq!(
            e.to_string(),
            "the connection ended in the middle of the payload of a message frame"
        );
    }

    #[test]
    fn reader_rejects_a_bad_frame_before_reading_its_payload() {
        let mut stream = Header::message(1 << 21).encode().to_vec();
        stream.extend_from_slice(&[0; 64]);
        let mut r = FrameReader::new(&stream[..], limits());
        assert!(matches!(
            r.next_header(),
            Err(ReadError::Frame(FrameError::TooLong { .. }))
        ));
    }
}
