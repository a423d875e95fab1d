//! Tests of the plots a document draws, on a synthetic results set shaped like the one
//! that showed the faults: the merge bench's ceiling measured again (two `fs /dev/shm
//! write x1` figures of one name, one line with stray points), ceilings of one name and
//! other values, four backends, long ceiling names, and the summary's pointers to the
//! transport plots.

use accio_results::model::{CeilingSource, Figure, Report, Unit};

use crate::svg::{text_width, LinePlot, FONT, PALETTE, WIDTH};

use super::*;

const CEILING: &str = "fs write of 2M records, best of 1 and 2 stream(s) (2), same path, same run";

fn fig(bench: &str, metric: &str, unit: Unit, v: f64) -> Figure {
    Figure::new(bench, metric, unit, vec![v * 0.95, v, v * 1.05]).unwrap()
}

fn synthetic() -> Report {
    let mut r = Report::new();
    // Transports: four backends, one of them unknown to the palette.
    for (k, b) in ["shm", "tcp", "mpi", "verbs"].into_iter().enumerate() {
        let k = k as f64 + 1.0;
        for size in [8u64, 4096, 2 << 20] {
            let s = size as f64;
            for (m, unit, v) in [
                ("stream_bw", Unit::GBps, s.log2() / k),
                ("rma_write_bw", Unit::GBps, s.log2() / k / 2.0),
                ("memcpy", Unit::GBps, s.log2() * 2.0),
                ("latency", Unit::Micros, k + s / 1e4),
            ] {
                let mut f = fig("transport", m, unit, v)
                    .param("backend", b)
                    .param("size", size);
                if m == "latency" {
                    f = f.ceiling(
                        format!("cache-line hop {k} us + one memcpy of {size}"),
                        v * 0.8,
                        CeilingSource::Measured,
                    );
                }
                r.figures.push(f);
            }
        }
    }
    // The merge bench's write ceiling on /dev/shm, measured again: same identity, two
    // configurations, two values (2.87 and 1.77 GB/s at one thread).
    for (role, v) in [
        ("merge ceiling", 2.87),
        ("merge ceiling, measured again (1)", 1.77),
    ] {
        for threads in [1u64, 2] {
            r.figures.push(
                fig("fs", "write", Unit::GBps, v * threads as f64)
                    .param("path", "/dev/shm")
                    .param("threads", threads)
                    .param("record_size", 2u64 << 20)
                    .param("fs_type", "tmpfs")
                    .param("for", role),
            );
        }
    }
    // Merge figures of two backends and two write modes; on /tmp the 16-producer figures
    // are read against the ceiling measured again (same name, another value).
    for path in ["/dev/shm", "/tmp"] {
        for producers in [1u64, 16] {
            let ceiling = if path == "/tmp" && producers == 16 {
                3.1
            } else {
                2.87
            };
            for (backend, mode) in [("shm", "direct"), ("shm", "copy"), ("tcp", "copy")] {
                r.figures.push(
                    fig("merge", "merge", Unit::GBps, 1.0 + producers as f64 / 10.0)
                        .param("path", path)
                        .param("backend", backend)
                        .param("write_mode", mode)
                        .param(
                            "claim",
                            if mode == "direct" {
                                "header-pages"
                            } else {
                                "-"
                            },
                        )
                        .param("producers", producers)
                        .param("buffers", 64 / producers)
                        .param("sync", path == "/tmp")
                        .ceiling(CEILING, ceiling, CeilingSource::Measured),
                );
            }
            r.figures.push(
                fig("merge", "naive", Unit::GBps, 0.9)
                    .param("path", path)
                    .param("producers", producers)
                    .param("sync", path == "/tmp")
                    .ceiling(CEILING, ceiling, CeilingSource::Measured),
            );
        }
    }
    // Coalescing on two backends, each read against its own large-message bandwidth: one
    // pattern at both footprints, one at the smaller only, one with no ceiling at all (as a
    // quick run measures them).
    for (b, bw) in [("shm", 54.8), ("tcp", 2.81)] {
        for (pattern, footprints) in [
            ("random", &[2u64 << 20, 8 << 20][..]),
            ("permutation", &[2 << 20][..]),
            ("repeated", &[2 << 20, 8 << 20][..]),
        ] {
            for &footprint in footprints {
                for mode in ["direct", "cache"] {
                    let mut f = fig("coalesce", "item_bw", Unit::GBps, bw / 10.0)
                        .param("backend", b)
                        .param("pattern", pattern)
                        .param("mode", mode)
                        .param("footprint", footprint);
                    if pattern != "repeated" {
                        f = f.ceiling("large-message bw", bw, CeilingSource::Measured);
                    }
                    r.figures.push(f);
                }
            }
        }
    }
    r
}

