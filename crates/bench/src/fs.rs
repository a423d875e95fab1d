//! File-system bench (to be written).
