//! The tabular sinks, checked with a reader we did not write: pyarrow.
//!
//! Skipped with a message where python3 or pyarrow is missing, unless
//! `ACCIO_REQUIRE_PEER_TOOLS=1` (CI) makes a missing tool a failure.
#![cfg(feature = "arrow")]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use accio_merge::arrow_reexports::arrow_array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use accio_merge::arrow_reexports::arrow_schema::{DataType, Field, Schema, SchemaRef};
use accio_merge::{
    ArrowIpcSink, ArrowStreamSink, Merger, ParquetOptions, ParquetSink, Producer, Sink,
};

mod common;
use common::{connect_as, tmp};

const PRODUCERS: i32 = 3;
const BATCHES: i64 = 4;
const ROWS: i64 = 1000;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("producer", DataType::Int32, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("value", DataType::Float64, false),
    ]))
}

/// Batch `b` of producer `p`: ids are unique across the file.
fn batch(p: i32, b: i64) -> RecordBatch {
    let base = (i64::from(p) * BATCHES + b) * ROWS;
    let ids: Vec<i64> = (base..base + ROWS).collect();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids.clone())),
        Arc::new(Int32Array::from(vec![p; ROWS as usize])),
        Arc::new(StringArray::from(
            ids.iter().map(|i| format!("row-{i}")).collect::<Vec<_>>(),
        )),
        Arc::new(Float64Array::from(
            ids.iter().map(|&i| i as f64 * 0.5).collect::<Vec<_>>(),
        )),
    ];
    RecordBatch::try_new(schema(), cols).unwrap()
}

fn merge(addr: &str, sink: Box<dyn Sink>) -> accio_merge::MergeSummary {
    let merger = Merger::builder()
        .budget(8 << 20)
        .slot_bytes(1 << 20)
        .listen(addr, sink)
        .unwrap();
    let a = merger.addr().to_string();
    let workers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let a = a.clone();
            std::thread::spawn(move || {
                let mut prod = connect_as(&a, p as u32);
                for b in 0..BATCHES {
                    prod.write_batch(&batch(p, b)).unwrap();
                }
                prod.finish().unwrap();
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    merger.close().unwrap()
}

/// Runs `script` with python3 (the output path is argv[1]); `None` if the tools are missing
/// and not required.
fn python(script: &str, path: &Path) -> Option<String> {
    let require = std::env::var("ACCIO_REQUIRE_PEER_TOOLS").is_ok_and(|v| v == "1");
    let probe = Command::new("python3")
        .args(["-c", "import pyarrow"])
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        assert!(
            !require,
            "python3 with pyarrow is required (ACCIO_REQUIRE_PEER_TOOLS=1); run ci/install-python.sh"
        );
        eprintln!("skipped: python3 with pyarrow not found (run ci/install-python.sh)");
        return None;
    }
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pyarrow failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap().trim().to_string())
}

const CHECK: &str = r#"
import sys
rows = t.num_rows
ids = t.column("id").to_pylist()
names = t.column("name").to_pylist()
vals = t.column("value").to_pylist()
prods = sorted(set(t.column("producer").to_pylist()))
assert sorted(ids) == list(range(rows)), "ids"
assert all(n == "row-%d" % i for i, n in zip(ids, names)), "names"
assert all(v == i * 0.5 for i, v in zip(ids, vals)), "values"
# Per-producer order: each producer's ids ascend in file order.
for p in prods:
    mine = [i for i, q in zip(ids, t.column("producer").to_pylist()) if q == p]
    assert mine == sorted(mine), "order of producer %d" % p
print(rows, prods, extra)
"#;