/// Every line plot of the document, the summary's references left out.
fn line_plots(d: &Document) -> Vec<&LinePlot> {
    d.sections
        .iter()
        .flat_map(|s| &s.blocks)
        .filter_map(|b| match b {
            Block::Plot(Plot::Line(p)) => Some(p),
            _ => None,
        })
        .collect()
}

fn plot<'a>(d: &'a Document, title: &str) -> &'a LinePlot {
    let plots = line_plots(d);
    let titles: Vec<&str> = plots.iter().map(|p| p.title.as_str()).collect();
    plots
        .into_iter()
        .find(|p| p.title == title)
        .unwrap_or_else(|| panic!("no plot {title:?} among {titles:?}"))
}

/// The text of `attr="..."` in `tag`.
fn attr<'a>(tag: &'a str, attr: &str) -> Option<&'a str> {
    let start = tag.find(&format!(" {attr}=\""))? + attr.len() + 3;
    Some(&tag[start..start + tag[start..].find('"')?])
}

/// Each legend entry of an SVG: its `data-name`, and its lines of text with their x.
fn legend_entries(svg: &str) -> Vec<(String, Vec<(f64, String)>)> {
    let unesc = |s: &str| {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    };
    svg.split("<g class=\"legend-entry\"")
        .skip(1)
        .map(|e| {
            let e = &e[..e.find("</g>").unwrap()];
            let name = unesc(attr(e, "data-name").unwrap());
            let lines = e
                .split("<tspan")
                .skip(1)
                .map(|t| {
                    let x: f64 = attr(t, "x").unwrap().parse().unwrap();
                    let text = &t[t.find('>').unwrap() + 1..t.find("</tspan>").unwrap()];
                    (x, unesc(text))
                })
                .collect();
            (name, lines)
        })
        .collect()
}

/// A plot's ceiling lines: name and colour.
fn ceilings(p: &LinePlot) -> Vec<(&str, usize)> {
    p.series
        .iter()
        .filter(|s| s.dashed)
        .map(|s| (s.name.as_str(), s.color))
        .collect()
}

