//! The naive alternative: P files written in parallel, then concatenated into one.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::Instant;

use super::guards::RemoveOnDrop;
use super::{io_err, MergeBenchError};

/// One naive run: P files written in parallel, then concatenated; GB/s.
pub(super) fn naive_once(
    dir: &Path,
    p: usize,
    f: u64,
    src: &[u8],
    sync: bool,
) -> Result<f64, MergeBenchError> {
    // The pid stays in every name (`with_extension` would replace it), so that runs of
    // several processes in one directory do not write each other's files.
    let pid = std::process::id();
    let parts: Vec<PathBuf> = (0..p)
        .map(|i| dir.join(format!("accio-bench-merge-naive.{pid}.part{i}")))
        .collect();
    let out = dir.join(format!("accio-bench-merge-naive.{pid}.out"));
    let _cleanup: Vec<RemoveOnDrop> = parts
        .iter()
        .chain(std::iter::once(&out))
        .map(|p| RemoveOnDrop(p.clone()))
        .collect();
    let start = Barrier::new(p + 1);
    let t0 = std::thread::scope(|s| -> Result<Instant, MergeBenchError> {
        let handles: Vec<_> = parts
            .iter()
            .map(|part| {
                let start = &start;
                s.spawn(move || -> Result<(), MergeBenchError> {
                    let file = std::fs::File::create(part)
                        .map_err(io_err(format!("creating {}", part.display())))?;
                    start.wait();
                    use std::os::unix::fs::FileExt;
                    for i in 0..f {
                        file.write_all_at(src, i * src.len() as u64)
                            .map_err(io_err(format!("writing {}", part.display())))?;
                    }
                    Ok(())
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        for h in handles {
            h.join()
                .map_err(|_| MergeBenchError::Config("a naive writer panicked".into()))??;
        }
        Ok(t0)
    })?;
    let dst = std::fs::File::create(&out).map_err(io_err(format!("creating {}", out.display())))?;
    let mut at: i64 = 0;
    for part in &parts {
        let srcf =
            std::fs::File::open(part).map_err(io_err(format!("opening {}", part.display())))?;
        let len = srcf.metadata().map_err(io_err("fstat"))?.len() as i64;
        let mut from: i64 = 0;
        while from < len {
            // SAFETY: both descriptors are open files; the offsets are our own locals.
            let n = unsafe {
                libc::copy_file_range(
                    srcf.as_raw_fd(),
                    &mut from,
                    dst.as_raw_fd(),
                    &mut at,
                    (len - from) as usize,
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
        std::fs::remove_file(part).map_err(io_err(format!("removing {}", part.display())))?;
    }
    if sync {
        dst.sync_all()
            .map_err(io_err(format!("syncing {}", out.display())))?;
    }
    drop(dst);
    let secs = t0.elapsed().as_secs_f64();
    Ok(p as f64 * f as f64 * src.len() as f64 / secs / 1e9)
}
