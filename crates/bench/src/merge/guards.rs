//! Guards that clean up when the bench stops early: producer processes and output files.

use std::path::PathBuf;
use std::process::Child;

/// A producer process, killed if the bench stops early.
pub(super) struct Kid(pub(super) Child);

impl Drop for Kid {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

pub(super) struct RemoveOnDrop(pub(super) PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
