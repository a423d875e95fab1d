//! accio-coalesce (being written).
