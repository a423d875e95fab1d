//! The JSON every bench writes validates against `docs/results.schema.json`.
//!
//! Each bench runs here in its quickest, smallest configuration, writing its results file
//! through a [`Recorder`] exactly as `accio bench ... --json FILE` does; the file is then
//! checked against the schema, and against what the schema cannot say (samples and summary
//! agree, ceilings' ratios match). The saved fixtures in `crates/report/tests/data/` and `accio info`'s
//! JSON are checked too.
//!
//! The validator is a small hand-written one covering the JSON Schema keywords the schema
//! uses (`type`, `const`, `enum`, `required`, `properties`, `additionalProperties`,
//! `items`, `minItems`, `minimum`, `maximum`, `minLength`, `anyOf`, `$ref` into `$defs`):
//! the `jsonschema` crate would bring a regex engine, an HTTP client for remote `$ref`s
//! and dozens of crates into the build for what is a few dozen lines here.
//!
//! This test has its own `main` (`harness = false`): the transport bench needs a peer
//! *process*, and this executable is that peer when started with the peer subcommand.

use std::path::{Path, PathBuf};
use std::time::Duration;

use accio_bench::fs::{CacheDrop, FsBench};
use accio_bench::mem::MemBench;
use accio_bench::transport::{self, PeerCommand, PeerConfig};
use accio_results::model::{Recorder, Report};
use serde_json::Value;

/// The argument that makes this executable the transport bench's peer process.
const PEER: &str = "__transport-peer";

// --- the validator --------------------------------------------------------------------

fn type_ok(v: &Value, t: &str) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        // JSON Schema: a number with no fractional part is an integer (1.0 is).
        "integer" => v
            .as_f64()
            .is_some_and(|x| x.fract() == 0.0 && x.is_finite()),
        other => panic!("the schema uses type {other:?}, which this validator does not know"),
    }
}

