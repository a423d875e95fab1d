//! Conformance suite (to be written).
