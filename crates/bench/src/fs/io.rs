//! The I/O one bench thread performs: open (untimed), then write or read its own file in
//! records between two timestamps, closing (and for write+sync, `fsync`ing) inside them.
//!
//! Buffers are page-aligned mappings, pre-faulted before any timing: a buffer 1–31 bytes
//! into a page makes `read()` from the page cache 4x slower on some CPUs (4 KiB aliasing,
//! `MACHINE_NOTES.md` trait 1), O_DIRECT needs alignment anyway, and fresh memory is slow to
//! touch on VMs (trait 2).

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use accio::Region;
use io_uring::{opcode, types, IoUring};

use super::{Engine, FsError};

/// Byte every record starts with (and every written byte follows a non-zero pattern, so no
/// file system can store the data as holes or compress it away).
const PATTERN_FIRST: u8 = 0xA7;

/// What the threads do in one step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Write the whole file; `fresh` removes it first and creates a new one (new pages,
    /// new blocks), else the existing pages are overwritten; `sync` puts an `fsync` inside
    /// the timing.
    Write { fresh: bool, sync: bool },
    /// Read the whole file; `direct` opens it with O_DIRECT.
    Read { direct: bool },
    /// Leave the worker loop.
    Exit,
}

/// One thread's timed interval.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    /// When the thread issued its first operation.
    pub start: Instant,
    /// When its last operation (including fsync and close) returned.
    pub end: Instant,
    /// Bytes it moved.
    pub bytes: u64,
}

/// Aggregate throughput of threads that ran together, in GB/s (10^9 B/s): all bytes over
/// the time from the first start to the last finish. This is what a user waiting for all
/// of them sees; summing per-thread rates instead (IOzone's "children see" figure)
/// overstates it whenever threads do not overlap perfectly.
pub fn aggregate_gbps(spans: &[Span]) -> Option<f64> {
    let start = spans.iter().map(|s| s.start).min()?;
    let end = spans.iter().map(|s| s.end).max()?;
    let bytes: u64 = spans.iter().map(|s| s.bytes).sum();
    let secs = end.duration_since(start).as_secs_f64();
    (secs > 0.0).then(|| bytes as f64 / secs / 1e9)
}

/// A page-aligned, pre-faulted I/O buffer owned by one thread.
pub(crate) struct Buffer {
    region: Region,
}

impl Buffer {
    fn new(len: usize) -> Result<Buffer, FsError> {
        let region = Region::anonymous(len).map_err(|e| FsError::Io {
            what: format!("allocating a {len}-byte I/O buffer"),
            source: std::io::Error::other(e.to_string()),
        })?;
        let mut b = Buffer { region };
        for (i, x) in b.as_mut_slice().iter_mut().enumerate() {
            *x = (i as u8).wrapping_mul(31).wrapping_add(PATTERN_FIRST);
        }
        Ok(b)
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: the region is a private mapping of `len` bytes owned by this buffer and
        // never handed to anyone else, so no other reference to it exists.
        unsafe { std::slice::from_raw_parts(self.region.as_ptr(), self.region.len()) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only live reference.
        unsafe { std::slice::from_raw_parts_mut(self.region.as_ptr(), self.region.len()) }
    }
}

/// Everything one thread needs, prepared before the first barrier.
pub(crate) struct Worker {
    file: PathBuf,
    file_size: u64,
    record: usize,
    bufs: Vec<Buffer>,
    ring: Option<IoUring>,
    cancel: &'static AtomicBool,
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> FsError {
    move |source| FsError::Io { what, source }
}

impl Worker {
    /// A worker for `file`: one buffer for psync, `iodepth` buffers and a ring for io_uring.
    pub(crate) fn new(
        file: PathBuf,
        file_size: u64,
        record: usize,
        engine: Engine,
        iodepth: usize,
        cancel: &'static AtomicBool,
    ) -> Result<Worker, FsError> {
        let (nbufs, ring) = match engine {
            Engine::Psync => (1, None),
            Engine::IoUring => {
                let depth = iodepth.clamp(1, 4096) as u32;
                let ring = IoUring::new(depth).map_err(io_err(format!(
                    "setting up an io_uring of depth {depth} (is io_uring disabled by \
                     kernel.io_uring_disabled or a seccomp filter?)"
                )))?;
                (depth as usize, Some(ring))
            }
        };
        let bufs = (0..nbufs)
            .map(|_| Buffer::new(record))
            .collect::<Result<_, _>>()?;
        Ok(Worker {
            file,
            file_size,
            record,
            bufs,
            ring,
            cancel,
        })
    }

