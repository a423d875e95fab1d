//! The naive alternative: P files written in parallel, then concatenated into one.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::Instant;

use super::guards::RemoveOnDrop;
use super::{io_err, MergeBenchError};
use crate::scratch::ScratchDir;

/// Bytes `copy_file_range` moves per call, so that Ctrl-C is seen between calls (a 64 MiB
/// in-kernel copy takes tens of milliseconds).
const CONCAT_STEP: usize = 64 << 20;

/// One naive run: P files written in parallel, then concatenated; GB/s. The files are
/// created in `scratch` (private, `O_EXCL`) and removed however the run ends; `cancel`
/// is checked between writes and between copies.
pub(super) fn naive_once(
    scratch: &ScratchDir,
    p: usize,
    f: u64,
    src: &[u8],
    sync: bool,
    cancel: &AtomicBool,
) -> Result<f64, MergeBenchError> {
    let mut cleanup: Vec<RemoveOnDrop> = Vec::with_capacity(p + 1);
    // Created before the writers start (untimed, as before), so that a failed create
    // cannot leave the other writers waiting at the start barrier.
    let mut parts: Vec<(PathBuf, std::fs::File)> = Vec::with_capacity(p);
    for i in 0..p {
        let name = format!("naive.part{i}");
        let (path, file) = scratch.create(&name).map_err(io_err(format!(
            "creating {}",
            scratch.path().join(&name).display()
        )))?;
        cleanup.push(RemoveOnDrop(path.clone()));
        parts.push((path, file));
    }
    let start = Barrier::new(p + 1);
    let t0 = std::thread::scope(|s| -> Result<Instant, MergeBenchError> {
        let handles: Vec<_> = parts
            .iter()
            .map(|(part, file)| {
                let start = &start;
                s.spawn(move || -> Result<(), MergeBenchError> {
                    start.wait();
                    use std::os::unix::fs::FileExt;
                    for i in 0..f {
                        if cancel.load(Ordering::Relaxed) {
                            return Err(MergeBenchError::Interrupted);
                        }
                        file.write_all_at(src, i * src.len() as u64)
                            .map_err(io_err(format!("writing {}", part.display())))?;
                    }
                    Ok(())
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let mut first = None;
        for h in handles {
            let r = h
                .join()
                .map_err(|_| MergeBenchError::Config("a naive writer panicked".into()))
                .and_then(|r| r);
            if let Err(e) = r {
                // A real failure says more than the Interrupted of its siblings.
                if first.is_none() || matches!(first, Some(MergeBenchError::Interrupted)) {
                    first = Some(e);
                }
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(t0),
        }
    })?;
    // Inside the timing, as the concatenation it is part of.
    let (out, dst) = scratch.create("naive.out").map_err(io_err(format!(
        "creating {}",
        scratch.path().join("naive.out").display()
    )))?;
    cleanup.push(RemoveOnDrop(out.clone()));
    let mut at: i64 = 0;
    for (part, srcf) in parts {
        let len = srcf.metadata().map_err(io_err("fstat"))?.len() as i64;
        let mut from: i64 = 0;
        while from < len {
            if cancel.load(Ordering::Relaxed) {
                return Err(MergeBenchError::Interrupted);
            }
            // SAFETY: both descriptors are open files; the offsets are our own locals.
            let n = unsafe {
                libc::copy_file_range(
                    srcf.as_raw_fd(),
                    &mut from,
                    dst.as_raw_fd(),
                    &mut at,
                    ((len - from) as usize).min(CONCAT_STEP),
                    0,
                )
            };
            if n <= 0 {
                return Err(MergeBenchError::Io {
                    what: format!("concatenating {} into {}", part.display(), out.display()),
                    source: std::io::Error::last_os_error(),
                });
            }
        }
        drop(srcf);
        std::fs::remove_file(&part).map_err(io_err(format!("removing {}", part.display())))?;
    }
    if sync {
        dst.sync_all()
            .map_err(io_err(format!("syncing {}", out.display())))?;
    }
    drop(dst);
    let secs = t0.elapsed().as_secs_f64();
    Ok(p as f64 * f as f64 * src.len() as f64 / secs / 1e9)
}
