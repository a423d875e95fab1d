//! The sweep of one backend: its ceiling, every pattern and item size in every mode, the
//! aggregation figures, and how each outcome is recorded.

use accio_results::event::Event;
use accio_results::model::{CeilingSource, Figure, Recorder, Unit};

use super::measure::{cached, direct_rma, large_msg_bw, messages, CacheRun, Outcome};
use super::pair::Pair;
use super::{check_interrupted, metric, pattern, Error, Options, Pattern, Transfer, BENCH};
use crate::emit;
use crate::CEILING_RETRIES;

/// The transfers `opts` asks for, as they resolve on a backend that can (`can_pull`) or
/// cannot map peer memory; pull where it is impossible is reported as skipped.
fn resolve_transfers(
    opts: &Options,
    can_pull: bool,
    events: &mut dyn FnMut(Event<'_>),
) -> Vec<Transfer> {
    let mut out: Vec<Transfer> = Vec::new();
    for &t in &opts.transfers {
        let t = match t {
            Transfer::Pull if !can_pull => {
                events(Event::Skipped(
                    "pull skipped (the backend cannot map peer memory)",
                ));
                continue;
            }
            Transfer::Auto if can_pull => Transfer::Pull,
            Transfer::Auto => Transfer::Push,
            t => t,
        };
        if !out.contains(&t) {
            out.push(t);
        }
    }
    if out.is_empty() {
        out.push(Transfer::Push);
    }
    out
}

/// The cache measurements of one pattern, grouped by the footprint they write (the
/// footprint decides the offsets, which each group shares with its direct baseline).
fn plan_runs(
    opts: &Options,
    pattern: Pattern,
    transfers: &[Transfer],
) -> Vec<(u64, Vec<CacheRun>)> {
    let mut groups: Vec<(u64, Vec<CacheRun>)> = Vec::new();
    let mut add = |fp: u64, run: CacheRun| match groups.iter_mut().find(|(f, _)| *f == fp) {
        Some((_, v)) => v.push(run),
        None => groups.push((fp, vec![run])),
    };
    for (gi, &geometry) in opts.geometries.iter().enumerate() {
        let fp = opts.footprint(pattern, geometry);
        for &transfer in transfers {
            for &placement in &opts.placements {
                add(
                    fp,
                    CacheRun {
                        geometry,
                        placement,
                        transfer,
                        checked: false,
                    },
                );
            }
        }
        if opts.checked && gi == 0 {
            // Checked lines always travel as messages the sender pushes.
            add(
                fp,
                CacheRun {
                    geometry,
                    placement: opts.placements[0],
                    transfer: Transfer::Push,
                    checked: true,
                },
            );
        }
    }
    if opts.spill && pattern == Pattern::Random && opts.footprint.is_none() {
        let geometry = opts.geometries[0];
        add(
            4 * geometry.capacity(),
            CacheRun {
                geometry,
                placement: opts.placements[0],
                transfer: transfers[0],
                checked: false,
            },
        );
    }
    groups
}

pub(super) fn run_backend(
    opts: &Options,
    pair: &Pair,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<(), Error> {
    let backend = pair.backend.as_str();
    let ceiling = large_msg_bw(pair, opts)?;
    let mut large = Ceiling {
        gbps: ceiling.summary.median,
        measured: 1,
    };
    record(rec, events, ceiling)?;
    let can_pull = pair.ep().capabilities().map_remote;
    let transfers = resolve_transfers(opts, can_pull, &mut |e| match e {
        Event::Skipped(why) => events(Event::Skipped(&format!("{backend}: {why}"))),
        e => events(e),
    });
    for &item in &opts.items {
        for &pattern in &opts.patterns {
            for (footprint, runs) in plan_runs(opts, pattern, &transfers) {
                let pass = pattern::pass_items(pattern, item, footprint);
                let cap = opts.items_per_sample.min((64usize << 20) / item);
                let passes = (cap / pass).max(1);
                let offs = pattern::offsets(pattern, item, footprint, passes, 0x5EED ^ item as u64);
                let case = Case {
                    backend,
                    pattern,
                    item,
                    footprint,
                };
                check_interrupted()?;
                let direct = direct_rma(pair, opts, &offs, item)?;
                let figs = settle(pair, opts, &mut large, rec, events, |gbps| {
                    item_figures(&case, gbps, None, passes, &direct)
                })?;
                record_all(rec, events, figs)?;
                for run in runs {
                    check_interrupted()?;
                    let out = cached(pair, opts, run, &offs, pass, item)?;
                    let figs = settle(pair, opts, &mut large, rec, events, |gbps| {
                        item_figures(&case, gbps, Some(run), passes, &out)
                    })?;
                    record_all(rec, events, figs)?;
                }
            }
        }
        if opts.aggregate {
            for aggregated in [false, true] {
                check_interrupted()?;
                let f = messages(pair, opts, item, aggregated)?;
                record(rec, events, f)?;
            }
        }
        events(Event::Advanced(1));
    }
    Ok(())
}

/// What identifies a group of item figures.
struct Case<'a> {
    backend: &'a str,
    pattern: Pattern,
    item: usize,
    footprint: u64,
}

/// The backend's large-message bandwidth the item figures are read against: the best
/// of its measures so far.
pub(super) struct Ceiling {
    pub(super) gbps: f64,
    /// How many times it was measured.
    pub(super) measured: usize,
}

/// The figures `figures` makes of the large-message bandwidth, as they are recorded. A
/// figure past that ceiling beyond the noise means the ceiling met a slower phase of the
/// machine than the figure (docs/CEILINGS.md; CI saw tcp's at 1.87 GB/s, 3.7-5.4 in six
/// other runs, beside coalesced items at 2.17): it is measured again (and recorded, `for`:
/// `ceiling, measured again (n)`), up to [`CEILING_RETRIES`] times while a figure still
/// passes it, the best kept for these figures and the backend's later ones.
pub(super) fn settle(
    pair: &Pair,
    opts: &Options,
    large: &mut Ceiling,
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    figures: impl Fn(f64) -> Vec<Figure>,
) -> Result<Vec<Figure>, Error> {
    let mut figs = figures(large.gbps);
    for _ in 0..CEILING_RETRIES {
        if !figs.iter().any(Figure::beyond_ceiling) {
            break;
        }
        let again = large_msg_bw(pair, opts)?;
        let gbps = again.summary.median;
        large.measured += 1;
        let role = format!("ceiling, measured again ({})", large.measured - 1);
        record(rec, events, again.param("for", role))?;
        if gbps > large.gbps {
            large.gbps = gbps;
            figs = figures(gbps);
        }
    }
    Ok(figs)
}

fn record_all(
    rec: &mut Recorder,
    events: &mut dyn FnMut(Event<'_>),
    figs: Vec<Figure>,
) -> Result<(), Error> {
    figs.into_iter().try_for_each(|f| record(rec, events, f))
}

/// `item_rate` and `item_bw` of one outcome, read against the large-message bandwidth
/// `large_gbps`: `run` is the cache setting (`None` for direct RMA). `repeated` figures get
/// no ceiling: the cache absorbs its rewrites, so its item rate counts bytes that never
/// had to move.
fn item_figures(
    case: &Case<'_>,
    large_gbps: f64,
    run: Option<CacheRun>,
    passes: usize,
    out: &Outcome,
) -> Vec<Figure> {
    let item = case.item;
    let mode = match run {
        None => "direct",
        Some(r) if r.checked => "checked",
        Some(_) => "cache",
    };
    let with = |metric: &str, unit: Unit, samples: Vec<f64>| -> Figure {
        let mut f = Figure::new(BENCH, metric, unit, samples)
            .expect("measured samples")
            .param("backend", case.backend)
            .param("pattern", case.pattern.name())
            .param("item", item as u64)
            .param("mode", mode)
            .param("footprint", case.footprint)
            .param("items", out.items as u64);
        if let Some(r) = run {
            f = f
                .param("geometry", r.geometry.to_string())
                .param("placement", r.placement.to_string())
                .param("transfer", r.transfer.to_string())
                .param("passes", passes as u64);
        }
        f.param("avg_transfer_bytes", out.avg_transfer.round() as u64)
            .param("transfers", out.transfers.round() as u64)
            .param("dedup", (out.dedup * 100.0).round() / 100.0)
    };
    let method = match mode {
        "direct" => "one vwrite_to per item, closed by fence_mark + fence_wait; a sample stops \
                     after its time budget"
            .to_string(),
        m => format!(
            "CommCache::insert per item ({}), flush_async after every pass of the pattern; a \
             sample ends when the applier acknowledged the last flush (with pull, the receiver \
             copies pass k on its core while the sender inserts pass k+1)",
            if m == "checked" {
                "checked mode: every line ships and verifies sender, destination, offset"
            } else {
                "one item = one line"
            }
        ),
    };
    let mut rate = with(metric::ITEM_RATE, Unit::MopsPerSec, out.mops.clone()).method(&method);
    let bw: Vec<f64> = out.mops.iter().map(|m| m * item as f64 / 1e3).collect();
    let mut bw = with(metric::ITEM_BW, Unit::GBps, bw).method(method);
    if case.pattern != Pattern::Repeated && large_gbps > 0.0 {
        rate = rate.ceiling(
            format!("large-message bw / {item} B"),
            large_gbps * 1e3 / item as f64,
            CeilingSource::Measured,
        );
        bw = bw.ceiling("large-message bw", large_gbps, CeilingSource::Measured);
    }
    vec![rate, bw]
}

fn record(rec: &mut Recorder, events: &mut dyn FnMut(Event<'_>), f: Figure) -> Result<(), Error> {
    Ok(emit::figure(rec, events, f)?)
}
