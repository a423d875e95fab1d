//! Flags every bench shares.

use std::path::PathBuf;

use accio_bench::size::parse_sizes;

/// Flags shared by every `accio bench` subcommand.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CommonArgs {
    /// Backends to measure, comma-separated (known: shm, tcp).
    #[arg(long, value_delimiter = ',', value_parser = parse_backend, global = true)]
    pub backend: Option<Vec<String>>,
    /// Message, record or buffer sizes, comma-separated, binary suffixes (e.g. 8,4K,2M).
    #[arg(long, value_parser = parse_size_list, global = true)]
    pub sizes: Option<SizeList>,
    /// Also write the results as JSON to FILE (rewritten as figures arrive).
    #[arg(long, value_name = "FILE", global = true)]
    pub json: Option<PathBuf>,
    /// Fewer sizes and repetitions: a rough picture in a fraction of the time.
    #[arg(long, global = true)]
    pub quick: bool,
}

/// A parsed `--sizes` list (a newtype so clap treats the whole list as one value).
#[derive(Debug, Clone)]
pub struct SizeList(pub Vec<u64>);

fn parse_size_list(s: &str) -> Result<SizeList, String> {
    parse_sizes(s).map(SizeList)
}

fn parse_backend(s: &str) -> Result<String, String> {
    if accio::BACKENDS.contains(&s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "unknown backend {s:?} (known: {})",
            accio::BACKENDS.join(", ")
        ))
    }
}