#[test]
fn two_ceilings_of_one_name_and_other_parameters_are_two_series_told_apart() {
    let d = document(&synthetic());
    // The fs figures measured as the merge ceiling, twice: two lines of two points, not
    // one line of four.
    let p = plot(&d, "fs write vs threads on /dev/shm (merge ceiling)");
    let names: Vec<&str> = p.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["merge ceiling", "merge ceiling, measured again (1)"]
    );
    for s in &p.series {
        assert_eq!(s.points.len(), 2, "{}", s.name);
    }
    let at_one: Vec<f64> = p.series.iter().map(|s| s.points[0].y).collect();
    assert_eq!(at_one, [2.87, 1.77]);
    // Ceilings of one name with other values: one line each, each saying whose it is.
    let p = plot(&d, "merge throughput vs producers on /tmp");
    let names: Vec<&str> = ceilings(p).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, [format!("ceiling: {CEILING}")]);
    // (Every series of that plot met 2.87 at one producer and 3.1 at sixteen: one line.)
    let c = p.series.iter().find(|s| s.dashed).unwrap();
    let ys: Vec<f64> = c.points.iter().map(|q| q.y).collect();
    assert_eq!(ys, [2.87, 3.1]);
    // On the coalescing plot each backend has its own large-message ceiling.
    let p = plot(&d, "coalesce item_bw vs footprint");
    assert_eq!(
        ceilings(p),
        [
            ("ceiling of shm: large-message bw", 0),
            ("ceiling of tcp: large-message bw", 1),
        ]
    );
    // Measured series: each configuration once, every label different.
    for p in line_plots(&d) {
        let names: Vec<&str> = p.series.iter().map(|s| s.name.as_str()).collect();
        for (i, n) in names.iter().enumerate() {
            assert!(
                !names[..i].contains(n),
                "{}: {n} twice in {names:?}",
                p.title
            );
        }
    }
    let p = plot(&d, "merge throughput vs producers on /dev/shm");
    let names: Vec<&str> = p.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "shm direct",
            "shm copy",
            "tcp copy",
            "naive (the alternative)",
            &format!("ceiling: {CEILING}")
        ]
    );
}

#[test]
fn a_ceiling_measured_again_for_some_series_only_names_them() {
    let mut r = synthetic();
    // The tcp figures at 16 producers on /dev/shm read against a ceiling measured again.
    for f in r.figures.iter_mut().filter(|f| {
        f.bench == "merge" && f.param_str("path") == "/dev/shm" && f.param_str("backend") == "tcp"
    }) {
        *f = f.clone().ceiling(CEILING, 3.3, CeilingSource::Measured);
    }
    let d = document(&r);
    let p = plot(&d, "merge throughput vs producers on /dev/shm");
    let others = format!("ceiling of shm direct, shm copy, naive (the alternative): {CEILING}");
    let tcp = format!("ceiling of tcp: {CEILING}");
    assert_eq!(
        ceilings(p),
        [(others.as_str(), crate::svg::BLACK), (tcp.as_str(), 1)]
    );
}

#[test]
fn the_table_tells_apart_figures_that_would_read_alike() {
    let d = document(&synthetic());
    let s = d.sections.iter().find(|s| s.id == "bench-merge").unwrap();
    let t = super::tests::first_table(s);
    let first: Vec<&str> = t
        .rows
        .iter()
        .map(|r| r[0].as_str())
        .filter(|l| l.starts_with("fs /dev/shm write x1"))
        .collect();
    assert_eq!(
        first,
        [
            "fs /dev/shm write x1 (merge ceiling)",
            "fs /dev/shm write x1 (merge ceiling, measured again (1))"
        ]
    );
}

#[test]
fn every_legend_entry_is_whole_and_inside_the_plot() {
    let d = document(&synthetic());
    let plots = line_plots(&d);
    assert_eq!(plots.len(), 6);
    let mut longest = 0;
    for p in plots {
        let svg = p.svg();
        assert!(!svg.contains('…'), "{}: an entry was cut", p.title);
        let entries = legend_entries(&svg);
        let names: Vec<&str> = p.series.iter().map(|s| s.name.as_str()).collect();
        let shown: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(shown, names, "{}", p.title);
        for (name, lines) in &entries {
            longest = longest.max(name.chars().count());
            let text: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
            assert_eq!(text.join(" "), *name, "{}", p.title);
            for (x, l) in lines {
                let right = x + text_width(l, FONT);
                assert!(right <= WIDTH - 10.0, "{}: {l:?} ends at {right}", p.title);
            }
        }
    }
    // The long ceiling names are among them (and wrap rather than end in an ellipsis).
    assert!(longest > 80, "{longest}");
}

