//! Control messages between the driver and the peer, sent over the endpoint being measured.
//!
//! The driver sends a [`Cmd`], the scenario's data flows, and the peer answers with one
//! [`Reply`]. Commands and replies never overlap with scenario data because each side knows
//! how many data messages a command implies. Layout of every control message: tag (`u32`
//! LE), word count (`u32` LE), that many `u64` LE words, then UTF-8 text (used only by
//! [`Reply::Failed`]).

/// Protocol version; the peer announces it in [`Reply::Hello`], so a driver and a peer from
/// different builds refuse to talk instead of misreading each other.
pub const VERSION: u64 = 1;

/// What the driver asks the peer to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cmd {
    /// Receive `count` messages of `size` bytes and send each straight back (ping-pong).
    Echo {
        /// Round trips.
        count: u64,
        /// Message size, to pre-fault the receive buffer.
        size: u64,
    },
    /// Prepare to receive `count` messages of `size` bytes and reply [`Reply::Ready`];
    /// receive them, then reply [`Reply::Stream`].
    Sink {
        /// Messages that will arrive.
        count: u64,
        /// Size of each.
        size: u64,
    },
    /// Register a window of `size` bytes the driver may write; reply [`Reply::Window`].
    Target {
        /// Window size.
        size: u64,
    },
    /// Check that the window at `offset` holds `pattern` bytes (the driver's RMA landed),
    /// then unregister it; reply [`Reply::Done`].
    Release {
        /// The window's offset.
        offset: u64,
        /// Bytes the driver wrote from the start of the window.
        size: u64,
        /// The byte value written.
        pattern: u8,
    },
    /// Connect to the driver's listener `count` times, timing each `connect()`; after each,
    /// wait for one message on this endpoint (the driver's "accepted"); reply
    /// [`Reply::Nanos`].
    Connect {
        /// Connections to make.
        count: u64,
    },
    /// Reply [`Reply::Done`] and exit.
    Quit,
}

/// What the peer answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// First message after connecting.
    Hello {
        /// [`VERSION`] of the peer.
        version: u64,
        /// The peer's process id.
        pid: u64,
    },
    /// The command completed.
    Done,
    /// [`Cmd::Sink`]: the receive buffer is ready; the driver may start sending.
    Ready,
    /// Result of [`Cmd::Sink`]: `bytes` arrived, the last of them at `last_ns`.
    Stream {
        /// Bytes received.
        bytes: u64,
        /// `CLOCK_MONOTONIC` in nanoseconds when the last message had been received. The
        /// clock is shared by all processes of a host, so the driver compares it with the
        /// time it started sending.
        last_ns: u64,
    },
    /// Result of [`Cmd::Target`]: the registered window's offset.
    Window {
        /// Offset of the window in the peer's registered address space.
        offset: u64,
    },
    /// Timed samples in nanoseconds.
    Nanos(Vec<u64>),
    /// The command failed at the peer.
    Failed {
        /// The operation is not supported by the backend (the figure can be skipped).
        unsupported: bool,
        /// The peer's error message.
        text: String,
    },
}

const HEADER: usize = 8;

fn encode(tag: u32, words: &[u64], text: &str, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&tag.to_le_bytes());
    let n = u32::try_from(words.len()).expect("control messages carry few words");
    out.extend_from_slice(&n.to_le_bytes());
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out.extend_from_slice(text.as_bytes());
}

/// Splits a control message into tag, words and text.
fn decode(buf: &[u8]) -> Result<(u32, Vec<u64>, &str), String> {
    if buf.len() < HEADER {
        return Err(format!(
            "control message of {} bytes is shorter than its {HEADER}-byte header",
            buf.len()
        ));
    }
    let tag = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
    let n = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes")) as usize;
    let words_end = n
        .checked_mul(8)
        .and_then(|b| b.checked_add(HEADER))
        .filter(|&end| end <= buf.len())
        .ok_or_else(|| {
            format!(
                "control message (tag {tag}) announces {n} words but has {} bytes",
                buf.len()
            )
        })?;
    let words = buf[HEADER..words_end]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let text = std::str::from_utf8(&buf[words_end..])
        .map_err(|_| format!("control message (tag {tag}) has non-UTF-8 text"))?;
    Ok((tag, words, text))
}

fn want<const N: usize>(tag: u32, words: &[u64]) -> Result<[u64; N], String> {
    words
        .try_into()
        .map_err(|_| format!("message tag {tag} needs {N} words, got {}", words.len()))
}

