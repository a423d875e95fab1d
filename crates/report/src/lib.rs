//! accio-report (being written).
