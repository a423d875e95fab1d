//! The result model: one versioned JSON document that every bench writes and every
//! renderer reads.
//!
//! A [`Report`] holds [`Figure`]s. Each figure is one measured quantity (e.g. "shm streaming
//! bandwidth at 2 MiB") with its unit, its samples summarized, the parameters that identify
//! it, how it was measured, and the [`Ceiling`] it should be read against (measured in the
//! same run, or theoretical) with the ratio. Figures are appended as they are measured and
//! the file is rewritten each time, so an interrupted run keeps what it measured.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::stats::Summary;

/// Name of the schema, stored in every document.
pub const SCHEMA: &str = "accio-results";
/// Version of the schema; bumped on incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Units used by figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unit {
    /// Bandwidth, 10^9 bytes per second.
    #[serde(rename = "GB/s")]
    GBps,
    /// Time, microseconds.
    #[serde(rename = "us")]
    Micros,
    /// Time, milliseconds.
    #[serde(rename = "ms")]
    Millis,
    /// Operations (messages, items) per second, in millions.
    #[serde(rename = "Mop/s")]
    MopsPerSec,
}

impl std::fmt::Display for Unit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unit::GBps => "GB/s",
            Unit::Micros => "us",
            Unit::Millis => "ms",
            Unit::MopsPerSec => "Mop/s",
        })
    }
}

/// Where a ceiling comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CeilingSource {
    /// Measured on this node in the same run (e.g. memcpy bandwidth).
    Measured,
    /// Computed from specifications (e.g. PCIe lanes x rate x encoding).
    Theoretical,
}

/// The limit a figure should be compared with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ceiling {
    /// What the ceiling is, e.g. `memcpy 2M, 1 thread`.
    pub name: String,
    /// Its value, in the figure's unit.
    pub value: f64,
    /// Measured or theoretical.
    pub source: CeilingSource,
    /// For bandwidths: figure median / ceiling (higher is better, 1.0 = at the ceiling).
    /// For times: ceiling / figure median. `None` when the ceiling is zero.
    pub ratio: Option<f64>,
}

/// One measured quantity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// The bench that produced it (`transport`, `mem`, `fs`, ...).
    pub bench: String,
    /// The quantity (`latency`, `stream_bw`, `rma_write_bw`, `write`, ...).
    pub metric: String,
    /// Identifying parameters (`backend`, `size`, `threads`, `path`, ...).
    pub params: BTreeMap<String, Value>,
    /// Unit of `summary` and of the ceiling.
    pub unit: Unit,
    /// Median, min and max of the samples.
    pub summary: Summary,
    /// The individual samples, in the figure's unit.
    pub samples: Vec<f64>,
    /// How it was measured, when it matters (e.g. the cache-drop method).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// What to read it against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<Ceiling>,
}

impl Figure {
    /// A figure from raw samples in `unit`. Returns `None` for no (or NaN) samples.
    pub fn new(bench: &str, metric: &str, unit: Unit, samples: Vec<f64>) -> Option<Figure> {
        Some(Figure {
            bench: bench.into(),
            metric: metric.into(),
            params: BTreeMap::new(),
            unit,
            summary: Summary::of(&samples)?,
            samples,
            method: None,
            ceiling: None,
        })
    }

    /// Adds an identifying parameter.
    pub fn param(mut self, key: &str, value: impl Into<Value>) -> Figure {
        self.params.insert(key.into(), value.into());
        self
    }

    /// Records how the figure was measured.
    pub fn method(mut self, method: impl Into<String>) -> Figure {
        self.method = Some(method.into());
        self
    }

    /// Attaches a ceiling and computes the ratio (see [`Ceiling::ratio`]).
    pub fn ceiling(mut self, name: impl Into<String>, value: f64, source: CeilingSource) -> Figure {
        let higher_is_better = matches!(self.unit, Unit::GBps | Unit::MopsPerSec);
        let median = self.summary.median;
        let ratio = if value == 0.0 || (!higher_is_better && median == 0.0) {
            None
        } else if higher_is_better {
            Some(median / value)
        } else {
            Some(value / median)
        };
        self.ceiling = Some(Ceiling {
            name: name.into(),
            value,
            source,
            ratio,
        });
        self
    }

    /// A parameter as a string, for tables (`""` when absent).
    pub fn param_str(&self, key: &str) -> String {
        match self.params.get(key) {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        }
    }
}