/// Validates `v` against `schema` (`root` resolves `$ref`s); returns every violation as
/// `path: what`.
fn validate(root: &Value, schema: &Value, v: &Value, path: &str, errs: &mut Vec<String>) {
    let Some(s) = schema.as_object() else {
        if schema == &Value::Bool(false) {
            errs.push(format!("{path}: not allowed"));
        }
        return;
    };
    for key in s.keys() {
        assert!(
            [
                "$schema",
                "title",
                "description",
                "type",
                "const",
                "enum",
                "required",
                "properties",
                "additionalProperties",
                "items",
                "minItems",
                "minimum",
                "maximum",
                "minLength",
                "anyOf",
                "$ref",
                "$defs",
            ]
            .contains(&key.as_str()),
            "the schema uses keyword {key:?}, which this validator does not know"
        );
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let name = r
            .strip_prefix("#/$defs/")
            .unwrap_or_else(|| panic!("unsupported $ref {r}"));
        let target = &root["$defs"][name];
        assert!(!target.is_null(), "$ref {r} names no definition");
        validate(root, target, v, path, errs);
    }
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(t) => type_ok(v, t),
            Value::Array(ts) => ts.iter().any(|t| type_ok(v, t.as_str().unwrap())),
            _ => panic!("bad type in schema"),
        };
        if !ok {
            errs.push(format!("{path}: {v} is not of type {t}"));
            return;
        }
    }
    if let Some(c) = s.get("const") {
        if v != c {
            errs.push(format!("{path}: {v} is not {c}"));
        }
    }
    if let Some(Value::Array(options)) = s.get("enum") {
        if !options.contains(v) {
            errs.push(format!("{path}: {v} is not one of {options:?}"));
        }
    }
    if let Some(Value::Array(alts)) = s.get("anyOf") {
        let any = alts.iter().any(|a| {
            let mut e = Vec::new();
            validate(root, a, v, path, &mut e);
            e.is_empty()
        });
        if !any {
            errs.push(format!("{path}: {v} matches none of anyOf"));
        }
    }
    if let (Some(min), Some(x)) = (s.get("minimum").and_then(Value::as_f64), v.as_f64()) {
        if x < min {
            errs.push(format!("{path}: {x} is below the minimum {min}"));
        }
    }
    if let (Some(max), Some(x)) = (s.get("maximum").and_then(Value::as_f64), v.as_f64()) {
        if x > max {
            errs.push(format!("{path}: {x} is above the maximum {max}"));
        }
    }
    if let (Some(min), Some(st)) = (s.get("minLength").and_then(Value::as_u64), v.as_str()) {
        if (st.chars().count() as u64) < min {
            errs.push(format!("{path}: {st:?} is shorter than {min}"));
        }
    }
    if let Some(obj) = v.as_object() {
        if let Some(Value::Array(req)) = s.get("required") {
            for r in req {
                let r = r.as_str().unwrap();
                if !obj.contains_key(r) {
                    errs.push(format!("{path}: missing {r:?}"));
                }
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        for (k, child) in obj {
            let p = format!("{path}.{k}");
            match props.and_then(|p| p.get(k)) {
                Some(ps) => validate(root, ps, child, &p, errs),
                None => match s.get("additionalProperties") {
                    Some(Value::Bool(false)) => errs.push(format!("{p}: unexpected property")),
                    Some(a @ Value::Object(_)) => validate(root, a, child, &p, errs),
                    _ => {}
                },
            }
        }
    }
    if let Some(arr) = v.as_array() {
        if let Some(min) = s.get("minItems").and_then(Value::as_u64) {
            if (arr.len() as u64) < min {
                errs.push(format!("{path}: fewer than {min} items"));
            }
        }
        if let Some(items) = s.get("items") {
            for (i, x) in arr.iter().enumerate() {
                validate(root, items, x, &format!("{path}[{i}]"), errs);
            }
        }
    }
}

fn schema() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/results.schema.json");
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("reading the schema {}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()))
}

/// Violations of the schema and of the invariants the schema cannot express.
fn violations(doc: &Value) -> Vec<String> {
    let root = schema();
    let mut errs = Vec::new();
    validate(&root, &root, doc, "$", &mut errs);
    for (i, f) in doc["figures"].as_array().into_iter().flatten().enumerate() {
        let samples: Vec<f64> = f["samples"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        let s = &f["summary"];
        let (med, min, max) = (
            s["median"].as_f64().unwrap_or(f64::NAN),
            s["min"].as_f64().unwrap_or(f64::NAN),
            s["max"].as_f64().unwrap_or(f64::NAN),
        );
        if s["n"].as_u64() != Some(samples.len() as u64) {
            errs.push(format!(
                "$.figures[{i}]: summary.n is not the number of samples"
            ));
        }
        if !(min <= med && med <= max) {
            errs.push(format!("$.figures[{i}]: not min <= median <= max"));
        }
        let sample_min = samples.iter().copied().fold(f64::INFINITY, f64::min);
        let sample_max = samples.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if sample_min != min || sample_max != max {
            errs.push(format!(
                "$.figures[{i}]: summary min/max are not the samples'"
            ));
        }
        let unit = f["unit"].as_str().unwrap_or("");
        if let (Some(r), true) = (
            f["ceiling"]["ratio"].as_f64(),
            ["GB/s", "Mop/s", "us", "ms"].contains(&unit),
        ) {
            let c = f["ceiling"]["value"].as_f64().unwrap_or(f64::NAN);
            let expect = if ["GB/s", "Mop/s"].contains(&unit) {
                med / c
            } else {
                c / med
            };
            if (r - expect).abs() > 1e-9 * expect.abs().max(1.0) {
                errs.push(format!("$.figures[{i}]: ceiling ratio {r} is not {expect}"));
            }
        }
    }
    errs
}

fn check_file(path: &Path, benches: &[&str]) -> Report {
    let text = std::fs::read_to_string(path).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let errs = violations(&doc);
    assert!(
        errs.is_empty(),
        "{} violates the schema:\n{}",
        path.display(),
        errs.join("\n")
    );
    let report = Report::read(path).unwrap();
    for b in benches {
        assert!(
            report.figures.iter().any(|f| &f.bench == b),
            "{}: no {b} figures",
            path.display()
        );
    }
    report
}

// --- the tests ---------------------------------------------------------------------------

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("accio-schema-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn validator_rejects_what_it_should() {
    let mut r = Report::new();
    r.figures.push(
        accio_results::model::Figure::new(
            "mem",
            "memcpy",
            accio_results::model::Unit::GBps,
            vec![1.0, 2.0],
        )
        .unwrap()
        .ceiling("x", 4.0, accio_results::model::CeilingSource::Measured),
    );
    let good = serde_json::to_value(&r).unwrap();
    assert_eq!(violations(&good), Vec::<String>::new());
    let broken = |f: &dyn Fn(&mut Value)| {
        let mut d = good.clone();
        f(&mut d);
        violations(&d)
    };
    assert_eq!(
        broken(&|d| d["figures"][0]["unit"] = "MB/s".into()),
        [
            r#"$.figures[0].unit: "MB/s" is not one of [String("GB/s"), String("us"), String("ms"), String("Mop/s")]"#
        ]
    );
    assert_eq!(
        broken(&|d| {
            d.as_object_mut().unwrap().remove("host");
        }),
        [r#"$: missing "host""#]
    );
    // A NaN sample is written as null by serde_json: the schema catches it.
    assert!(broken(&|d| d["figures"][0]["samples"][1] = Value::Null)
        .iter()
        .any(|e| e.starts_with("$.figures[0].samples[1]: null is not of type")));
    assert_eq!(
        broken(&|d| d["figures"][0]["extra"] = 1.into()),
        ["$.figures[0].extra: unexpected property"]
    );
    assert_eq!(
        broken(&|d| d["figures"][0]["summary"]["n"] = 3.into()),
        ["$.figures[0]: summary.n is not the number of samples"]
    );
    assert_eq!(
        broken(&|d| d["figures"][0]["ceiling"]["ratio"] = 0.5.into()),
        ["$.figures[0]: ceiling ratio 0.5 is not 0.375"]
    );
    assert_eq!(
        broken(&|d| d["version"] = 2.into()),
        ["$.version: 2 is above the maximum 1"]
    );
}

fn mem_json_validates() {
    let d = scratch("mem");
    let path = d.join("mem.json");
    let mut rec = Recorder::new(Some(&path)).unwrap();
    MemBench::quick()
        .sizes(&[64 << 10])
        .threads(&[1, 2])
        .samples(2)
        .batch(Duration::from_millis(2))
        .run(&mut rec, &mut |_| {})
        .unwrap();
    let r = check_file(&path, &["mem"]);
    assert_eq!(r.figures.len(), 2);
    std::fs::remove_dir_all(&d).unwrap();
}

fn fs_json_validates() {
    let d = scratch("fs");
    let path = d.join("fs.json");
    let mut rec = Recorder::new(Some(&path)).unwrap();
    // fadvise rather than drop_caches: a test must not empty the whole node's cache.
    let out = FsBench::new([&d])
        .threads(&[1])
        .file_size(1 << 20)
        .record_size(256 << 10)
        .repeats(1)
        .cache_drop(CacheDrop::Fadvise)
        .run(&mut rec, &mut |_| {})
        .unwrap();
    assert!(out.failures.is_empty(), "{:?}", out.failures);
    let r = check_file(&path, &["fs", "mem"]);
    assert_eq!(r.select("fs", "cold-read").count(), 1);
    std::fs::remove_dir_all(&d).unwrap();
}

fn transport_json_validates() {
    let d = scratch("transport");
    let path = d.join("transport.json");
    let mut rec = Recorder::new(Some(&path)).unwrap();
    let mut opts = transport::Options::new(PeerCommand {
        program: std::env::current_exe().unwrap(),
        args: vec![PEER.into()],
    });
    opts.backends = vec!["shm".into(), "tcp".into()];
    opts.sizes = Some(vec![8]);
    opts.quick = true;
    opts.repetitions = Some(2);
    opts.pin = false;
    transport::run(&opts, &mut rec, &mut |_| {}).unwrap();
    let r = check_file(&path, &["transport"]);
    for b in ["shm", "tcp"] {
        assert!(
            r.select("transport", "latency")
                .any(|f| f.param_str("backend") == b),
            "no {b} latency"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

fn coalesce_json_validates() {
    let d = scratch("coalesce");
    let path = d.join("coalesce.json");
    let mut rec = Recorder::new(Some(&path)).unwrap();
    let mut opts = accio_bench::coalesce::Options::quick();
    opts.backends = vec!["shm".into()];
    opts.patterns = vec![accio_bench::coalesce::Pattern::Random];
    opts.repetitions = 1;
    opts.items_per_sample = 4096;
    opts.direct_budget = Duration::from_millis(5);
    accio_bench::coalesce::run(&opts, &mut rec, &mut |_| {})
        .unwrap_or_else(|e| panic!("coalesce bench: {e}"));
    check_file(&path, &["coalesce"]);
    std::fs::remove_dir_all(&d).unwrap();
}

fn merge_json_validates() {
    let d = scratch("merge");
    let path = d.join("merge.json");
    let mut rec = Recorder::new(Some(&path)).unwrap();
    accio_bench::merge::MergeBench::quick([&d])
        .backends(&["shm".to_string()])
        .placements(&[accio_bench::merge::Placement::Threads])
        .producers(&[1, 2])
        .buffer_bytes(64 << 10)
        .buffers(Some(4))
        .budget(1 << 20)
        .run(&mut rec, &mut |_| {})
        .unwrap_or_else(|e| panic!("merge bench: {e}"));
    let r = check_file(&path, &["merge"]);
    assert!(r.select("merge", "merge").count() >= 2);
    std::fs::remove_dir_all(&d).unwrap();
}

fn suite_report_with_info_validates() {
    let d = scratch("info");
    let path = d.join("results.json");
    let mut rec = Recorder::new(Some(&path)).unwrap();
    rec.set_info(accio_results::node::NodeInfo::detect())
        .unwrap();
    accio_report::warnings::apply(&mut rec).unwrap();
    let r = check_file(&path, &[]);
    assert!(r.info.is_some());
    // `accio info --json` writes the info object alone: it is the schema's `info`.
    let root = schema();
    let info = serde_json::to_value(accio_results::node::NodeInfo::detect()).unwrap();
    let mut errs = Vec::new();
    validate(&root, &root["$defs"]["info"], &info, "$", &mut errs);
    assert_eq!(errs, Vec::<String>::new());
    std::fs::remove_dir_all(&d).unwrap();
}

fn fixtures_validate() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../report/tests/data");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            check_file(&p, &[]);
            n += 1;
        }
    }
    assert!(n >= 2, "fixtures in {}", dir.display());
}

// --- the harness -------------------------------------------------------------------------

/// The peer process: `__transport-peer --addr ADDR [--cpu N] [--parent PID]`.
fn peer_main(args: &[String]) -> ! {
    let mut cfg = PeerConfig {
        addr: String::new(),
        cpu: None,
        parent: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().expect("a value after each peer flag");
        match a.as_str() {
            "--addr" => cfg.addr = v.clone(),
            "--cpu" => cfg.cpu = Some(v.parse().unwrap()),
            "--parent" => cfg.parent = Some(v.parse().unwrap()),
            other => panic!("unknown peer flag {other}"),
        }
    }
    match transport::peer_main(&cfg) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("peer: {e}");
            std::process::exit(1)
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(PEER) {
        peer_main(&args[2..]);
    }
    // `cargo test NAME` passes NAME as a filter.
    let filter: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with('-')).collect();
    let tests: [(&str, fn()); 8] = [
        (
            "validator_rejects_what_it_should",
            validator_rejects_what_it_should,
        ),
        ("mem_json_validates", mem_json_validates),
        ("fs_json_validates", fs_json_validates),
        ("transport_json_validates", transport_json_validates),
        ("coalesce_json_validates", coalesce_json_validates),
        ("merge_json_validates", merge_json_validates),
        (
            "suite_report_with_info_validates",
            suite_report_with_info_validates,
        ),
        ("fixtures_validate", fixtures_validate),
    ];
    let run: Vec<_> = tests
        .iter()
        .filter(|(name, _)| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str())))
        .collect();
    println!("\nrunning {} tests", run.len());
    let mut failed = Vec::new();
    for (name, test) in &run {
        let ok = std::panic::catch_unwind(test).is_ok();
        println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
        if !ok {
            failed.push(*name);
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; 0 ignored; 0 measured; {} filtered out\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        run.len() - failed.len(),
        failed.len(),
        tests.len() - run.len()
    );
    if !failed.is_empty() {
        std::process::exit(101);
    }
}
