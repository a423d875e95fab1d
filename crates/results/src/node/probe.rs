//! What a directory is: its file system type (from the `statfs` magic number), capacity and
//! free space (`statvfs`), mount point, source and options (`/proc/self/mountinfo`), and what
//! backs it (memory, a block device, the network). These are the "properties" rows of
//! Colfax's Table 1 (Vladimirov et al., *File I/O on Intel Xeon Phi coprocessors*, 2014).

use std::ffi::CString;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why a directory could not be probed. Its messages name the path and the cause.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// The path is unusable: missing, not a directory, not representable.
    #[error("{}: {reason}", path.display())]
    BadPath {
        /// The path as given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A system call failed; `what` names the operation and the path.
    #[error("{what}: {source}")]
    Io {
        /// Operation and path, e.g. `statfs /mnt/x`.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// What holds a file system's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// RAM only (tmpfs, ramfs): the page cache *is* the file; nothing to drop, nothing kept
    /// across a reboot.
    Memory,
    /// A local block device (ext4, xfs, btrfs, ... on a disk, partition or loop device).
    Block,
    /// A server over the network (NFS, Lustre, CIFS, Ceph, GPFS, BeeGFS, 9p, virtiofs).
    Network,
    /// Could not tell (overlay, FUSE, anything unrecognised).
    Unknown,
}

impl Backing {
    /// Name used in JSON and tables.
    pub fn name(self) -> &'static str {
        match self {
            Backing::Memory => "memory",
            Backing::Block => "block",
            Backing::Network => "network",
            Backing::Unknown => "unknown",
        }
    }

    /// Whether data survives a reboot of this node (`None`: unknown).
    pub fn persistent(self) -> Option<bool> {
        match self {
            Backing::Memory => Some(false),
            Backing::Block | Backing::Network => Some(true),
            Backing::Unknown => None,
        }
    }

    /// Whether other hosts can see the same files (`None`: unknown).
    pub fn shared(self) -> Option<bool> {
        match self {
            Backing::Memory | Backing::Block => Some(false),
            Backing::Network => Some(true),
            Backing::Unknown => None,
        }
    }
}

/// Facts about one directory under test.
#[derive(Clone, Debug)]
pub struct FsInfo {
    /// The directory as given.
    pub path: PathBuf,
    /// File system type: the name of the `statfs` magic number, else the type in
    /// mountinfo, else the magic in hex.
    pub fs_type: String,
    /// `statfs().f_type`.
    pub magic: u64,
    /// What holds the data.
    pub backing: Backing,
    /// Mount point holding the directory (from mountinfo).
    pub mount_point: Option<PathBuf>,
    /// Mount source (device, server:/export, or a name like `tmpfs`).
    pub mount_source: Option<String>,
    /// Per-mount and super-block options joined (e.g. `rw,relatime,size=24684096k`).
    pub mount_options: Option<String>,
    /// Total size in bytes; `None` where the file system reports none (ramfs).
    pub capacity: Option<u64>,
    /// Bytes available to unprivileged users; `None` together with `capacity`.
    pub free: Option<u64>,
    /// Mounted read-only (`ST_RDONLY`).
    pub read_only: bool,
}

impl FsInfo {
    /// True for tmpfs/ramfs-like file systems.
    pub fn memory_backed(&self) -> bool {
        self.backing == Backing::Memory
    }

    /// Whether creating such a file system needs root: Colfax's "requires root access" row.
    /// tmpfs is mounted at /dev/shm on every Linux system (and unprivileged user namespaces
    /// may mount more); ramfs, block and network file systems need `mount` as root unless
    /// the mount table lets users mount it (`user`/`users` option) or it is FUSE.
    pub fn root_to_mount(&self) -> bool {
        let opts = self.mount_options.as_deref().unwrap_or("");
        let user_mountable = opts.split(',').any(|o| o == "user" || o == "users");
        !(self.fs_type == "tmpfs" || self.fs_type.starts_with("fuse") || user_mountable)
    }
}

/// Name of a `statfs` magic number (from `linux/magic.h` and the file systems' sources).
pub fn magic_name(magic: u64) -> Option<&'static str> {
    Some(match magic {
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        0x9584_58f6 => "hugetlbfs",
        0xEF53 => "ext4", // ext2/3/4 share the magic; mountinfo refines it
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0xF2F5_2010 => "f2fs",
        0x2FC1_2FC1 => "zfs",
        0x6969 => "nfs",
        0x0BD0_0BD0 => "lustre",
        0xFF53_4D42 => "cifs",
        0xFE53_4D42 => "smb2",
        0x00C3_6400 => "ceph",
        0x4750_4653 => "gpfs",
        0x1983_0326 => "beegfs",
        0x0102_1997 => "9p",
        0x6573_5546 => "fuse",
        0x794C_7630 => "overlay",
        0x7371_7368 => "squashfs",
        0x4d44 => "vfat",
        0x5346_544e => "ntfs",
        _ => return None,
    })
}

