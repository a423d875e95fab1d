//! Snapshot tests: the Markdown of each fixed results file in `tests/data/` is compared
//! with the `.md` checked in beside it, and the HTML page is checked for what must be in it
//! (and what must not: anything that would need the network).
//!
//! Fixtures: `quick-run.json` is a real `accio bench --quick` run on the CI machine (2 vCPU
//! VM); `seed003-matrix.json` holds seed 003's Helios intra-node PingPong matrices
//! (latency and bandwidth between CPU1, MIC0 and MIC1) as figures with `src`/`dst`.
//!
//! After an intended change of the output, `UPDATE_SNAPSHOTS=1 cargo test -p accio-report
//! --test snapshot` rewrites the `.md` files; review the diff before committing it.

use std::path::{Path, PathBuf};

use accio_results::model::Report;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn fixture(name: &str) -> Report {
    Report::read(&data(name)).unwrap()
}

/// Compares `actual` with the snapshot file, or rewrites it with `UPDATE_SNAPSHOTS=1`.
fn assert_snapshot(name: &str, actual: &str) {
    let path = data(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| v == "1") {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "reading the snapshot {}: {e} (UPDATE_SNAPSHOTS=1 writes it)",
            path.display()
        )
    });
    if expected != actual {
        let (line, (e, a)) = expected
            .lines()
            .zip(actual.lines())
            .enumerate()
            .find(|(_, (e, a))| e != a)
            .unwrap_or((
                expected.lines().count().min(actual.lines().count()),
                ("<end>", "<end>"),
            ));
        panic!(
            "{} differs from the rendered Markdown at line {}:\n  expected: {e}\n  actual:   {a}\n\
             (UPDATE_SNAPSHOTS=1 rewrites it after an intended change)",
            path.display(),
            line + 1
        );
    }
}

#[test]
fn markdown_of_a_quick_run_matches_the_snapshot() {
    let md = accio_report::markdown(&fixture("quick-run.json"));
    assert_snapshot("quick-run.md", &md);
}

#[test]
fn markdown_of_the_seed_003_matrices_matches_the_snapshot() {
    let md = accio_report::markdown(&fixture("seed003-matrix.json"));
    assert_snapshot("seed003-matrix.md", &md);
}

#[test]
fn markdown_has_every_section_and_the_summary_rows() {
    let r = fixture("quick-run.json");
    let md = accio_report::markdown(&r);
    for h in [
        "## Summary",
        "## Warnings",
        "## Node",
        "## Memory",
        "## File systems",
        "## Transports",
        "## Methods",
    ] {
        assert!(md.contains(&format!("\n{h}\n")), "no {h}");
    }
    // Seed 002's Table 1 layout, and the 8 B / 2 MiB transport headlines.
    assert!(md.contains("| write, 1 thread |"));
    assert!(md.contains("| persistent across reboot |"));
    assert!(md.contains("| shm latency, 8 B |"));
    assert!(md.contains("| tcp stream, 2M |"));
    // Every warning of the run is listed.
    for w in &r.warnings {
        assert!(md.contains(&format!("- {w}\n")), "warning missing: {w}");
    }
}

#[test]
fn matrix_markdown_is_seed_003s_table() {
    let md = accio_report::markdown(&fixture("seed003-matrix.json"));
    // Latency (us), rows from, columns to: seed 003's Helios intra-node numbers.
    assert!(
        md.contains("| from \\ to (us) | CPU1 | MIC0 | MIC1 |"),
        "{md}"
    );
    assert!(md.contains("| MIC1 | 3.75 | 6.00 | 2.84 |"), "{md}");
    assert!(md.contains("| CPU1 | 5.06 | 1.61 | 0.480 |"), "{md}");
}

#[test]
fn html_is_self_contained_and_has_the_plots() {
    for (name, plots) in [("quick-run.json", 11), ("seed003-matrix.json", 2)] {
        let r = fixture(name);
        let html = accio_report::html(&r);
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert_eq!(html.matches("<svg ").count(), plots, "{name}");
        // Nothing to fetch: no external scripts, styles, images or fonts.
        for needle in ["<link", " src=", "url(", "@import", "https://"] {
            assert!(!html.contains(needle), "{name}: found {needle}");
        }
        let http: Vec<&str> = html
            .match_indices("http://")
            .map(|(i, _)| &html[i..i + 30])
            .collect();
        assert!(
            http.iter()
                .all(|h| h.starts_with("http://www.w3.org/2000/svg")),
            "{name}: {http:?}"
        );
        // The embedded results are the report.
        let start = html.find("id=\"accio-results\">").unwrap() + "id=\"accio-results\">".len();
        let end = start + html[start..].find("</script>").unwrap();
        let back: Report = serde_json::from_str(&html[start..end]).unwrap();
        assert_eq!(back, r);
    }
    let html = accio_report::html(&fixture("seed003-matrix.json"));
    assert_eq!(html.matches("class=\"plot heatmap\"").count(), 2);
    assert!(html.contains("MIC1 → MIC0: 6.00 us"));
}