    /// Opens the file for `phase` (outside the timing, as IOzone's throughput mode does).
    pub(crate) fn open(&self, phase: Phase, direct: bool) -> Result<File, FsError> {
        let mut o = OpenOptions::new();
        let (what, direct) = match phase {
            Phase::Write { fresh, .. } => {
                if fresh {
                    // Unlink and create rather than O_TRUNC: IOzone and fio write new files,
                    // and ext4 starts writeback at close of a file truncated to zero and
                    // rewritten (auto_da_alloc), which would put disk I/O into "write".
                    match std::fs::remove_file(&self.file) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => {
                            return Err(FsError::Io {
                                what: format!(
                                    "removing {} before rewriting it",
                                    self.file.display()
                                ),
                                source: e,
                            })
                        }
                    }
                    o.create_new(true);
                }
                o.write(true).mode(0o600);
                ("writing", direct)
            }
            Phase::Read { direct: d } => {
                o.read(true);
                ("reading", direct || d)
            }
            Phase::Exit => unreachable!("exit is not an I/O phase"),
        };
        // Test files live in a private directory (`WorkDir`); never through a symlink anyway.
        o.custom_flags(libc::O_NOFOLLOW | if direct { libc::O_DIRECT } else { 0 });
        o.open(&self.file).map_err(|e| {
            let hint = if direct && e.raw_os_error() == Some(libc::EINVAL) {
                " (this file system does not support O_DIRECT)"
            } else {
                ""
            };
            FsError::Io {
                what: format!(
                    "opening {} for {what}{}{hint}",
                    self.file.display(),
                    if direct { " with O_DIRECT" } else { "" }
                ),
                source: e,
            }
        })
    }

    /// Runs `phase` on the opened file and returns the timed span. The file is closed
    /// inside the timing: on NFS `close()` flushes (close-to-open consistency), and a write
    /// is not done for an application until its file is closed.
    pub(crate) fn run(&mut self, file: File, phase: Phase) -> Result<Span, FsError> {
        let start = Instant::now();
        match (phase, self.ring.is_some()) {
            (Phase::Write { .. }, false) => self.psync_write(&file)?,
            (Phase::Read { .. }, false) => self.psync_read(&file)?,
            (Phase::Write { .. }, true) => self.uring(&file, true)?,
            (Phase::Read { .. }, true) => self.uring(&file, false)?,
            (Phase::Exit, _) => unreachable!("exit is not an I/O phase"),
        }
        if let Phase::Write { sync: true, .. } = phase {
            file.sync_all()
                .map_err(io_err(format!("fsync of {}", self.file.display())))?;
        }
        close(file, &self.file)?;
        Ok(Span {
            start,
            end: Instant::now(),
            bytes: self.file_size,
        })
    }

    fn check_cancel(&self) -> Result<(), FsError> {
        if self.cancel.load(Ordering::Relaxed) {
            Err(FsError::Interrupted)
        } else {
            Ok(())
        }
    }

    fn psync_write(&self, file: &File) -> Result<(), FsError> {
        let buf = self.bufs[0].as_slice();
        let mut off = 0u64;
        while off < self.file_size {
            self.check_cancel()?;
            let len = (self.file_size - off).min(self.record as u64) as usize;
            file.write_all_at(&buf[..len], off).map_err(io_err(format!(
                "writing {} at offset {off}",
                self.file.display()
            )))?;
            off += len as u64;
        }
        Ok(())
    }

    fn psync_read(&mut self, file: &File) -> Result<(), FsError> {
        let (size, record, path) = (self.file_size, self.record, &self.file);
        let buf = self.bufs[0].as_mut_slice();
        let mut off = 0u64;
        while off < size {
            if self.cancel.load(Ordering::Relaxed) {
                return Err(FsError::Interrupted);
            }
            let len = (size - off).min(record as u64) as usize;
            file.read_exact_at(&mut buf[..len], off)
                .map_err(io_err(format!(
                    "reading {} at offset {off}",
                    path.display()
                )))?;
            check_record(buf[0], path, off)?;
            off += len as u64;
        }
        Ok(())
    }

