//! The HTML report opened in a real browser: headless Chromium (Debian's `chromium`)
//! loads each fixture's page from a file, with networking features off, dumps the DOM
//! after its script ran, and takes a screenshot. The test checks that the page rendered
//! (the script's marker is in the DOM and counts every plot and figure), that the plots are
//! there, that their text is drawn at 12 px or more and none of it outside its plot (at
//! 1400 and 800 px wide), and that the browser logged no console message (an uncaught
//! script error would be one).
//!
//! Without `chromium` on `PATH` the test prints why and passes, unless
//! `ACCIO_REQUIRE_PEER_TOOLS=1` (set by CI, which installs it with
//! `ci/install-chromium.sh`): then a missing browser is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use accio_results::model::Report;

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

fn required() -> bool {
    std::env::var_os("ACCIO_REQUIRE_PEER_TOOLS").is_some_and(|v| v == "1")
}

/// A fresh directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("accio-chromium-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs headless Chromium on `page` with a fresh profile and `extra` arguments; returns
/// (stdout, stderr).
fn run_chromium(browser: &Path, page: &Path, extra: &[String]) -> (String, String) {
    let profile = TempDir::new("profile");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
        ])
        .arg(format!("--user-data-dir={}", profile.0.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap_or_else(|e| panic!("starting {}: {e}", browser.display()));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{} failed ({}):\n{stderr}",
        browser.display(),
        out.status
    );
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// PNG width and height from the IHDR chunk.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

/// The value of `name="..."` in the DOM's `#accio-rendered` element.
fn marker_attr<'a>(dom: &'a str, name: &str) -> Option<&'a str> {
    let start = dom.find("<p id=\"accio-rendered\"")?;
    let tag = &dom[start..start + dom[start..].find('>')?];
    let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    Some(&tag[at..at + tag[at..].find('"')?])
}

fn check_page(browser: &Path, fixture: &str, plots: usize, screenshot: Option<&Path>) {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let report = Report::read(&data.join(fixture)).unwrap();
    let dir = TempDir::new("page");
    let written = accio_report::write(&report, &dir.0).unwrap();

    // A wide window and one about as narrow as a laptop's half screen.
    for width in [1400, 800] {
        let (dom, log) = run_chromium(
            browser,
            &written.html,
            &[
                "--dump-dom".to_string(),
                format!("--window-size={width},1000"),
            ],
        );
        // The script ran to its end: it wrote the marker with what it counted.
        let text = format!(
            ">rendered: {plots} plots, {} figures</p>",
            report.figures.len()
        );
        assert!(
            dom.contains(&text) && marker_attr(&dom, "data-ok") == Some("1"),
            "{fixture}: no render marker {text:?} in the DOM"
        );
        assert_eq!(
            marker_attr(&dom, "data-plots"),
            Some(plots.to_string().as_str())
        );
        // Plot text as the browser drew it: at least 12 px once the plot is scaled to the
        // page, and none of it (a legend entry, a tick label, a title) outside its plot.
        let min_font: f64 = marker_attr(&dom, "data-min-font")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{fixture}: no data-min-font"));
        assert!(
            min_font >= 12.0,
            "{fixture} at {width} px: text of {min_font} px"
        );
        assert_eq!(
            marker_attr(&dom, "data-clipped"),
            Some("0"),
            "{fixture} at {width} px: text outside its plot"
        );
        assert_eq!(
            dom.matches("<svg ").count(),
            plots,
            "{fixture}: plots in the DOM"
        );
        assert!(dom.contains("<polyline") || dom.contains("class=\"cell\""));
        // Console messages (uncaught errors among them) are logged as CONSOLE lines.
        let console: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
            .collect();
        assert!(
            console.is_empty(),
            "{fixture}: console output:\n{}",
            console.join("\n")
        );
    }

    if let Some(png) = screenshot {
        let _ = std::fs::remove_file(png);
        run_chromium(
            browser,
            &written.html,
            &[
                format!("--screenshot={}", png.display()),
                "--window-size=1280,2000".to_string(),
            ],
        );
        let bytes = std::fs::read(png).unwrap();
        assert_eq!(png_size(&bytes), (1280, 2000));
        // A blank page compresses to about 10 KiB; this one has tables and text.
        assert!(bytes.len() > 50_000, "screenshot of {} bytes", bytes.len());
        println!("screenshot of {fixture}: {}", png.display());
    }
}

#[test]
fn report_pages_render_in_headless_chromium_with_plots_and_no_console_errors() {
    let Some(browser) = chromium() else {
        assert!(
            !required(),
            "chromium is not on PATH and ACCIO_REQUIRE_PEER_TOOLS=1: install it with \
             ci/install-chromium.sh"
        );
        println!("skipped: chromium is not on PATH (ci/install-chromium.sh installs it)");
        return;
    };
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("accio-report-quick-run.png");
    check_page(&browser, "quick-run.json", 11, Some(&shot));
    check_page(&browser, "seed003-matrix.json", 2, None);
}
