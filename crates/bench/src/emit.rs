//! The two things every bench does with a result: record it and report it as an
//! [`Event`], in that order, so a caller that sees the event finds it in the report.

use std::io;

use accio_results::event::Event;
use accio_results::hazard::Hazard;
use accio_results::model::{Figure, Recorder};

/// Records `fig` and reports it as [`Event::Figure`].
pub(crate) fn figure(
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    fig: Figure,
) -> io::Result<()> {
    rec.push(fig)?;
    if let Some(f) = rec.report().figures.last() {
        events(Event::Figure(f));
    }
    Ok(())
}

/// Records `hazard` (its text among the warnings) and reports it as [`Event::Warning`].
pub(crate) fn hazard(
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    hazard: Hazard,
) -> io::Result<()> {
    events(Event::Warning(&hazard));
    rec.hazard(hazard)
}