    /// io_uring: keeps up to `iodepth` records in flight, each in its own buffer, and
    /// resubmits the remainder of a short transfer. On any failure it stops submitting and
    /// reaps every entry still in flight before returning, so the kernel never holds a
    /// pointer into a buffer that could be freed.
    fn uring(&mut self, file: &File, write: bool) -> Result<(), FsError> {
        let fd = types::Fd(file.as_raw_fd());
        let depth = self.bufs.len();
        let verb = if write { "writing" } else { "reading" };
        let path = self.file.display().to_string();
        let what = |off: u64| format!("{verb} {path} at offset {off} (io_uring)");
        let ptrs: Vec<*mut u8> = self.bufs.iter().map(|b| b.region.as_ptr()).collect();
        let ring = self.ring.as_mut().expect("io_uring engine has a ring");
        // Per slot: (record offset, record length, bytes done).
        let mut slots: Vec<Option<(u64, usize, usize)>> = vec![None; depth];
        let (mut next, mut done, mut inflight) = (0u64, 0u64, 0usize);
        let mut failure: Option<FsError> = None;
        while inflight > 0 || (failure.is_none() && done < self.file_size) {
            if failure.is_none() && self.cancel.load(Ordering::Relaxed) {
                failure = Some(FsError::Interrupted);
            }
            if failure.is_none() {
                for (i, slot) in slots.iter_mut().enumerate() {
                    if slot.is_some() || next >= self.file_size {
                        continue;
                    }
                    let len = (self.file_size - next).min(self.record as u64) as usize;
                    if let Err(e) = push(ring, write, fd, ptrs[i], len, next, i) {
                        failure = Some(e);
                        break;
                    }
                    *slot = Some((next, len, 0));
                    next += len as u64;
                    inflight += 1;
                }
            }
            if inflight == 0 {
                continue;
            }
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // The ring is unusable and entries may still be in flight: keep their
                    // buffers mapped for the life of the process rather than risk the
                    // kernel writing into freed memory.
                    std::mem::forget(std::mem::take(&mut self.bufs));
                    return Err(FsError::Io {
                        what: format!("waiting for io_uring completions on {path}"),
                        source: e,
                    });
                }
            }
            let completions: Vec<(usize, i32)> = ring
                .completion()
                .map(|c| (c.user_data() as usize, c.result()))
                .collect();
            for (i, res) in completions {
                let (off, len, got) = slots[i].expect("completion for a busy slot");
                let error = if failure.is_some() {
                    None // draining: only count it
                } else if res < 0 {
                    Some(std::io::Error::from_raw_os_error(-res))
                } else if res == 0 {
                    Some(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "file ended early (changed by someone else?)",
                    ))
                } else if got + (res as usize) < len {
                    // Short transfer: submit the rest of the record from the same buffer.
                    let got = got + res as usize;
                    // SAFETY: got < len <= buffer length, so the pointer stays inside it.
                    let ptr = unsafe { ptrs[i].add(got) };
                    match push(ring, write, fd, ptr, len - got, off + got as u64, i) {
                        Ok(()) => {
                            slots[i] = Some((off, len, got));
                            continue;
                        }
                        Err(e) => {
                            failure = Some(e);
                            None
                        }
                    }
                } else {
                    if !write {
                        // SAFETY: the read into this buffer has completed; nothing else
                        // writes it until the slot is reused below.
                        if let Err(e) = check_record(unsafe { *ptrs[i] }, &self.file, off) {
                            failure = Some(e);
                        }
                    }
                    done += len as u64;
                    None
                };
                if let Some(source) = error {
                    failure = Some(FsError::Io {
                        what: what(off + got as u64),
                        source,
                    });
                }
                slots[i] = None;
                inflight -= 1;
            }
        }
        failure.map_or(Ok(()), Err)
    }
}

/// Queues one read or write of `len` bytes at `ptr` for file offset `off`.
fn push(
    ring: &mut IoUring,
    write: bool,
    fd: types::Fd,
    ptr: *mut u8,
    len: usize,
    off: u64,
    slot: usize,
) -> Result<(), FsError> {
    let entry = if write {
        opcode::Write::new(fd, ptr, len as u32).offset(off).build()
    } else {
        opcode::Read::new(fd, ptr, len as u32).offset(off).build()
    }
    .user_data(slot as u64);
    // SAFETY: `ptr..ptr + len` lies in a buffer of the worker that stays mapped and
    // untouched until this entry's completion is reaped: its slot stays busy until then,
    // and `Worker::uring` does not return while entries are in flight (it drains them, or
    // leaks the buffers when the ring itself fails).
    unsafe { ring.submission().push(&entry) }.map_err(|_| FsError::Io {
        what: "queueing an io_uring entry".into(),
        source: std::io::Error::other("submission queue full (more entries than its depth)"),
    })
}

fn check_record(first: u8, path: &Path, off: u64) -> Result<(), FsError> {
    if first == PATTERN_FIRST {
        Ok(())
    } else {
        Err(FsError::Io {
            what: format!("reading {} at offset {off}", path.display()),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("read back {first:#04x}, wrote {PATTERN_FIRST:#04x}"),
            ),
        })
    }
}

/// Closes `file` and reports the error `File`'s destructor would swallow (on NFS, close
/// returns deferred write errors).
pub(crate) fn close(file: File, path: &Path) -> Result<(), FsError> {
    let fd = file.into_raw_fd();
    // SAFETY: `fd` was just released by `File`, so this is its only owner and it is closed
    // exactly once.
    if unsafe { libc::close(fd) } == 0 {
        Ok(())
    } else {
        Err(FsError::Io {
            what: format!("closing {}", path.display()),
            source: std::io::Error::last_os_error(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn aggregate_is_total_bytes_over_first_start_to_last_end() {
        let t0 = Instant::now();
        let s = |a: u64, b: u64, bytes| Span {
            start: t0 + Duration::from_millis(a),
            end: t0 + Duration::from_millis(b),
            bytes,
        };
        // Two threads, 1 GB each: one runs 0..1000 ms, the other 500..1000 ms.
        // Sum of rates would be 1 + 2 = 3 GB/s; the aggregate is 2 GB over 1 s.
        let g = aggregate_gbps(&[s(0, 1000, 1_000_000_000), s(500, 1000, 1_000_000_000)]);
        assert!((g.unwrap() - 2.0).abs() < 1e-9);
        assert!(aggregate_gbps(&[]).is_none());
    }
}
