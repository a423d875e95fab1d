//! Evicting test files from the page cache before a cold read, and checking it worked.
//!
//! Colfax's "cold read" (2014, §2.4) drops the caches as root (`echo 3 >
//! /proc/sys/vm/drop_caches`) and re-mounts the file system. We cannot re-mount someone's
//! file system, so the methods, best first, are:
//!
//! 1. as root: `fsync` every test file, `syncfs`, then `echo 3 > /proc/sys/vm/drop_caches`
//!    (drop_caches only drops clean pages, hence the sync first);
//! 2. otherwise: `fsync` and `posix_fadvise(POSIX_FADV_DONTNEED)` on each file;
//! 3. when pages stay cached anyway, read with O_DIRECT.
//!
//! After 1 or 2, `mincore(2)` on a mapping of each file counts the pages still resident; if
//! more than [`MAX_RESIDENT`] are, the read falls back to O_DIRECT and the method says so.
//! On tmpfs and ramfs the page cache *is* the file: its pages stay, the figure is marked
//! memory-backed, and the node-wide drop (method 1) still runs where it can so that the read
//! starts from the same state as elsewhere.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::{CacheDrop, FsError};
use accio_results::node::probe::FsInfo;

/// Largest fraction of a file's pages that may stay resident for a read to count as cold.
pub const MAX_RESIDENT: f64 = 0.01;

const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";

/// How the cache was dropped before one cold read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Dropped {
    /// Text for the figure's `method`.
    pub method: String,
    /// Read with O_DIRECT.
    pub direct: bool,
    /// Fraction of the files' pages resident after the drop (before reading), when checked.
    pub resident: Option<f64>,
}

/// Evicts `files` (each `file_size` bytes) of the file system `info` from the cache.
pub(crate) fn drop_cache(
    info: &FsInfo,
    dir: &Path,
    files: &[PathBuf],
    file_size: u64,
    choice: CacheDrop,
    direct_everywhere: bool,
) -> Result<Dropped, FsError> {
    if direct_everywhere {
        return Ok(Dropped {
            method: "O_DIRECT in every mode (--direct): the page cache is bypassed".into(),
            direct: true,
            resident: None,
        });
    }
    if info.memory_backed() {
        // The pages are the file's only copy and stay. The node-wide drop still runs where
        // it can, so the read starts from the same state as on any other file system (and
        // as fio's equivalent job): reading tmpfs right after writing it was measured 30%
        // slower here than reading it after a drop_caches.
        let dropped = matches!(choice, CacheDrop::Auto | CacheDrop::DropCaches)
            && drop_caches(dir, files).is_ok();
        let method = if dropped {
            format!(
                "sync + echo 3 > {DROP_CACHES}; memory-backed ({}): the file's pages are its \
                 only copy and stay cached",
                info.fs_type
            )
        } else {
            format!(
                "none: memory-backed ({}), the cached pages are the file's only copy",
                info.fs_type
            )
        };
        return Ok(Dropped {
            method,
            direct: false,
            resident: None,
        });
    }
    let mut notes: Vec<String> = Vec::new();
    // drop_caches empties every cache on the node; the other methods only this file
    // system's, and a loop device reads its backing file through the host's cache.
    let loop_note = loop_cached(info).then(|| {
        "loop device without direct I/O: the cache of its backing file may still hold the data"
            .to_string()
    });
    let method = match choice {
        CacheDrop::Direct => {
            let mut method = "O_DIRECT (chosen with --drop direct; no cache drop)".to_string();
            if let Some(n) = loop_note {
                method = format!("{method} ({n})");
            }
            return Ok(Dropped {
                method,
                direct: true,
                resident: None,
            });
        }
        CacheDrop::DropCaches => {
            drop_caches(dir, files)?;
            "sync + echo 3 > /proc/sys/vm/drop_caches".to_string()
        }
        CacheDrop::Fadvise => {
            fadvise(files)?;
            notes.extend(loop_note);
            "fsync + posix_fadvise(POSIX_FADV_DONTNEED) per file".to_string()
        }
        CacheDrop::Auto => match drop_caches(dir, files) {
            Ok(()) => "sync + echo 3 > /proc/sys/vm/drop_caches".to_string(),
            Err(e) => {
                notes.push(format!("drop_caches unavailable ({e})"));
                fadvise(files)?;
                notes.extend(loop_note);
                "fsync + posix_fadvise(POSIX_FADV_DONTNEED) per file".to_string()
            }
        },
    };
    let resident = resident_fraction(files, file_size)?;
    let mut method = method;
    let direct = resident > MAX_RESIDENT;
    if direct {
        method.push_str(&format!(
            "; {:.0}% of pages stayed cached, so the read used O_DIRECT",
            resident * 100.0
        ));
    }
    if info.backing == accio_results::node::probe::Backing::Network {
        notes.push("client cache only: the server's cache was not dropped".into());
    }
    if !notes.is_empty() {
        method = format!("{method} ({})", notes.join("; "));
    }
    Ok(Dropped {
        method,
        direct,
        resident: Some(resident),
    })
}

