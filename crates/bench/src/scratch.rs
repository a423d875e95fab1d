//! The private directory every bench writes its test files in.
//!
//! Benches write into directories other users can write too (`/tmp`, `/dev/shm`, a shared
//! scratch file system). A name derived from the pid in such a directory can be taken first
//! by another user, and a symlink planted there was followed: root's `bench merge` wrote
//! through `accio-bench-merge.<pid>.accio` into a root-owned 0600 file. So each run makes
//! one directory with a random name, created exclusively and mode 0700 (the `tempfile`
//! crate), and creates its files inside it with `O_CREAT | O_EXCL | O_NOFOLLOW`: nobody
//! else can enter the directory, and a name that exists anyway is an error, never a file
//! opened through. The directory goes away with the value (end of the run, an error, a
//! panic, Ctrl-C unwinding through the bench), and [`ScratchDir::close`] reports a failed
//! removal.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A fresh, private (0700), randomly named directory inside a target directory; removed
/// with everything in it when dropped.
#[derive(Debug)]
pub(crate) struct ScratchDir {
    dir: tempfile::TempDir,
}

impl ScratchDir {
    /// Creates `PARENT/accio-bench-WHAT-XXXXXX` (random suffix, `mkdir` fails rather than
    /// reuse an existing name, mode 0700).
    pub(crate) fn new_in(parent: &Path, what: &str) -> io::Result<ScratchDir> {
        // tempfile leaves a directory's mode to the umask (0755 under the usual 022):
        // ask for 0700 (the umask can only take rights away).
        let dir = tempfile::Builder::new()
            .prefix(&format!("accio-bench-{what}-"))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(parent)?;
        Ok(ScratchDir { dir })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The random part of the directory's name, to make other names of the run (an shm
    /// address) unpredictable too.
    pub(crate) fn tag(&self) -> String {
        let name = self
            .dir
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        name.rsplit('-').next().unwrap_or_default().to_string()
    }

    /// Creates the file `name` in the directory for reading and writing, mode 0600, with
    /// `O_EXCL | O_NOFOLLOW`: an existing name (a planted symlink included) is an error.
    pub(crate) fn create(&self, name: &str) -> io::Result<(PathBuf, File)> {
        let path = self.dir.path().join(name);
        let file = create_exclusive(&path)?;
        Ok((path, file))
    }

    /// Removes the directory and its files, reporting a failure (dropping it ignores one).
    pub(crate) fn close(self) -> io::Result<()> {
        self.dir.close()
    }
}

/// Opens a new file at `path` for reading and writing (mode 0600), failing if anything
/// exists there: `O_CREAT | O_EXCL` never follows a symlink, `O_NOFOLLOW` says so twice.
pub(crate) fn create_exclusive(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_directory_is_private_random_and_removed() {
        let parent = tempfile::tempdir().unwrap();
        let a = ScratchDir::new_in(parent.path(), "t").unwrap();
        let b = ScratchDir::new_in(parent.path(), "t").unwrap();
        assert_ne!(a.path(), b.path());
        let name = a.path().file_name().unwrap().to_str().unwrap().to_string();
        assert!(name.starts_with("accio-bench-t-"), "{name}");
        assert_eq!(format!("accio-bench-t-{}", a.tag()), name);
        let meta = std::fs::symlink_metadata(a.path()).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        let (p, _f) = a.create("x").unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        let kept = a.path().to_path_buf();
        a.close().unwrap();
        assert!(!kept.exists());
        let dropped = b.path().to_path_buf();
        drop(b);
        assert!(!dropped.exists());
    }

    #[test]
    fn an_existing_name_or_a_symlink_is_refused_not_followed() {
        let parent = tempfile::tempdir().unwrap();
        let victim = parent.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let s = ScratchDir::new_in(parent.path(), "t").unwrap();
        std::os::unix::fs::symlink(&victim, s.path().join("link")).unwrap();
        let e = s.create("link").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        s.create("plain").unwrap();
        assert_eq!(
            s.create("plain").unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }
}
