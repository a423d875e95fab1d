//! A lone producer's second CPU: a helper thread that takes part of each large block's
//! work while the producer `pwrite`s.
//!
//! A producer writing in place alone leaves the merger almost idle and, on a machine with
//! more than one CPU, a CPU free. One `pwrite` per block uses one of them, so the producer
//! hands the helper what can run beside it:
//!
//! - on tmpfs, the second part of the block, inserted as new pages (`crate::insert`): the
//!   `pwrite` holds the inode lock, the insertion takes none, so the two copies (and their
//!   page allocations) run at once. The producer checksums the whole block (from its own
//!   bytes, in cache) while the helper finishes, so that the merger does not read the block
//!   back on a CPU the copies need;
//! - elsewhere (ext4, xfs, btrfs: `pwrite`s into one file take turns on the inode lock, and
//!   there is no lock-free way in), the block's checksum, computed from the producer's bytes
//!   during the `pwrite`.
//!
//! Measured on this 2-CPU machine. A C test, one process writing 960 MiB into a new
//! /dev/shm file in 2 MiB blocks, 3 interleaved runs each: one `pwrite` per block
//! 2.54–2.83 GB/s, one thread inserting 2.55–2.62, two threads inserting a half each
//! 3.58–4.03, a `pwrite` of the first half beside a thread inserting the second 4.31–4.56.
//! In accio (`accio bench merge`, one producer process, 480 x 2 MiB into /dev/shm, 3
//! interleaved runs each, against the same run's single stream): one `pwrite` 0.88–0.93x;
//! split in halves, checksummed by the merger from the file 1.00–1.11x (the merger's
//! read-back took a CPU the copies needed); checksummed by the producer while the helper
//! finishes 1.05–1.34x with fixed halves and 1.27–1.30x with the split following the
//! slower side (it settles near 33/64).

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{mpsc, Arc};

use crate::insert::{page_size, PageInserter};

/// Blocks at least this long get a helper's share of the work; below it, handing work to
/// another thread costs more than it saves.
pub(crate) const HELP_MIN: usize = 512 << 10;

/// The helper thread of one producer, for one output file.
#[derive(Debug)]
pub(crate) struct Helper {
    jobs: Option<mpsc::SyncSender<Job>>,
    done: mpsc::Receiver<Answer>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The process that started the thread (a forked child has no such thread).
    pid: u32,
    /// The helper inserts pages (tmpfs, userfaultfd available).
    inserts: bool,
    /// The share of a block the producer `pwrite`s when the helper inserts the rest, in
    /// 64ths: inserting a page costs more than a `pwrite` of it, and the producer also
    /// checksums, so the split follows which side finished first, one 64th per block.
    head: Cell<usize>,
}

/// Bytes the producer keeps alive and unchanged until the helper has answered (every
/// method that sends a job waits for its answer, unwinding included: [`Pending`]).
struct Bytes {
    ptr: *const u8,
    len: usize,
}

// SAFETY: see `Bytes`: the sending thread blocks until the helper is done with them.
unsafe impl Send for Bytes {}

impl Bytes {
    fn of(b: &[u8]) -> Bytes {
        Bytes {
            ptr: b.as_ptr(),
            len: b.len(),
        }
    }

    /// # Safety
    /// The sender of these bytes must still be waiting for the answer to their job.
    unsafe fn get<'a>(&self) -> &'a [u8] {
        // SAFETY: by the caller's promise the bytes are alive and unchanged.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

enum Job {
    /// Insert these bytes at this offset of the file.
    Insert(Bytes, u64),
    /// Checksum these bytes.
    Checksum(Bytes),
}

enum Answer {
    Inserted(io::Result<()>),
    Checksum(u32),
}

impl Helper {
    /// Starts the helper thread; with `insert`, it inserts pages into that file (a
    /// duplicate of the caller's descriptor).
    pub(crate) fn start(insert: Option<(Arc<PageInserter>, &File)>) -> io::Result<Helper> {
        let inserts = insert.is_some();
        let insert = match insert {
            Some((ins, f)) => Some((ins, f.try_clone()?)),
            None => None,
        };
        let (jobs, rx) = mpsc::sync_channel::<Job>(1);
        let (tx, done) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("accio-helper".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    let answer = match job {
                        Job::Insert(b, offset) => {
                            // SAFETY: the sender waits for this job's answer.
                            let data = unsafe { b.get() };
                            Answer::Inserted(match &insert {
                                Some((ins, f)) => ins.write_at(f, data, offset),
                                None => Err(io::Error::from(io::ErrorKind::Unsupported)),
                            })
                        }
                        Job::Checksum(b) => {
                            // SAFETY: the sender waits for this job's answer.
                            Answer::Checksum(crate::checksum::crc32c(unsafe { b.get() }))
                        }
                    };
                    if tx.send(answer).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Helper {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
            pid: std::process::id(),
            inserts,
            head: Cell::new(32),
        })
    }

    /// Whether the helper inserts pages ([`Helper::write_split`] can split).
    pub(crate) fn inserts(&self) -> bool {
        self.inserts
    }

    /// Hands `job` to the helper; `None` where it cannot take it (it is gone, or this is a
    /// forked child, where it never was).
    fn send(&self, job: Job) -> Option<Pending<'_>> {
        let sent = std::process::id() == self.pid
            && self.jobs.as_ref().is_some_and(|j| j.send(job).is_ok());
        // Made only once the job is sent: dropping one waits for an answer.
        sent.then(|| Pending {
            helper: self,
            answered: false,
        })
    }

    /// Writes `data` at `offset` of `file` (page-aligned; new pages, as
    /// [`PageInserter::write_at`] needs): the first part with `pwrite` here, the rest
    /// inserted by the helper at the same time; checksums `data` here while the helper
    /// finishes. Returns whether the rest was inserted (where the insertion failed, it is
    /// written with `pwrite` after all) and the checksum.
    pub(crate) fn write_split(
        &self,
        file: &File,
        data: &[u8],
        offset: u64,
    ) -> io::Result<(bool, u32)> {
        let page = page_size();
        let split = data.len() / page * self.head.get() / 64 * page;
        let (head, tail) = data.split_at(split);
        let at = offset + split as u64;
        let pending = if self.inserts && !head.is_empty() {
            self.send(Job::Insert(Bytes::of(tail), at))
        } else {
            None
        };
        let Some(pending) = pending else {
            file.write_all_at(data, offset)?;
            return Ok((false, crate::checksum::crc32c(data)));
        };
        let head_written = file.write_all_at(head, offset);
        let crc = crate::checksum::crc32c(data);
        let answer = pending.answer(|helper_first| {
            let h = self.head.get();
            self.head.set(if helper_first {
                (h - 1).max(16)
            } else {
                (h + 1).min(48)
            });
        });
        let inserted = matches!(answer, Some(Answer::Inserted(Ok(()))));
        head_written?;
        if !inserted {
            file.write_all_at(tail, at)?;
        }
        Ok((inserted, crc))
    }

    /// Writes `data` at `offset` of `file` with one `pwrite` here while the helper
    /// checksums it; returns the checksum.
    pub(crate) fn write_checksummed(
        &self,
        file: &File,
        data: &[u8],
        offset: u64,
    ) -> io::Result<u32> {
        let Some(pending) = self.send(Job::Checksum(Bytes::of(data))) else {
            file.write_all_at(data, offset)?;
            return Ok(crate::checksum::crc32c(data));
        };
        let written = file.write_all_at(data, offset);
        let crc = match pending.answer(|_| {}) {
            Some(Answer::Checksum(c)) => c,
            _ => crate::checksum::crc32c(data),
        };
        written?;
        Ok(crc)
    }
}

/// A job handed to the helper, whose answer the sender must take before the job's bytes
/// can go away: [`Pending::answer`] waits for it, and so does dropping it unanswered (a
/// caller unwinding between the two).
struct Pending<'a> {
    helper: &'a Helper,
    answered: bool,
}