/// What backs a file system of type `fs_type` (a magic name or a mountinfo type).
pub fn backing_of(fs_type: &str) -> Backing {
    let base = fs_type.split('.').next().unwrap_or(fs_type);
    match base {
        "tmpfs" | "ramfs" | "hugetlbfs" | "devtmpfs" => Backing::Memory,
        "ext2" | "ext3" | "ext4" | "xfs" | "btrfs" | "f2fs" | "zfs" | "vfat" | "ntfs" | "ntfs3"
        | "exfat" | "jfs" | "reiserfs" | "bcachefs" | "squashfs" => Backing::Block,
        "nfs" | "nfs4" | "lustre" | "cifs" | "smb2" | "smb3" | "ceph" | "gpfs" | "beegfs"
        | "9p" | "virtiofs" | "glusterfs" | "afs" | "orangefs" => Backing::Network,
        _ => Backing::Unknown,
    }
}

/// One line of `/proc/self/mountinfo` (see `proc(5)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// `major:minor` of the file system's device (`st_dev`).
    pub dev: (u32, u32),
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Per-mount options (field 6).
    pub mount_options: String,
    /// File system type (after the ` - ` separator).
    pub fs_type: String,
    /// Mount source.
    pub source: String,
    /// Super-block options.
    pub super_options: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses the text of `/proc/self/mountinfo`; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let f: Vec<&str> = pre.split(' ').collect();
            let g: Vec<&str> = post.split(' ').collect();
            if f.len() < 6 || g.len() < 3 {
                return None;
            }
            let (maj, min) = f[2].split_once(':')?;
            Some(MountEntry {
                dev: (maj.parse().ok()?, min.parse().ok()?),
                mount_point: PathBuf::from(unescape(f[4])),
                mount_options: f[5].to_string(),
                fs_type: g[0].to_string(),
                source: unescape(g[1]),
                super_options: g[2].to_string(),
            })
        })
        .collect()
}

/// The mount holding `canonical` (a canonical path on device `dev`): among entries of that
/// device, the one with the longest mount point that is a prefix of the path; for stacked
/// mounts on the same point, the last one listed (the visible one).
pub fn find_mount<'a>(
    entries: &'a [MountEntry],
    dev: (u32, u32),
    canonical: &Path,
) -> Option<&'a MountEntry> {
    let mut best: Option<&MountEntry> = None;
    for e in entries
        .iter()
        .filter(|e| canonical.starts_with(&e.mount_point))
    {
        let better = match best {
            None => true,
            Some(b) => {
                let (bl, el) = (
                    b.mount_point.as_os_str().len(),
                    e.mount_point.as_os_str().len(),
                );
                // Prefer the right device, then the deeper mount point, then later lines.
                (e.dev == dev && b.dev != dev) || ((e.dev == dev) == (b.dev == dev) && el >= bl)
            }
        };
        if better {
            best = Some(e);
        }
    }
    best
}

/// Merges per-mount and super-block options, dropping duplicates (`rw` appears in both).
fn merge_options(a: &str, b: &str) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for o in a.split(',').chain(b.split(',')) {
        if !o.is_empty() && !seen.contains(&o) {
            seen.push(o);
        }
    }
    seen.join(",")
}

fn cpath(path: &Path) -> Result<CString, ProbeError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| ProbeError::BadPath {
        path: path.to_path_buf(),
        reason: "contains a NUL byte".into(),
    })
}

