//! Decoding and validating a frame header from the peer, and [`FrameError`], why bytes
//! are not a valid header or greeting.

use std::fmt;

use accio_core::{Access, PAGE};

use super::{
    u64_at, FaultCode, Header, Kind, Limits, FLAG_ACK, HEADER_LEN, MAGIC, MAX_CREDIT, VERSION,
};

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