#[test]
fn arrow_ipc_output_opens_in_pyarrow_with_every_row() {
    let path = tmp("out.arrow");
    let sink = ArrowIpcSink::create(&path, schema()).unwrap();
    let s = merge(
        &format!("shm://accio-merge-pa-{}", std::process::id()),
        Box::new(sink),
    );
    let total = PRODUCERS as u64 * BATCHES as u64 * ROWS as u64;
    assert_eq!(s.sink.rows, Some(total));
    assert_eq!(s.sink.blocks, PRODUCERS as u64 * BATCHES as u64);
    let script = format!(
        "import pyarrow.ipc as ipc, sys\nr = ipc.open_file(sys.argv[1])\nt = r.read_all()\nextra = r.num_record_batches\n{CHECK}"
    );
    if let Some(out) = python(&script, &path) {
        assert_eq!(out, format!("{total} [0, 1, 2] 12"));
    }
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn parquet_output_opens_in_pyarrow_in_row_groups() {
    let path = tmp("out.parquet");
    let sink = ParquetSink::create(
        &path,
        schema(),
        ParquetOptions {
            row_group_rows: 2500,
            ..Default::default()
        },
    )
    .unwrap();
    let s = merge("tcp://127.0.0.1:0", Box::new(sink));
    let total = PRODUCERS as u64 * BATCHES as u64 * ROWS as u64;
    assert_eq!(s.sink.rows, Some(total));
    let script = format!(
        "import pyarrow.parquet as pq, sys\nf = pq.ParquetFile(sys.argv[1])\nt = f.read()\nextra = f.num_row_groups\n{CHECK}"
    );
    if let Some(out) = python(&script, &path) {
        // 12000 rows in groups of at most 2500.
        assert_eq!(out, format!("{total} [0, 1, 2] 5"));
    }
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

#[test]
fn a_batch_of_another_schema_cuts_off_only_its_producer() {
    let path = tmp("mixed.arrow");
    let merger = Merger::builder()
        .budget(4 << 20)
        .slot_bytes(1 << 20)
        .on_event(|_| {})
        .listen(
            "tcp://127.0.0.1:0",
            Box::new(ArrowIpcSink::create(&path, schema()).unwrap()),
        )
        .unwrap();
    let a = merger.addr().to_string();
    let mut good = Producer::connect(&a).unwrap();
    let mut bad = Producer::connect(&a).unwrap();
    let other = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, false)])),
        vec![Arc::new(Int32Array::from(vec![1, 2, 3])) as ArrayRef],
    )
    .unwrap();
    bad.write_batch(&other).unwrap();
    let e = bad.wait_acked().unwrap_err().to_string();
    assert!(e.contains("differs from the output's"), "{e}");
    good.write_batch(&batch(0, 0)).unwrap();
    good.finish().unwrap();
    let s = merger.close().unwrap();
    assert_eq!((s.sink.rows, s.stats.dropped), (Some(ROWS as u64), 1));
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// Reads the stream at argv[1] batch by batch up to where it ends now (no end marker yet
/// mid-run), then checks the rows as CHECK does.
const READ_STREAM: &str = r#"
import pyarrow as pa, pyarrow.ipc as ipc, sys
with open(sys.argv[1], "rb") as f:
    r = ipc.open_stream(f)
    got = []
    while True:
        try:
            got.append(r.read_next_batch())
        except StopIteration:
            break
t = pa.Table.from_batches(got, schema=r.schema)
extra = len(got)
"#;

#[test]
fn arrow_stream_output_reads_in_pyarrow_during_the_run_and_after() {
    let path = tmp("out.arrows");
    let merger = Merger::builder()
        .budget(8 << 20)
        .slot_bytes(1 << 20)
        .listen(
            &format!("shm://accio-merge-pas-{}", std::process::id()),
            Box::new(ArrowStreamSink::create(&path, schema()).unwrap()),
        )
        .unwrap();
    let a = merger.addr().to_string();
    let mut ps: Vec<Producer> = (0..PRODUCERS).map(|p| connect_as(&a, p as u32)).collect();
    // Mid-run: after each round is acknowledged, pyarrow reads every batch so far. Batch b
    // of every producer is in; ids run 0..rows only at the end, so only counts are checked.
    for b in 0..BATCHES {
        for (p, prod) in ps.iter_mut().enumerate() {
            prod.write_batch(&batch(p as i32, b)).unwrap();
            prod.wait_acked().unwrap();
        }
        let script = format!("{READ_STREAM}\nprint(t.num_rows, extra)");
        if let Some(out) = python(&script, &path) {
            let n = (b + 1) * i64::from(PRODUCERS);
            assert_eq!(out, format!("{} {n}", n * ROWS), "mid-run, round {b}");
        }
    }
    for prod in ps {
        prod.finish().unwrap();
    }
    let s = merger.close().unwrap();
    let total = PRODUCERS as u64 * BATCHES as u64 * ROWS as u64;
    assert_eq!(s.sink.rows, Some(total));
    if let Some(out) = python(&format!("{READ_STREAM}\n{CHECK}"), &path) {
        assert_eq!(out, format!("{total} [0, 1, 2] 12"));
    }
    // After close the end marker is there: the plain reader reads it all too.
    let plain =
        "import pyarrow.ipc as ipc, sys\nprint(ipc.open_stream(sys.argv[1]).read_all().num_rows)";
    if let Some(out) = python(plain, &path) {
        assert_eq!(out, total.to_string());
    }
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}
