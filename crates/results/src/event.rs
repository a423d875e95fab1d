//! What a running bench tells its caller: one event type for every bench.
//!
//! Every bench takes `&mut dyn FnMut(Event<'_>)` and reports through it: its plan when it
//! starts, a step line, how much of the plan is done, each figure as it is recorded, each
//! hazard, what it skipped. Progress bars, plain progress lines and the default suite read
//! these values; none of them reads a bench's message text to learn where the bench is.

use crate::hazard::Hazard;
use crate::model::Figure;

/// One thing a running bench reports.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The bench starts; `total` is its planned work in the units of [`Event::Advanced`]
    /// (0 when it cannot be known in advance: a spinner rather than a bar).
    Started {
        /// The bench's name (`mem`, `fs`, `transport`, `merge`, `coalesce`).
        bench: &'static str,
        /// Planned work units.
        total: u64,
    },
    /// What the bench is doing now, as a line for the user (a path it probes, a backend
    /// it starts, a sweep it begins).
    Step(&'a str),
    /// `n` more units of the planned work are done.
    Advanced(u64),
    /// A figure was measured and recorded.
    Figure(&'a Figure),
    /// A hazard was found (and recorded in the report's warnings).
    Warning(&'a Hazard),
    /// Something the user asked for is not measured, and why (also recorded as a hazard
    /// where it concerns the results).
    Skipped(&'a str),
    /// A remark on the options (an ignored flag, a default chosen).
    Note(&'a str),
    /// The bench finished (successfully or not; the caller has its result).
    Done,
}
