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

use crate::hazard::{Hazard, HazardKind};
use crate::stats::Summary;

/// Name of the schema, stored in every document.
pub const SCHEMA: &str = "accio-results";
/// Version of the schema; bumped on incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Parameters that describe the environment of a figure (the file system, the space on
/// it, how the bench was configured underneath) rather than identify it.
pub const CONTEXT_PARAMS: &[&str] = &[
    "fs_type",
    "backing",
    "memory_backed",
    "persistent",
    "shared",
    "root_to_mount",
    "mount_point",
    "mount_source",
    "mount_options",
    "capacity_bytes",
    "free_bytes",
    "bytes",
    "file_size",
    "record_size",
    "engine",
    "direct",
    "resident_after_drop",
    "iodepth",
    "for",
    "gpu_name",
];

/// Numeric parameters that identify a figure (a sweep's x axis) rather than report a
/// quantity; see [`Figure::identifying`].
pub const NUMERIC_IDENTIFIERS: &[&str] = &[
    "size",
    "threads",
    "producers",
    "senders",
    "workers",
    "item",
    "item_size",
    "batch",
    "footprint",
    "rank",
    "ranks",
    "peer",
];

/// Parameters a [`Figure::label`] names first, in this order.
const LABEL_FIRST: &[&str] = &[
    "src",
    "dst",
    "pattern",
    "mode",
    "item",
    "geometry",
    "footprint",
    "placement",
];

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

/// How far a figure's every sample may pass its ceiling before that is a measurement error
/// rather than noise: 5% (the spread of repeated memcpy measurements on a quiet machine).
pub const CEILING_TOLERANCE: f64 = 0.05;

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

impl Hazard {
    /// The same, about `figures`.
    pub fn about<'a>(mut self, figures: impl IntoIterator<Item = &'a Figure>) -> Hazard {
        self.figures.extend(figures.into_iter().map(Figure::key));
        self
    }

    /// Whether this hazard is of `kind` and about `figure`.
    pub fn covers(&self, kind: HazardKind, figure: &Figure) -> bool {
        self.kind == kind && self.bench == figure.bench && self.figures.contains(&figure.key())
    }
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

    /// Whether a larger median is better: bandwidths and rates (times are better smaller).
    pub fn higher_is_better(&self) -> bool {
        matches!(self.unit, Unit::GBps | Unit::MopsPerSec)
    }

    /// Whether the figure passes its ceiling beyond the noise: even its slowest sample
    /// beats the ceiling by more than [`CEILING_TOLERANCE`] (for times: even its slowest
    /// sample is that much below the floor). Such a figure is a measurement error (the
    /// ceiling is of another regime, or was measured in a slow phase), not a success
    /// (`docs/CEILINGS.md`).
    pub fn beyond_ceiling(&self) -> bool {
        let Some(c) = &self.ceiling else {
            return false;
        };
        if self.higher_is_better() {
            self.summary.min > c.value * (1.0 + CEILING_TOLERANCE)
        } else {
            self.summary.max * (1.0 + CEILING_TOLERANCE) < c.value
        }
    }

    /// A numeric parameter (`size`, `threads`, ...), when present and a number.
    pub fn param_f64(&self, key: &str) -> Option<f64> {
        self.params.get(key).and_then(Value::as_f64)
    }

    /// A whole-number parameter (byte counts, ...), when present and one.
    pub fn param_u64(&self, key: &str) -> Option<u64> {
        self.params.get(key).and_then(Value::as_u64)
    }

    /// The parameters that identify the figure (which backend, path, size, thread count,
    /// mode, ...) rather than describe the environment (`fs_type`, `free_bytes`, ...) or
    /// report a measured or derived quantity. Without a declaration from each bench this is
    /// a rule of thumb: strings and booleans identify, and of the numbers only the sweep
    /// parameters (`size`, `threads`, `producers`, `item`, ...); other numbers (byte counts,
    /// iteration counts, fractions) are quantities. In key order.
    pub fn identifying(&self) -> Vec<(&str, &Value)> {
        self.params
            .iter()
            .filter(|(k, v)| {
                let k = k.as_str();
                !CONTEXT_PARAMS.contains(&k)
                    && match v {
                        Value::String(_) | Value::Bool(_) => true,
                        Value::Number(n) => {
                            (n.is_u64() || n.is_i64()) && NUMERIC_IDENTIFIERS.contains(&k)
                        }
                        _ => false,
                    }
            })
            .map(|(k, v)| (k.as_str(), v))
            .collect()
    }

    /// The figure's identity: bench, metric and every [identifying](Figure::identifying)
    /// parameter, e.g. `fs/write{"path":"/dev/shm","threads":2}`. Two figures of one run
    /// with the same key measured the same thing.
    pub fn key(&self) -> String {
        let ids: serde_json::Map<String, Value> = self
            .identifying()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        format!("{}/{}{}", self.bench, self.metric, Value::Object(ids))
    }

    /// A short name for the figure in lists and warnings, without its value: `shm
    /// latency 8`, `fs /dev/shm write x2`, `mem memcpy 256M x1`. Backend, path, size and
    /// thread or producer count come first in a fixed order, then up to four other
    /// [identifying](Figure::identifying) parameters as `key=value`, the usual ones
    /// (pattern, mode, ...) first. The metric is left out where it repeats the bench name.
    pub fn label(&self) -> String {
        const MAX_OTHER: usize = 5;
        let mut parts: Vec<String> = Vec::new();
        let backend = self.param_str("backend");
        let path = self.param_str("path");
        if self.bench == "transport" && !backend.is_empty() {
            parts.push(backend);
        } else {
            parts.push(self.bench.clone());
            if !backend.is_empty() {
                parts.push(backend);
            }
        }
        if !path.is_empty() {
            parts.push(path);
        }
        if self.metric != self.bench {
            parts.push(self.metric.clone());
        }
        if let Some(s) = self.param_u64("size") {
            parts.push(crate::size::format_size(s));
        }
        if let Some(n) = self.param_u64("threads") {
            parts.push(format!("x{n}"));
        }
        if let Some(n) = self.param_u64("producers") {
            parts.push(format!("producers={n}"));
        }
        let mut other: Vec<(&str, &Value)> = self
            .identifying()
            .into_iter()
            .filter(|(k, _)| !["backend", "path", "size", "threads", "producers"].contains(k))
            .collect();
        other.sort_by_key(|(k, _)| {
            LABEL_FIRST
                .iter()
                .position(|f| f == k)
                .unwrap_or(LABEL_FIRST.len())
        });
        for (k, v) in other.into_iter().take(MAX_OTHER) {
            match v {
                Value::String(s) => parts.push(format!("{k}={s}")),
                // Byte counts in the size notation (`footprint=8M`).
                Value::Number(n) if k == "footprint" && n.is_u64() => parts.push(format!(
                    "{k}={}",
                    crate::size::format_size(n.as_u64().unwrap_or(0))
                )),
                v => parts.push(format!("{k}={v}")),
            }
        }
        parts.join(" ")
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
    /// The hazards the benches found while they ran, typed (each one's text is also in
    /// `warnings`), so that the post-run analysis knows what a bench already judged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hazards: Vec<Hazard>,
    /// What the node is (CPU, memory, file systems, PCIe links, GPUs), when the run
    /// recorded it (`accio bench` does; single benches leave it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<crate::node::NodeInfo>,
}

