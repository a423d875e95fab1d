//! Coalescing bench (being written).
