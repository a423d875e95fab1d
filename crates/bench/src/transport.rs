//! Transport bench (to be written).
