//! The CSV exporter: one row per figure, for spreadsheets and scripts (as hyperfine's
//! `--export-csv`). Columns: bench, metric, label, unit, median, min, max, samples,
//! ceiling, ceiling_value, ratio (of the ceiling, 1 = at it), params (the figure's
//! parameters as one JSON object). Fields are quoted as RFC 4180 asks.

use accio_results::model::Report;

/// The column names, in order.
pub const HEADER: [&str; 12] = [
    "bench",
    "metric",
    "label",
    "unit",
    "median",
    "min",
    "max",
    "samples",
    "ceiling",
    "ceiling_value",
    "ratio",
    "params",
];

/// The figures of `report` as CSV, with a header line.
pub fn csv(report: &Report) -> String {
    let mut out = HEADER.join(",");
    out.push('\n');
    for f in &report.figures {
        let c = f.ceiling.as_ref();
        let num = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
        let row = [
            f.bench.clone(),
            f.metric.clone(),
            f.label(),
            f.unit.to_string(),
            f.summary.median.to_string(),
            f.summary.min.to_string(),
            f.summary.max.to_string(),
            f.summary.n.to_string(),
            c.map_or(String::new(), |c| c.name.clone()),
            num(c.map(|c| c.value)),
            num(c.and_then(|c| c.ratio)),
            serde_json::to_string(&f.params).unwrap_or_default(),
        ];
        let fields: Vec<String> = row.iter().map(|v| field(v)).collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// One field, quoted when it holds a comma, a quote or a line break.
fn field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::model::{CeilingSource, Figure, Unit};

    #[test]
    fn one_row_per_figure_with_quoted_params() {
        let mut r = Report::new();
        r.figures.push(
            Figure::new("transport", "stream_bw", Unit::GBps, vec![9.0, 10.0, 11.0])
                .unwrap()
                .param("backend", "shm")
                .param("size", 2u64 << 20)
                .ceiling("memcpy 2M, 1 thread", 20.0, CeilingSource::Measured),
        );
        r.figures
            .push(Figure::new("mem", "memcpy", Unit::GBps, vec![5.0]).unwrap());
        let text = csv(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], HEADER.join(","));
        assert_eq!(
            lines[1],
            "transport,stream_bw,shm stream_bw 2M,GB/s,10,9,11,3,\"memcpy 2M, 1 thread\",20,0.5,\
             \"{\"\"backend\"\":\"\"shm\"\",\"\"size\"\":2097152}\""
        );
        assert_eq!(lines[2], "mem,memcpy,mem memcpy,GB/s,5,5,5,1,,,,{}");
    }
}
