//! The stream parser: [`FrameReader`] over a [`Source`] of bytes.

use std::fmt;
use std::io;

use accio_core::copy_bytes;

use super::{
    decode_header, FrameError, Header, Kind, Limits, HEADER_LEN, LARGE_PAYLOAD, STAGING_LEN,
};

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

    /// The source, to change how it reads between frames (the endpoint switches its
    /// socket between waiting and non-waiting reads).
    pub fn source_mut(&mut self) -> &mut S {
        &mut self.source
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
    /// frames). If the source fails (also with `WouldBlock`, for a non-blocking one), what
    /// was read of the header so far stays staged: calling again resumes.
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
