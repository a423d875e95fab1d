//! Node facts for `accio info` and reports (being written).