/// `statfs(2)` and `statvfs(3)` of `path`.
fn stat_fs(path: &Path) -> Result<(libc::statfs, libc::statvfs), ProbeError> {
    let c = cpath(path)?;
    let mut sfs = MaybeUninit::<libc::statfs>::uninit();
    let mut svfs = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path; the out-pointers point to properly sized,
    // writable structs that the calls fill completely on success.
    let (r1, r2) = unsafe {
        (
            libc::statfs(c.as_ptr(), sfs.as_mut_ptr()),
            libc::statvfs(c.as_ptr(), svfs.as_mut_ptr()),
        )
    };
    if r1 != 0 || r2 != 0 {
        return Err(ProbeError::Io {
            what: format!("statfs {}", path.display()),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: both calls returned 0, so both structs are initialised.
    Ok(unsafe { (sfs.assume_init(), svfs.assume_init()) })
}

/// Probes `path`: it must exist and be a directory. Read-only and space problems are not
/// errors here (the bench checks those before measuring); this only describes.
pub fn probe(path: &Path) -> Result<FsInfo, ProbeError> {
    let bad = |reason: String| ProbeError::BadPath {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => bad("does not exist".into()),
        _ => bad(format!("cannot be examined: {e}")),
    })?;
    if !meta.is_dir() {
        return Err(bad(
            "is not a directory (give the directory to write test files in)".into(),
        ));
    }
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let (sfs, svfs) = stat_fs(path)?;
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
    let magic = (sfs.f_type as u64) & 0xFFFF_FFFF;
    let dev = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let entries =
        parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
    let mount = find_mount(&entries, dev, &canonical);
    let fs_type = match (magic_name(magic), mount) {
        // ext2/3/4 share one magic: trust mountinfo's name for those.
        (Some("ext4"), Some(m)) if m.fs_type.starts_with("ext") => m.fs_type.clone(),
        // FUSE covers many file systems; mountinfo says which (fuse.sshfs, virtiofs, ...).
        (Some("fuse"), Some(m)) => m.fs_type.clone(),
        (Some(n), _) => n.to_string(),
        (None, Some(m)) => m.fs_type.clone(),
        (None, None) => format!("{magic:#x}"),
    };
    // The statvfs fields are `c_ulong`/`fsblkcnt_t`, narrower than u64 on some targets.
    #[allow(clippy::unnecessary_cast)]
    let (frsize, blocks, bavail) = (
        svfs.f_frsize as u64,
        svfs.f_blocks as u64,
        svfs.f_bavail as u64,
    );
    let (capacity, free) = if svfs.f_blocks == 0 {
        (None, None)
    } else {
        (Some(blocks * frsize), Some(bavail * frsize))
    };
    Ok(FsInfo {
        path: path.to_path_buf(),
        backing: backing_of(&fs_type),
        fs_type,
        magic,
        mount_point: mount.map(|m| m.mount_point.clone()),
        mount_source: mount.map(|m| m.source.clone()),
        mount_options: mount.map(|m| merge_options(&m.mount_options, &m.super_options)),
        capacity,
        free,
        read_only: svfs.f_flag & libc::ST_RDONLY != 0,
    })
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
pub fn mem_available() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Whether the calling process may write into `path` (`access(2)` with `W_OK`).
pub fn writable(path: &Path) -> Result<(), std::io::Error> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24684096k
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
30 25 0:27 / /dev/shm rw,nosuid - tmpfs tmpfs rw,size=100k
44 27 7:0 / /mnt/my\\040disk rw,noatime - ext4 /dev/loop0 rw
45 27 0:50 / /scratch rw - nfs4 srv:/export rw,vers=4.2
";

    #[test]
    fn mountinfo_picks_device_then_deepest_then_last() {
        let e = parse_mountinfo(MOUNTINFO);
        assert_eq!(e.len(), 5);
        // Stacked /dev/shm: the later (visible) one wins when the device matches it.
        let m = find_mount(&e, (0, 27), Path::new("/dev/shm/x")).unwrap();
        assert_eq!(m.super_options, "rw,size=100k");
        let m = find_mount(&e, (7, 0), Path::new("/mnt/my disk/dir")).unwrap();
        assert_eq!(
            (m.fs_type.as_str(), m.source.as_str()),
            ("ext4", "/dev/loop0")
        );
        let m = find_mount(&e, (254, 0), Path::new("/tmp")).unwrap();
        assert_eq!(m.mount_point, Path::new("/"));
        assert_eq!(
            merge_options(&m.mount_options, &m.super_options),
            "rw,relatime,discard"
        );
    }

    #[test]
    fn magic_and_backing_classification() {
        assert_eq!(magic_name(0x0102_1994), Some("tmpfs"));
        assert_eq!(magic_name(0x8584_58f6), Some("ramfs"));
        assert_eq!(backing_of("tmpfs"), Backing::Memory);
        assert_eq!(backing_of("ext4"), Backing::Block);
        assert_eq!(backing_of("nfs4"), Backing::Network);
        assert_eq!(backing_of("lustre"), Backing::Network);
        assert_eq!(backing_of("overlay"), Backing::Unknown);
        assert_eq!(Backing::Network.shared(), Some(true));
        assert_eq!(Backing::Memory.persistent(), Some(false));
    }

    #[test]
    fn probe_describes_dev_shm_and_rejects_bad_paths() {
        if Path::new("/dev/shm").is_dir() {
            let i = probe(Path::new("/dev/shm")).unwrap();
            assert_eq!(i.fs_type, "tmpfs");
            assert!(i.memory_backed() && i.capacity.is_some());
        }
        let e = probe(Path::new("/nonexistent/accio"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/accio") && e.contains("does not exist"),
            "{e}"
        );
        let e = probe(Path::new("/proc/self/status"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a directory"), "{e}");
    }
}
