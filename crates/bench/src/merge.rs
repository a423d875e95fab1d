//! Merge bench (being written).