impl Cmd {
    /// Writes the command into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Cmd::Echo { count, size } => encode(1, &[count, size], "", out),
            Cmd::Sink { count, size } => encode(2, &[count, size], "", out),
            Cmd::Target { size } => encode(3, &[size], "", out),
            Cmd::Release {
                offset,
                size,
                pattern,
            } => encode(4, &[offset, size, u64::from(pattern)], "", out),
            Cmd::Connect { count } => encode(5, &[count], "", out),
            Cmd::Quit => encode(6, &[], "", out),
        }
    }

    /// Parses a command; the error says what is wrong with the bytes.
    pub fn decode(buf: &[u8]) -> Result<Cmd, String> {
        let (tag, w, _) = decode(buf)?;
        Ok(match tag {
            1 => {
                let [count, size] = want(tag, &w)?;
                Cmd::Echo { count, size }
            }
            2 => {
                let [count, size] = want(tag, &w)?;
                Cmd::Sink { count, size }
            }
            3 => {
                let [size] = want(tag, &w)?;
                Cmd::Target { size }
            }
            4 => {
                let [offset, size, pattern] = want(tag, &w)?;
                let pattern = u8::try_from(pattern)
                    .map_err(|_| format!("release pattern {pattern} is not a byte"))?;
                Cmd::Release {
                    offset,
                    size,
                    pattern,
                }
            }
            5 => {
                let [count] = want(tag, &w)?;
                Cmd::Connect { count }
            }
            6 => Cmd::Quit,
            t => return Err(format!("unknown command tag {t}")),
        })
    }
}

impl Reply {
    /// Writes the reply into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Hello { version, pid } => encode(101, &[*version, *pid], "", out),
            Reply::Done => encode(102, &[], "", out),
            Reply::Stream { bytes, last_ns } => encode(103, &[*bytes, *last_ns], "", out),
            Reply::Ready => encode(107, &[], "", out),
            Reply::Window { offset } => encode(104, &[*offset], "", out),
            Reply::Nanos(v) => encode(105, v, "", out),
            Reply::Failed { unsupported, text } => {
                encode(106, &[u64::from(*unsupported)], text, out)
            }
        }
    }

    /// Parses a reply; the error says what is wrong with the bytes.
    pub fn decode(buf: &[u8]) -> Result<Reply, String> {
        let (tag, w, text) = decode(buf)?;
        Ok(match tag {
            101 => {
                let [version, pid] = want(tag, &w)?;
                Reply::Hello { version, pid }
            }
            102 => Reply::Done,
            103 => {
                let [bytes, last_ns] = want(tag, &w)?;
                Reply::Stream { bytes, last_ns }
            }
            107 => Reply::Ready,
            104 => {
                let [offset] = want(tag, &w)?;
                Reply::Window { offset }
            }
            105 => Reply::Nanos(w),
            106 => {
                let [unsupported] = want(tag, &w)?;
                Reply::Failed {
                    unsupported: unsupported != 0,
                    text: text.to_string(),
                }
            }
            t => return Err(format!("unknown reply tag {t}")),
        })
    }

    /// A short name for error messages ("reply Done", ...).
    pub fn name(&self) -> &'static str {
        match self {
            Reply::Hello { .. } => "Hello",
            Reply::Done => "Done",
            Reply::Stream { .. } => "Stream",
            Reply::Ready => "Ready",
            Reply::Window { .. } => "Window",
            Reply::Nanos(_) => "Nanos",
            Reply::Failed { .. } => "Failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip() {
        let mut buf = Vec::new();
        for c in [
            Cmd::Echo { count: 3, size: 8 },
            Cmd::Sink {
                count: 1 << 40,
                size: 2 << 20,
            },
            Cmd::Target { size: 4096 },
            Cmd::Release {
                offset: 1 << 20,
                size: 77,
                pattern: 0xa5,
            },
            Cmd::Connect { count: 30 },
            Cmd::Quit,
        ] {
            c.encode(&mut buf);
            assert_eq!(Cmd::decode(&buf).unwrap(), c);
        }
    }

    #[test]
    fn replies_round_trip() {
        let mut buf = Vec::new();
        for r in [
            Reply::Hello {
                version: VERSION,
                pid: 42,
            },
            Reply::Done,
            Reply::Stream {
                bytes: 9,
                last_ns: 10,
            },
            Reply::Ready,
            Reply::Window { offset: 0x10_0000 },
            Reply::Nanos(vec![1, 2, 3]),
            Reply::Nanos(vec![]),
            Reply::Failed {
                unsupported: true,
                text: "register is not supported by the x backend".into(),
            },
        ] {
            r.encode(&mut buf);
            assert_eq!(Reply::decode(&buf).unwrap(), r);
        }
    }

    #[test]
    fn malformed_messages_are_described() {
        assert!(Cmd::decode(&[1, 0]).unwrap_err().contains("shorter"));
        let mut buf = Vec::new();
        encode(1, &[5], "", &mut buf);
        assert!(Cmd::decode(&buf).unwrap_err().contains("needs 2 words"));
        encode(99, &[], "", &mut buf);
        assert!(Cmd::decode(&buf)
            .unwrap_err()
            .contains("unknown command tag 99"));
        // A word count larger than the message.
        buf = vec![1, 0, 0, 0, 255, 255, 255, 255];
        assert!(Cmd::decode(&buf).unwrap_err().contains("announces"));
        encode(4, &[1, 2, 300], "", &mut buf);
        assert!(Cmd::decode(&buf).unwrap_err().contains("not a byte"));
        // A ping-pong payload is never mistaken for a reply.
        assert!(Reply::decode(&[0u8; 8]).is_err());
    }
}