/// Facts about the machine the figures were measured on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Host name.
    pub hostname: String,
    /// CPU model name.
    pub cpu: String,
    /// Online CPUs.
    pub cores: usize,
    /// Total memory in bytes.
    pub memory_bytes: u64,
    /// Kernel release.
    pub kernel: String,
}

impl Host {
    /// Reads the facts from `/proc` and `uname` (fields stay empty where unreadable).
    pub fn detect() -> Host {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_default();
        let memory_bytes = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024);
        Host {
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        }
    }
}

/// A whole run: the document written to `--json FILE`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Always [`SCHEMA_VERSION`] when written by this build.
    pub version: u32,
    /// accio version that wrote it.
    pub accio_version: String,
    /// Start of the run, seconds since the Unix epoch.
    pub started_unix: u64,
    /// The command line that produced it.
    pub command: Vec<String>,
    /// The machine.
    pub host: Host,
    /// The figures, in the order measured.
    pub figures: Vec<Figure>,
    /// Things the reader should know (noisy samples, a figure above its ceiling, ...).
    pub warnings: Vec<String>,
}

impl Report {
    /// An empty report for this machine and command line.
    pub fn new() -> Report {
        Report {
            schema: SCHEMA.into(),
            version: SCHEMA_VERSION,
            accio_version: env!("CARGO_PKG_VERSION").into(),
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            command: std::env::args().collect(),
            host: Host::detect(),
            figures: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Figures of one bench and metric, in order.
    pub fn select<'a>(
        &'a self,
        bench: &'a str,
        metric: &'a str,
    ) -> impl Iterator<Item = &'a Figure> + 'a {
        self.figures
            .iter()
            .filter(move |f| f.bench == bench && f.metric == metric)
    }
}

impl Default for Report {
    fn default() -> Self {
        Report::new()
    }
}

/// Collects figures and, when given a path, rewrites the JSON file after every addition
/// (write to a temporary file, then rename), so a killed run leaves a valid document.
#[derive(Debug)]
pub struct Recorder {
    report: Report,
    path: Option<PathBuf>,
}

impl Recorder {
    /// A recorder writing to `path` (or only keeping figures in memory for `None`).
    pub fn new(path: Option<&Path>) -> io::Result<Recorder> {
        let r = Recorder {
            report: Report::new(),
            path: path.map(Path::to_path_buf),
        };
        r.flush()?;
        Ok(r)
    }

    /// Adds a figure and persists the report.
    pub fn push(&mut self, figure: Figure) -> io::Result<()> {
        self.report.figures.push(figure);
        self.flush()
    }

    /// Adds a warning and persists the report.
    pub fn warn(&mut self, warning: impl Into<String>) -> io::Result<()> {
        self.report.warnings.push(warning.into());
        self.flush()
    }

    /// The report so far.
    pub fn report(&self) -> &Report {
        &self.report
    }

    fn flush(&self) -> io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut tmp = path.clone().into_os_string();
        tmp.push(".tmp");
        let text = serde_json::to_vec_pretty(&self.report).map_err(io::Error::other)?;
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_ratio_direction_depends_on_unit() {
        let bw = Figure::new("t", "bw", Unit::GBps, vec![8.0, 9.0, 10.0])
            .unwrap()
            .ceiling("memcpy", 10.0, CeilingSource::Measured);
        assert_eq!(bw.ceiling.unwrap().ratio, Some(0.9));
        let lat = Figure::new("t", "lat", Unit::Micros, vec![2.0])
            .unwrap()
            .ceiling("floor", 1.0, CeilingSource::Theoretical);
        assert_eq!(lat.ceiling.unwrap().ratio, Some(0.5));
    }

    #[test]
    fn recorder_persists_after_each_figure_and_round_trips() {
        let dir = std::env::temp_dir().join(format!("accio-model-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.json");
        let mut rec = Recorder::new(Some(&path)).unwrap();
        let fig = Figure::new("mem", "memcpy", Unit::GBps, vec![1.0, 2.0, 3.0])
            .unwrap()
            .param("size", 4096)
            .param("backend", "shm");
        rec.push(fig.clone()).unwrap();
        let back: Report = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back.figures, vec![fig]);
        assert_eq!(
            (back.schema.as_str(), back.version),
            (SCHEMA, SCHEMA_VERSION)
        );
        assert_eq!(back.figures[0].param_str("size"), "4096");
        assert_eq!(back.figures[0].param_str("backend"), "shm");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