impl Pending<'_> {
    /// Waits for the answer (`None`: the helper is gone, which it is only after its last
    /// use of a job's bytes); `moved` is told whether the answer was there already when
    /// asked (the helper finished first).
    fn answer(mut self, moved: impl FnOnce(bool)) -> Option<Answer> {
        self.answered = true;
        let done = &self.helper.done;
        match done.try_recv() {
            Err(mpsc::TryRecvError::Empty) => {
                moved(false);
                done.recv().ok()
            }
            a => {
                moved(true);
                a.ok()
            }
        }
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.answered {
            let _ = self.helper.done.recv();
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            if std::process::id() == self.pid {
                let _ = t.join();
            } else {
                // A forked child: the thread is the parent's; there is nothing to join.
                std::mem::forget(t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insert::tests::shm_inserter;

    #[test]
    fn a_split_write_holds_every_byte_and_falls_back_where_insertion_fails() {
        let Some((f, path, ins)) = shm_inserter("helper-split", 64) else {
            return;
        };
        let page = page_size();
        let mut h = Helper::start(Some((Arc::new(ins), &f))).unwrap();
        assert!(h.inserts());
        let data: Vec<u8> = (0..9 * page + 123).map(|i| (i * 13 + 1) as u8).collect();
        let crc = crate::checksum::crc32c(&data);
        let check = |at: u64| {
            let mut back = vec![0xffu8; 10 * page];
            f.read_exact_at(&mut back, at).unwrap();
            assert_eq!(&back[..data.len()], &data[..]);
            assert!(back[data.len()..].iter().all(|&b| b == 0));
        };
        // Both parts written, the second inserted, and the checksum of the whole.
        assert_eq!(h.write_split(&f, &data, 0).unwrap(), (true, crc));
        check(0);
        // A page of the second part already there: the insertion fails and the part is
        // written with pwrite after all.
        let at = 16 * page as u64;
        f.write_all_at(&[9], at + 8 * page as u64).unwrap();
        assert_eq!(h.write_split(&f, &data, at).unwrap(), (false, crc));
        check(at);
        // The split moves toward the side that finished last, within its bounds.
        assert!((16..=48).contains(&h.head.get()));
        // In a forked child (another pid) nothing is handed over: one pwrite.
        h.pid = h.pid.wrapping_add(1);
        let at = 32 * page as u64;
        assert_eq!(h.write_split(&f, &data, at).unwrap(), (false, crc));
        check(at);
        h.pid = std::process::id();
        drop(h);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_helper_that_does_not_insert_checksums_beside_the_write() {
        let path = std::env::temp_dir().join(format!("accio-helper-{}-crc", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let h = Helper::start(None).unwrap();
        assert!(!h.inserts());
        let data: Vec<u8> = (0..700_001u32).map(|i| (i % 251) as u8).collect();
        let crc = crate::checksum::crc32c(&data);
        assert_eq!(h.write_checksummed(&f, &data, 4096).unwrap(), crc);
        // Without insertion a split write is one pwrite.
        assert_eq!(h.write_split(&f, &data, 8 << 20).unwrap(), (false, crc));
        for at in [4096u64, 8 << 20] {
            let mut back = vec![0u8; data.len()];
            f.read_exact_at(&mut back, at).unwrap();
            assert_eq!(back, data);
        }
        drop(h);
        std::fs::remove_file(&path).unwrap();
    }
}