/// The values of parameter `key` among `figures`, each once, in order of first appearance
/// (figures without it are skipped).
pub fn distinct_param<'a>(figures: impl Iterator<Item = &'a Figure>, key: &str) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for f in figures {
        let p = f.param_str(key);
        if !p.is_empty() && !v.contains(&p) {
            v.push(p);
        }
    }
    v
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
            hazards: Vec::new(),
            info: None,
        }
    }

    /// Parses a results document, checking that it is one ([`SCHEMA`]) and of a version
    /// this build reads (1 to [`SCHEMA_VERSION`]). `origin` names the source in errors.
    pub fn from_json(bytes: &[u8], origin: &str) -> Result<Report, ReadError> {
        #[derive(Deserialize)]
        struct Head {
            schema: Option<String>,
            version: Option<u32>,
        }
        let head: Head = serde_json::from_slice(bytes).map_err(|e| ReadError::Json {
            origin: origin.into(),
            cause: e,
        })?;
        if head.schema.as_deref() != Some(SCHEMA) {
            return Err(ReadError::NotResults {
                origin: origin.into(),
                found: head.schema,
            });
        }
        match head.version {
            Some(v) if (1..=SCHEMA_VERSION).contains(&v) => {}
            found => {
                return Err(ReadError::Version {
                    origin: origin.into(),
                    found,
                })
            }
        }
        serde_json::from_slice(bytes).map_err(|e| ReadError::Json {
            origin: origin.into(),
            cause: e,
        })
    }

    /// Reads a results file written by [`Recorder`] (see [`Report::from_json`]).
    pub fn read(path: &Path) -> Result<Report, ReadError> {
        let origin = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| ReadError::Io {
            origin: origin.clone(),
            cause: e,
        })?;
        Report::from_json(&bytes, &origin)
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

