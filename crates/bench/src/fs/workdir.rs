//! The directory holding one run's test files, removed however the run ends.

use std::path::{Path, PathBuf};

use super::FsError;

/// The directory holding one run's test files; removed on drop (early return, error,
/// panic, Ctrl-C), and explicitly at the end so removal errors are reported.
pub(super) struct WorkDir {
    pub(super) dir: PathBuf,
}

impl WorkDir {
    pub(super) fn create(parent: &Path) -> Result<WorkDir, FsError> {
        let dir = parent.join(format!("accio-bench-fs.{}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => Ok(WorkDir { dir }),
            Err(e) => Err(FsError::BadPath {
                path: parent.to_path_buf(),
                reason: format!("cannot create the test directory {}: {e}", dir.display()),
            }),
        }
    }

    pub(super) fn remove_files(&self) -> Result<(), FsError> {
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| FsError::io(format!("listing {}", self.dir.display()), e))?;
        for e in entries.flatten() {
            std::fs::remove_file(e.path())
                .map_err(|err| FsError::io(format!("removing {}", e.path().display()), err))?;
        }
        Ok(())
    }

    pub(super) fn remove(self) -> Result<(), FsError> {
        let r = std::fs::remove_dir_all(&self.dir)
            .map_err(|e| FsError::io(format!("removing {}", self.dir.display()), e));
        std::mem::forget(self);
        r
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        // Best effort: the error path that got us here is what the caller reports.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
