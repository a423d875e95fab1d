//! The directory holding one run's test files, removed however the run ends.

use std::path::{Path, PathBuf};

use super::FsError;
use crate::scratch::ScratchDir;

/// The directory holding one run's test files: private and randomly named
/// ([`ScratchDir`]), so that no other user can plant a file or a symlink where the bench
/// writes. Removed on drop (early return, error, panic, Ctrl-C), and explicitly at the end
/// so removal errors are reported.
pub(super) struct WorkDir {
    pub(super) dir: PathBuf,
    scratch: ScratchDir,
}

impl WorkDir {
    pub(super) fn create(parent: &Path) -> Result<WorkDir, FsError> {
        match ScratchDir::new_in(parent, "fs") {
            Ok(scratch) => Ok(WorkDir {
                dir: scratch.path().to_path_buf(),
                scratch,
            }),
            Err(e) => Err(FsError::BadPath {
                path: parent.to_path_buf(),
                reason: format!("cannot create a test directory in it: {e}"),
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
        self.scratch
            .close()
            .map_err(|e| FsError::io(format!("removing {}", self.dir.display()), e))
    }
}