/// Whether `info` sits on a loop device that reads its backing file through the page
/// cache (`/sys/block/loopN/loop/dio` is 0).
fn loop_cached(info: &FsInfo) -> bool {
    let Some(dev) = info
        .mount_source
        .as_deref()
        .and_then(|s| s.strip_prefix("/dev/"))
        .filter(|d| d.starts_with("loop"))
    else {
        return false;
    };
    std::fs::read_to_string(format!("/sys/block/{dev}/loop/dio"))
        .map(|s| s.trim() == "0")
        .unwrap_or(false)
}

fn open_ro(path: &Path) -> Result<File, FsError> {
    OpenOptions::new()
        .read(true)
        .open(path)
        .map_err(|e| FsError::Io {
            what: format!("opening {} to evict it from the cache", path.display()),
            source: e,
        })
}

fn fsync(f: &File, path: &Path) -> Result<(), FsError> {
    f.sync_all().map_err(|e| FsError::Io {
        what: format!("fsync of {}", path.display()),
        source: e,
    })
}

/// Root's method: make every page clean, then ask the kernel to drop clean caches.
fn drop_caches(dir: &Path, files: &[PathBuf]) -> Result<(), FsError> {
    // Open first: a non-root user (or a read-only /proc in a container) fails here, before
    // paying for any sync.
    let mut ctl = OpenOptions::new()
        .write(true)
        .open(DROP_CACHES)
        .map_err(|e| FsError::Io {
            what: format!("opening {DROP_CACHES}"),
            source: e,
        })?;
    for f in files {
        fsync(&open_ro(f)?, f)?;
    }
    // syncfs rather than sync(2): only the file system under test needs to be clean, and
    // other users' dirty data elsewhere would only make the drop slow.
    let d = File::open(dir).map_err(|e| FsError::Io {
        what: format!("opening {}", dir.display()),
        source: e,
    })?;
    // SAFETY: `d` is an open descriptor for the duration of the call.
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        return Err(FsError::Io {
            what: format!("syncfs on {}", dir.display()),
            source: std::io::Error::last_os_error(),
        });
    }
    ctl.write_all(b"3\n").map_err(|e| FsError::Io {
        what: format!("writing 3 to {DROP_CACHES}"),
        source: e,
    })
}

/// Anyone's method: `posix_fadvise(DONTNEED)` after `fsync` (dirty pages are not dropped).
fn fadvise(files: &[PathBuf]) -> Result<(), FsError> {
    for path in files {
        let f = open_ro(path)?;
        fsync(&f, path)?;
        // SAFETY: plain syscall on an open descriptor; offset 0, length 0 = whole file.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            return Err(FsError::Io {
                what: format!("posix_fadvise(DONTNEED) on {}", path.display()),
                source: std::io::Error::from_raw_os_error(rc),
            });
        }
    }
    Ok(())
}

/// Fraction of the pages of `files` (each `file_size` bytes) resident in memory.
pub(crate) fn resident_fraction(files: &[PathBuf], file_size: u64) -> Result<f64, FsError> {
    let page = 4096usize;
    let len = file_size as usize;
    if len == 0 || files.is_empty() {
        return Ok(0.0);
    }
    let pages = len.div_ceil(page);
    let mut vec = vec![0u8; pages];
    let mut resident = 0usize;
    for path in files {
        let f = open_ro(path)?;
        let err = |what: &str| FsError::Io {
            what: format!("{what} of {} to count its cached pages", path.display()),
            source: std::io::Error::last_os_error(),
        };
        // SAFETY: a fresh read-only shared mapping of an open file; the kernel picks the
        // address. Mapping does not fault pages in, so it does not change what it measures.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(err("mmap"));
        }
        // SAFETY: `addr..addr+len` is the mapping just created; `vec` has one byte per page.
        let rc = unsafe { libc::mincore(addr, len, vec.as_mut_ptr()) };
        let e = (rc != 0).then(|| err("mincore"));
        // SAFETY: unmapping exactly the mapping created above; nothing references it.
        unsafe { libc::munmap(addr, len) };
        if let Some(e) = e {
            return Err(e);
        }
        resident += vec.iter().filter(|&&b| b & 1 != 0).count();
    }
    Ok(resident as f64 / (pages * files.len()) as f64)
}