/// Why a results document could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file could not be read.
    #[error("reading {origin}: {cause}")]
    Io {
        /// The file.
        origin: String,
        /// The OS error (named `cause`, not `source`: the message already includes it, and
        /// a source would print it twice in a `{:#}` error chain).
        cause: io::Error,
    },
    /// Not JSON, or JSON that does not fit the result model.
    #[error("{origin} is not a valid accio results document: {cause}")]
    Json {
        /// The file.
        origin: String,
        /// What serde found.
        cause: serde_json::Error,
    },
    /// JSON, but not an accio results document.
    #[error("{origin} is not an accio results document (schema {}, expected {SCHEMA:?})",
            found.as_deref().map_or("missing".to_string(), |s| format!("{s:?}")))]
    NotResults {
        /// The file.
        origin: String,
        /// Its `schema` field.
        found: Option<String>,
    },
    /// A schema version this build cannot read.
    #[error("{origin} has results schema version {}, this accio reads versions 1 to {SCHEMA_VERSION}",
            found.map_or("missing".to_string(), |v| v.to_string()))]
    Version {
        /// The file.
        origin: String,
        /// Its `version` field.
        found: Option<u32>,
    },
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

    /// Adds a hazard (its text to the warnings, the typed value to the hazards) and
    /// persists the report.
    pub fn hazard(&mut self, hazard: Hazard) -> io::Result<()> {
        self.report.warnings.push(hazard.text.clone());
        self.report.hazards.push(hazard);
        self.flush()
    }

    /// The report so far.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// Records what the node is ([`Report::info`]) and persists the report.
    pub fn set_info(&mut self, info: crate::node::NodeInfo) -> io::Result<()> {
        self.report.info = Some(info);
        self.flush()
    }

    /// The file the report is rewritten to, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
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
    fn beyond_the_ceiling_means_even_the_slowest_sample_passes_it() {
        let bw = |s: &[f64], c: f64| {
            Figure::new("x", "bw", Unit::GBps, s.to_vec())
                .unwrap()
                .ceiling("c", c, CeilingSource::Measured)
        };
        // Median above, but the range reaches below: noise.
        assert!(!bw(&[9.0, 11.0, 12.0], 10.0).beyond_ceiling());
        // Every sample more than 5% above.
        assert!(bw(&[10.6, 11.0, 12.0], 10.0).beyond_ceiling());
        let lat = |s: &[f64], floor: f64| {
            Figure::new("x", "latency", Unit::Micros, s.to_vec())
                .unwrap()
                .ceiling("floor", floor, CeilingSource::Measured)
        };
        assert!(!lat(&[0.5, 0.9, 1.0], 1.0).beyond_ceiling());
        assert!(lat(&[0.5, 0.6, 0.9], 1.0).beyond_ceiling());
        assert!(!Figure::new("x", "bw", Unit::GBps, vec![1.0])
            .unwrap()
            .beyond_ceiling());
    }

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

    #[test]
    fn reading_checks_schema_and_version_and_keeps_version_1() {
        let mut r = Report::new();
        r.figures
            .push(Figure::new("mem", "memcpy", Unit::GBps, vec![1.0]).unwrap());
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(Report::from_json(text.as_bytes(), "r.json").unwrap(), r);
        // A version-1 document without the newer optional fields still reads.
        let v1 = r#"{"schema":"accio-results","version":1,"accio_version":"0.1.0",
            "started_unix":1,"command":["accio"],"host":{"hostname":"h","cpu":"c","cores":2,
            "memory_bytes":1,"kernel":"k"},"figures":[],"warnings":[]}"#;
        let back = Report::from_json(v1.as_bytes(), "v1.json").unwrap();
        assert!(back.info.is_none() && back.figures.is_empty());
        let e = Report::from_json(br#"{"schema":"other","version":1}"#, "x.json").unwrap_err();
        assert_eq!(
            e.to_string(),
            "x.json is not an accio results document (schema \"other\", expected \"accio-results\")"
        );
        let e =
            Report::from_json(br#"{"schema":"accio-results","version":99}"#, "y.json").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("y.json has results schema version 99, this accio reads versions 1 to {SCHEMA_VERSION}")
        );
        let e = Report::from_json(b"{", "z.json").unwrap_err();
        assert!(e
            .to_string()
            .starts_with("z.json is not a valid accio results document: "));
        let e = Report::read(Path::new("/nonexistent/r.json")).unwrap_err();
        assert!(
            e.to_string().starts_with("reading /nonexistent/r.json: "),
            "{e}"
        );
    }

    #[test]
    fn labels_name_the_figure_without_its_value() {
        let f =
            |bench: &str, metric: &str| Figure::new(bench, metric, Unit::GBps, vec![1.0]).unwrap();
        assert_eq!(
            f("transport", "latency")
                .param("backend", "shm")
                .param("size", 8)
                .label(),
            "shm latency 8"
        );
        assert_eq!(
            f("fs", "write")
                .param("path", "/dev/shm")
                .param("threads", 2)
                .param("fs_type", "tmpfs")
                .label(),
            "fs /dev/shm write x2"
        );
        assert_eq!(
            f("mem", "memcpy")
                .param("size", 256u64 << 20)
                .param("threads", 1)
                .label(),
            "mem memcpy 256M x1"
        );
        assert_eq!(
            f("merge", "throughput")
                .param("producers", 8)
                .param("sink", "arrow")
                .label(),
            "merge throughput producers=8 sink=arrow"
        );
    }
}
