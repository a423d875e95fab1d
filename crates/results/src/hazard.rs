//! Measurement hazards as typed values: what kind of trouble, which bench, which figures,
//! and the sentence that tells the user what to do.
//!
//! A bench that finds a hazard while it runs records it with [`crate::model::Recorder::hazard`]:
//! the sentence goes to the report's `warnings` (what every reader shows) and the typed
//! value to its `hazards`, so that the post-run analysis (`accio_report::warnings`) knows
//! which figures a bench already judged, by kind and by figure, without reading any
//! sentence. (Tying a hazard to figures, [`Hazard::about`] and [`Hazard::covers`], lives
//! with the figures in [`crate::model`].)

use serde::{Deserialize, Serialize};

/// What a hazard is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HazardKind {
    /// A figure beyond its ceiling (or a time below its floor).
    AboveCeiling,
    /// A wide min–max spread.
    Noisy,
    /// A cold read that may have been served from a cache.
    ColdReadCached,
    /// Something was not measured (a path, a size, a backend) or measured differently
    /// than asked (unpinned, a fallback), and why.
    NotMeasured,
    /// Anything else the reader should know to trust a figure (fresh pages on a VM, a
    /// budget exceeded).
    Caution,
}

/// One hazard a bench found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hazard {
    /// What kind of hazard.
    pub kind: HazardKind,
    /// The bench that found it.
    pub bench: String,
    /// The [keys](crate::model::Figure::key) of the figures it is about (empty when it concerns no
    /// figure, e.g. a skipped size).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub figures: Vec<String>,
    /// What was seen and what to do, as the user reads it.
    pub text: String,
}

impl Hazard {
    /// A hazard of `kind` found by `bench`, about no particular figure.
    pub fn new(kind: HazardKind, bench: &str, text: impl Into<String>) -> Hazard {
        Hazard {
            kind,
            bench: bench.to_string(),
            figures: Vec::new(),
            text: text.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Figure, Unit};

    #[test]
    fn a_hazard_covers_its_figures_by_kind() {
        let a = Figure::new("fs", "write", Unit::GBps, vec![1.0, 3.0])
            .unwrap()
            .param("path", "/dev/shm")
            .param("threads", 2);
        let b = a.clone().param("path", "/tmp");
        let h = Hazard::new(HazardKind::Noisy, "fs", "noisy").about([&a]);
        assert!(h.covers(HazardKind::Noisy, &a));
        assert!(!h.covers(HazardKind::AboveCeiling, &a));
        assert!(!h.covers(HazardKind::Noisy, &b));
        let json = serde_json::to_string(&h).unwrap();
        assert!(json.contains("\"kind\":\"noisy\""), "{json}");
        assert_eq!(serde_json::from_str::<Hazard>(&json).unwrap(), h);
    }
}