#[test]
fn each_backend_has_its_own_colour_in_every_plot() {
    let r = synthetic();
    let d = document(&r);
    let backends = ["shm", "tcp", "mpi", "verbs"];
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for p in line_plots(&d) {
        for s in p.series.iter().filter(|s| !s.dashed) {
            let Some(b) = backends
                .iter()
                .find(|b| s.name.split(' ').next() == Some(**b))
            else {
                continue;
            };
            match seen.iter().find(|(k, _)| k == b) {
                Some((_, c)) => assert_eq!(*c, s.color, "{}: {} changed colour", p.title, s.name),
                None => seen.push((b, s.color)),
            }
        }
    }
    assert_eq!(seen.len(), backends.len(), "{seen:?}");
    for (i, (b, c)) in seen.iter().enumerate() {
        assert!(*c < PALETTE.len());
        for (o, oc) in &seen[..i] {
            assert_ne!(c, oc, "{b} and {o} share {}", PALETTE[*c]);
        }
    }
    // shm and tcp: blue and vermillion, as in every report.
    assert_eq!(seen[..2], [("shm", 0), ("tcp", 1)]);
    // Series of one colour differ by marker (the transport plot: stream and RMA write).
    let p = plot(&d, "Bandwidth vs message size");
    let shm: Vec<(usize, bool)> = p
        .series
        .iter()
        .filter(|s| s.color == 0)
        .map(|s| (s.variant, s.dashed))
        .collect();
    assert_eq!(shm, [(0, false), (1, false), (0, true)]);
}

#[test]
fn each_plot_is_drawn_once_and_the_summary_links_to_the_transport_plots() {
    let r = synthetic();
    let html = crate::html(&r);
    let ids: Vec<&str> = html
        .split("<svg ")
        .skip(1)
        .map(|s| attr(s, "id").unwrap())
        .collect();
    assert_eq!(ids.len(), 6, "{ids:?}");
    for (i, id) in ids.iter().enumerate() {
        assert!(!ids[..i].contains(id), "{id} drawn twice");
        assert_eq!(html.matches(&format!("id=\"{id}\"")).count(), 1, "{id}");
    }
    // Titles too: no plot drawn again under another id.
    let titles: Vec<&str> = html
        .split("<svg ")
        .skip(1)
        .map(|s| attr(s, "aria-label").unwrap())
        .collect();
    for (i, t) in titles.iter().enumerate() {
        assert!(!titles[..i].contains(t), "{t} drawn twice");
    }
    let summary = &html[html.find("<section id=\"summary\">").unwrap()..];
    let summary = &summary[..summary.find("</section>").unwrap()];
    assert!(!summary.contains("<svg"), "{summary}");
    for (id, title) in [
        ("plot-transport-bw", "Bandwidth vs message size"),
        ("plot-transport-lat", "One-way latency vs message size"),
    ] {
        assert!(
            summary.contains(&format!("<a href=\"#{id}\">{title}</a> (in Transports)")),
            "{summary}"
        );
        assert!(ids.contains(&id));
    }
    // The Markdown names each plot once, in its own section.
    let md = crate::markdown(&r);
    assert_eq!(
        md.matches("*Plot in report.html: Bandwidth vs message size.*")
            .count(),
        1
    );
}

#[test]
fn plot_text_is_13_px_at_the_width_the_page_shows() {
    let d = document(&synthetic());
    for p in line_plots(&d) {
        let svg = p.svg();
        let open = &svg[..svg.find('>').unwrap()];
        assert_eq!(attr(open, "width"), Some("720"));
        assert_eq!(attr(open, "font-size"), Some("13"));
        assert!(attr(open, "viewBox").unwrap().starts_with("0 0 720 "));
        // No text set smaller anywhere inside.
        for part in svg.split("font-size=\"").skip(1) {
            let size: f64 = part[..part.find('"').unwrap()].parse().unwrap();
            assert!(size >= 13.0, "{}: font-size {size}", p.title);
        }
    }
    // The page draws plots at their own width: nothing scales them below it.
    let html = crate::html(&synthetic());
    assert!(
        !html.contains("svg{width:"),
        "a style sets the plots' width"
    );
}
