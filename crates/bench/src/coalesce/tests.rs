//! Options, geometry specs, and a quick run on shm.

use super::*;

#[test]
fn geometry_specs_parse_print_and_map_to_lines() {
    let g: GeometrySpec = "16x4x32K".parse().unwrap();
    assert_eq!(
        g,
        GeometrySpec {
            sets: 16,
            ways: 4,
            way_bytes: 32 << 10
        }
    );
    assert_eq!(g.to_string(), "16x4x32K");
    assert_eq!(g.capacity(), 2 << 20);
    let l = g.for_item(8).unwrap();
    assert_eq!((l.line_bytes, l.lines_per_way), (8, 4096));
    assert!(g.for_item(48).is_none());
    assert!(GeometrySpec { way_bytes: 64, ..g }.for_item(128).is_none());
    assert_eq!(GeometrySpec::default_cache(), g);
}

#[test]
fn bad_geometry_specs_are_clear_errors() {
    let e = |s: &str| s.parse::<GeometrySpec>().unwrap_err();
    assert!(e("16x4").contains("SETSxWAYSxWAYBYTES"), "{}", e("16x4"));
    assert!(e("ax4x32K").contains("sets \"a\""), "{}", e("ax4x32K"));
    assert!(
        e("16x4x48K").contains("not a power of two"),
        "{}",
        e("16x4x48K")
    );
    assert!(e("3x4x32K").contains("sets"), "{}", e("3x4x32K"));
    assert!(e("16x0x32K").contains("ways"), "{}", e("16x0x32K"));
}

#[test]
fn options_reject_what_cannot_be_measured() {
    let mut o = Options::quick();
    o.validate().unwrap();
    o.items = vec![48];
    assert!(o
        .validate()
        .unwrap_err()
        .to_string()
        .contains("power of two"));
    o.items = vec![4096];
    o.geometries = vec!["16x4x1K".parse().unwrap()];
    assert!(o
        .validate()
        .unwrap_err()
        .to_string()
        .contains("does not fit a way"));
}

#[test]
fn window_covers_every_footprint() {
    let o = Options::full();
    // streaming and spill use 4x the 2 MiB default cache.
    assert_eq!(o.window_bytes(), 8 << 20);
    let mut q = Options::quick();
    q.footprint = Some(3 << 20);
    assert_eq!(q.window_bytes(), 4 << 20);
}

/// The whole bench on shm with tiny settings: every figure is recorded with its
/// parameters and ceiling, and the transfer sizes are what the patterns imply.
#[test]
fn quick_run_on_shm_records_every_figure() {
    let mut o = Options::quick();
    o.backends = vec!["shm".into()];
    o.patterns = vec![Pattern::Random, Pattern::Permutation, Pattern::Repeated];
    // One footprint per pattern here (the spill run is covered by the suite's test).
    o.spill = false;
    o.checked = true;
    o.repetitions = 1;
    o.items_per_sample = 1 << 16;
    o.geometries = vec!["8x4x8K".parse().unwrap()];
    o.direct_budget = Duration::from_millis(5);
    let mut rec = Recorder::new(None).unwrap();
    let mut lines = Vec::new();
    run(&o, &mut rec, &mut |e| {
        if let Event::Figure(f) = e {
            lines.push(accio_report::text::coalesce::describe(f));
        }
    })
    .unwrap();
    let r = rec.report();
    // Measured once first; again only if an item figure passed it (`sweep::settle`).
    let large: Vec<_> = r
        .select(BENCH, metric::LARGE_MSG_BW)
        .filter(|f| f.param_str("for").is_empty())
        .collect();
    assert_eq!(large.len(), 1);
    assert!(large[0].summary.median > 0.0);
    let rates: Vec<_> = r.select(BENCH, metric::ITEM_RATE).collect();
    // 3 patterns x (direct, cache, checked).
    assert_eq!(rates.len(), 9);
    let find = |p: &str, m: &str| {
        rates
            .iter()
            .find(|f| f.param_str("pattern") == p && f.param_str("mode") == m)
            .unwrap()
    };
    let perm = find("permutation", "cache");
    assert_eq!(perm.param_str("geometry"), "8x4x8K");
    assert_eq!(perm.param_str("transfer"), "pull");
    // Footprint = capacity, every slot once: every way is full at the flush and
    // leaves whole (a pulled way also costs a small notice).
    let avg = perm.params["avg_transfer_bytes"].as_u64().unwrap();
    assert!((8192..8192 + 64).contains(&avg), "{avg}");
    assert_eq!(perm.param_str("dedup"), "1.0");
    assert!(perm.ceiling.is_some());
    // Independent draws: 1 / (1 - 1/e) = 1.58 items per line sent.
    let random = find("random", "cache");
    let dedup = random.params["dedup"].as_f64().unwrap();
    assert!((1.5..1.67).contains(&dedup), "{dedup}");
    let repeated = find("repeated", "cache");
    assert!(repeated.ceiling.is_none());
    // 4096 items per pass over 512 hot slots: each line sent once per pass for ~8 items.
    let dedup = repeated.params["dedup"].as_f64().unwrap();
    assert!((7.5..8.5).contains(&dedup), "{dedup}");
    let direct = find("random", "direct");
    assert_eq!(direct.param_str("avg_transfer_bytes"), "64");
    assert!(find("random", "checked").summary.median > 0.0);
    assert_eq!(r.select(BENCH, metric::ITEM_BW).count(), 9);
    assert_eq!(r.select(BENCH, metric::MSG_RATE).count(), 2);
    assert!(
        lines.iter().any(|l| l.contains("permutation 64 cache")),
        "{lines:?}"
    );
    let table = accio_report::text::coalesce::render_tables(r);
    assert!(table.contains("large-message bandwidth"), "{table}");
    assert!(
        table.contains("shm permutation 64 B, cache 8x4x8K pull"),
        "{table}"
    );
}

#[test]
fn items_past_a_ceiling_from_a_slow_phase_have_it_measured_again() {
    use accio_results::model::{CeilingSource, Figure, Unit};
    let opts = Options::quick();
    let pair = pair::Pair::open("shm", 4 << 20).unwrap();
    let mut rec = Recorder::new(None).unwrap();
    let item = |gbps: f64| {
        Figure::new(BENCH, metric::ITEM_BW, Unit::GBps, vec![1.0, 1.1, 1.2])
            .unwrap()
            .param("item", 64u64)
            .ceiling("large-message bw", gbps, CeilingSource::Measured)
    };

    // Within the ceiling: nothing measured.
    let mut large = sweep::Ceiling {
        gbps: 10.0,
        measured: 1,
    };
    let figs = sweep::settle(&pair, &opts, &mut large, &mut rec, &mut |_| {}, |g| {
        vec![item(g)]
    })
    .unwrap();
    assert_eq!(figs, vec![item(10.0)]);
    assert!(rec.report().figures.is_empty());

    // Past a ceiling feigned low: measured again, recorded as such, and the figure read
    // against the better measure.
    let mut large = sweep::Ceiling {
        gbps: 1e-6,
        measured: 1,
    };
    let figs = sweep::settle(&pair, &opts, &mut large, &mut rec, &mut |_| {}, |g| {
        vec![item(g)]
    })
    .unwrap();
    assert!(large.gbps > 1e-6 && large.measured >= 2);
    assert_eq!(figs[0].ceiling.as_ref().unwrap().value, large.gbps);
    let again: Vec<_> = rec.report().select(BENCH, metric::LARGE_MSG_BW).collect();
    assert_eq!(again.len(), large.measured - 1);
    assert_eq!(again[0].param_str("for"), "ceiling, measured again (1)");
}
