//! accio-merge (being written).
