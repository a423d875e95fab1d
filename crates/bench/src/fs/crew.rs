//! The worker crew: one thread per file, stepped through each phase by three barriers.

use std::sync::{Barrier, Mutex};

use super::io::{Phase, Span, Worker};
use super::FsError;

/// State shared between the coordinating thread and the workers.
pub(super) struct Control {
    pub(super) barrier: Barrier,
    pub(super) phase: Mutex<Phase>,
    pub(super) results: Mutex<Vec<Option<Result<Span, FsError>>>>,
    pub(super) direct: bool,
}

/// Three barriers per step: the phase is published (workers open their files, untimed),
/// everyone is ready (the clock starts in every worker), everyone is done.
pub(super) fn worker_loop(ctl: &Control, i: usize, mut w: Worker) {
    loop {
        ctl.barrier.wait();
        let phase = *ctl.phase.lock().expect("phase lock");
        if phase == Phase::Exit {
            return;
        }
        let opened = w.open(phase, ctl.direct);
        ctl.barrier.wait();
        let r = opened.and_then(|f| w.run(f, phase));
        ctl.results.lock().expect("results lock")[i] = Some(r);
        ctl.barrier.wait();
    }
}

/// The coordinator's handle on the workers; tells them to exit when dropped.
pub(super) struct Crew<'a> {
    pub(super) ctl: &'a Control,
}

impl Crew<'_> {
    /// Runs one phase on every worker; the spans, or the most telling error.
    pub(super) fn step(&self, phase: Phase) -> Result<Vec<Span>, FsError> {
        *self.ctl.phase.lock().expect("phase lock") = phase;
        self.ctl.barrier.wait();
        self.ctl.barrier.wait();
        self.ctl.barrier.wait();
        let results: Vec<_> = self
            .ctl
            .results
            .lock()
            .expect("results lock")
            .iter_mut()
            .map(|r| r.take().expect("every worker reported"))
            .collect();
        let mut spans = Vec::with_capacity(results.len());
        let mut error = None;
        for r in results {
            match r {
                Ok(s) => spans.push(s),
                // A real failure says more than the Interrupted of its siblings.
                Err(e) => {
                    if error.is_none() || matches!(error, Some(FsError::Interrupted)) {
                        error = Some(e);
                    }
                }
            }
        }
        error.map_or(Ok(spans), Err)
    }
}

impl Drop for Crew<'_> {
    fn drop(&mut self) {
        *self.ctl.phase.lock().unwrap_or_else(|p| p.into_inner()) = Phase::Exit;
        self.ctl.barrier.wait();
    }
}
