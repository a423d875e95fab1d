//! The plain-text exporter: the tables `accio` prints on a terminal, one module per bench,
//! each reading only a [`accio_results::model::Report`] (so a saved JSON prints the same
//! tables), all built with one table builder ([`table::render`]).

pub mod coalesce;
pub mod fs;
pub mod info;
pub mod mem;
pub mod merge;
pub mod table;
pub mod transport;
