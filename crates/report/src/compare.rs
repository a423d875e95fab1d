//! Two runs side by side: every figure of the new run matched with the same figure of the
//! old one (same bench, metric and identifying parameters: [`Figure::key`]), the change of
//! its median in words ("1.79× slower", "2.00× higher", as hyperfine and critcmp print
//! it), and whether that change is beyond the noise.
//!
//! A change counts only when the two runs' min–max ranges are apart by more than a
//! threshold ([`DEFAULT_THRESHOLD`]): the lower range's top, raised by the threshold, is
//! still below the higher range's bottom. Comparing medians alone, or ranges that merely do
//! not touch, flagged 13 figures of two runs of the same binary under ordinary load: the
//! samples of one run are taken within milliseconds of each other, so their range misses
//! what changes between runs (where the pages and threads land, the clock). Six quick
//! `bench transport --backend shm` runs of one binary on a quiet 2-CPU VM gave ranges of
//! 1-2% whose runs differed by up to 10% (RMA write at 512K: 102 and 113 GB/s), hence the
//! 10% default.
//!
//! The machine's own ceilings measured beside the transport figures (`memcpy`,
//! `latency_floor`) moved most between those runs (memcpy 512K: 98 to 120 GB/s, the
//! latency floor by 27%): they are compared and shown, but a change of theirs says the
//! machine differed, not accio, and is never counted as a regression. So are the other
//! figures that measure the node rather than accio ([`measures_machine`]: `accio bench
//! mem`, the file systems' own speed, the GPUs' copy engines): a single-thread read of a
//! 16 MiB tmpfs file ran at 7 GB/s in one quick run and 17 in the next, the same binary
//! and nothing else running.
//!
//! A figure whose own ceiling, measured in the same run, moved by more than the threshold
//! and the same way is judged on its fraction of that ceiling: when the fraction stayed
//! within the noise, the machine moved it ("1.17× higher (ceiling 1.21× higher)") and it
//! is not counted either. Two quick runs of one binary here moved memcpy of 4 KiB from
//! 190 to 230 GB/s and the shm RMA write of 4 KiB, one such copy, from 152 to 177.
//!
//! When the transport ceilings moved by more than [`MACHINE_MOVED`] the machine itself
//! differed between the runs, and
//! no change of accio's figures can be put down to accio: the host of a VM moves its vCPUs
//! (`MACHINE_NOTES.md`), and four quick runs of one binary here alternated between a
//! core-to-core hop of 0.05 and 0.25 µs, which took the shm latency from 0.086 to 0.29 µs
//! and 26 to 36 figures past the threshold with it, a third of them beside a ceiling of
//! their own that had not moved. Such a comparison is *inconclusive*: the changes are shown
//! ("(machine differed)"), none is counted, and the summary names the ceilings that moved
//! ([`Comparison::machine_differed`]).
//!
//! The direction comes from the figure's unit ([`Figure::higher_is_better`]): times are
//! "faster" or "slower" (lower is better), bandwidths and rates "higher" or "lower". The
//! factor is always at least 1, the larger median over the smaller, so "2.00× slower" means
//! the new run's median time is twice the old one's.

use accio_results::metric::{measures_machine, transport};
use accio_results::model::{Figure, Report};
use accio_results::num::median_range;

use crate::text::table::render_fit;
use crate::text::wrap::wrap;

/// The smallest gap between two runs' ranges that counts: 10% (see the module docs).
pub const DEFAULT_THRESHOLD: f64 = 0.10;

/// What happened to one figure between two runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Better beyond the noise (the ranges are apart by more than the threshold).
    Better,
    /// Worse beyond the noise.
    Worse,
    /// Within the noise (the ranges overlap, or are closer than the threshold).
    Same,
    /// Not judged: a run has fewer than [`MIN_SAMPLES`] samples of it, so its range says
    /// nothing of its noise.
    TooFew,
}

/// How far apart a machine ceiling's two ranges must be for the machine to have differed
/// between the runs: 30%. The vCPUs moving took the core-to-core hop from 0.05 to 0.25 µs
/// and 2-thread memcpy of 64 MiB 1.76x; within one placement, quick runs moved memcpy of 8
/// bytes and 4 KiB by up to 1.20x, which must not hide accio's own changes (a build
/// slowed by 2 µs per send: shm latency 8.2x slower beside them).
pub const MACHINE_MOVED: f64 = 0.30;

/// Samples a figure needs in both runs for its change to be judged: with one sample (a
/// merge figure of `accio bench --quick`, say) the range is a point, and two quick runs of
/// one binary here moved such figures by up to 1.30x.
pub const MIN_SAMPLES: usize = 3;

/// One figure in both runs.
#[derive(Clone, Debug)]
pub struct Change<'a> {
    /// The figure in the old run.
    pub old: &'a Figure,
    /// The same figure in the new run.
    pub new: &'a Figure,
    /// The new median over the old one (above 1: the figure went up, which is worse for a
    /// time and better for a bandwidth or rate).
    pub ratio: f64,
    /// Whether the change is beyond the noise.
    pub verdict: Verdict,
    /// Whether the figure is a ceiling of the machine rather than a figure of accio (see
    /// the module docs): never a regression.
    pub machine: bool,
    /// For a change beyond the noise: its own ceiling moved the same way beyond the
    /// threshold, the new ceiling over the old, and on its fraction of that ceiling the
    /// figure stayed within the noise (see the module docs): not counted.
    pub with_ceiling: Option<f64>,
}

impl Change<'_> {
    /// The change of the median in words, as "N× faster" or "N× slower" for times and
    /// "N× higher" or "N× lower" for bandwidths and rates, N being at least 1 with three
    /// significant digits (see the module docs); "no change" where it rounds to 1.00.
    pub fn words(&self) -> String {
        self.words_of(self.ratio)
    }

    /// A change counted for or against accio: beyond the noise, of one of accio's
    /// figures, not the machine's doing.
    fn counted(&self) -> bool {
        !self.machine && self.with_ceiling.is_none()
    }

    /// `ratio`, new over old, in words, as [`Change::words`] says it.
    fn words_of(&self, ratio: f64) -> String {
        let up = ratio > 1.0;
        let factor = if up { ratio } else { 1.0 / ratio };
        if !factor.is_finite() {
            return if up { "from zero" } else { "to zero" }.into();
        }
        // Three significant digits, as hyperfine's "1.79× slower"; "107×", not "106.61×".
        let factor = match factor {
            f if f >= 99.95 => format!("{f:.0}"),
            f if f >= 9.995 => format!("{f:.1}"),
            f => format!("{f:.2}"),
        };
        if factor == "1.00" {
            return "no change".into();
        }
        let word = match (self.new.higher_is_better(), up) {
            (true, true) => "higher",
            (true, false) => "lower",
            (false, true) => "slower",
            (false, false) => "faster",
        };
        format!("{factor}× {word}")
    }
}

/// The comparison of two runs.
#[derive(Clone, Debug)]
pub struct Comparison<'a> {
    /// Figures in both runs, in the new run's order.
    pub changes: Vec<Change<'a>>,
    /// Figures only the old run has.
    pub only_old: Vec<&'a Figure>,
    /// Figures only the new run has.
    pub only_new: Vec<&'a Figure>,
    /// The smallest relative change that counted.
    pub threshold: f64,
}

/// Matches the figures of `new` with those of `old` (the last of each key where a run has
/// several) and judges each change; `threshold` is the smallest relative change that
/// counts (e.g. [`DEFAULT_THRESHOLD`]).
pub fn compare<'a>(old: &'a Report, new: &'a Report, threshold: f64) -> Comparison<'a> {
    let last = |r: &'a Report, key: &str| r.figures.iter().rev().find(|f| f.key() == key);
    let mut changes = Vec::new();
    let mut only_new = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for n in &new.figures {
        let key = n.key();
        if seen.contains(&key) {
            continue;
        }
        let n = last(new, &key).expect("the figure itself");
        seen.push(key.clone());
        match last(old, &key) {
            Some(o) => changes.push(change(o, n, threshold)),
            None => only_new.push(n),
        }
    }
    let mut only_old: Vec<&Figure> = Vec::new();
    for o in &old.figures {
        let key = o.key();
        if !seen.contains(&key) && !only_old.iter().any(|f| f.key() == key) {
            only_old.push(o);
        }
    }
    Comparison {
        changes,
        only_old,
        only_new,
        threshold,
    }
}

fn change<'a>(old: &'a Figure, new: &'a Figure, threshold: f64) -> Change<'a> {
    let (o, n) = (&old.summary, &new.summary);
    let ratio = n.median / o.median;
    // Apart by more than the threshold: the whole new range above the old one raised by
    // it, or the whole old range above the new one raised by it.
    let (went_up, went_down) = apart(o.min, o.max, n.min, n.max, threshold);
    let verdict = match (went_up || went_down, went_up == new.higher_is_better()) {
        (false, _) => Verdict::Same,
        _ if o.n.min(n.n) < MIN_SAMPLES => Verdict::TooFew,
        (true, true) => Verdict::Better,
        (true, false) => Verdict::Worse,
    };
    let machine = measures_machine(new);
    let with_ceiling = match verdict {
        Verdict::Better | Verdict::Worse if !machine => moved_with_ceiling(old, new, threshold),
        _ => None,
    };
    Change {
        old,
        new,
        ratio,
        verdict,
        machine,
        with_ceiling,
    }
}

/// Whether the range `[n_min, n_max]` lies above `[o_min, o_max]` by more than
/// `threshold` (the lower range's top raised by it still below the higher range's bottom),
/// and whether it lies below by as much.
fn apart(o_min: f64, o_max: f64, n_min: f64, n_max: f64, threshold: f64) -> (bool, bool) {
    (
        n_min > o_max * (1.0 + threshold),
        o_min > n_max * (1.0 + threshold),
    )
}

/// The new ceiling over the old one where both runs measured the figure's ceiling (the
/// same one), it moved beyond `threshold` the way the figure did, and the figure's
/// fraction of it stayed within the noise (see the module docs).
fn moved_with_ceiling(old: &Figure, new: &Figure, threshold: f64) -> Option<f64> {
    use accio_results::model::CeilingSource::Measured;
    let (oc, nc) = (old.ceiling.as_ref()?, new.ceiling.as_ref()?);
    if oc.name != nc.name || oc.source != Measured || nc.source != Measured || oc.value <= 0.0 {
        return None;
    }
    let ceiling = nc.value / oc.value;
    let figure = new.summary.median / old.summary.median;
    let same_way = (ceiling > 1.0) == (figure > 1.0);
    if !same_way || ceiling.max(1.0 / ceiling) <= 1.0 + threshold {
        return None;
    }
    let (o, n) = (&old.summary, &new.summary);
    let (up, down) = apart(
        o.min / oc.value,
        o.max / oc.value,
        n.min / nc.value,
        n.max / nc.value,
        threshold,
    );
    (!up && !down).then_some(ceiling)
}

impl Comparison<'_> {
    /// Changes of accio's figures beyond the noise for the worse (the machine's own
    /// figures are not counted; see [`Comparison::machine_differed`] for when none is judged).
    pub fn regressions(&self) -> Vec<&Change<'_>> {
        self.changes
            .iter()
            .filter(|c| c.verdict == Verdict::Worse && c.counted())
            .collect()
    }

    /// The transport bench's ceilings (memcpy, the latency floor) that moved by more than
    /// [`MACHINE_MOVED`]: when there are any, the machine differed between the runs and
    /// the comparison is inconclusive (see the module docs).
    pub fn machine_differed(&self) -> Vec<&Change<'_>> {
        let t = self.threshold.max(MACHINE_MOVED);
        self.changes
            .iter()
            .filter(|c| {
                let (o, n) = (&c.old.summary, &c.new.summary);
                let (up, down) = apart(o.min, o.max, n.min, n.max, t);
                c.machine && c.new.bench == transport::BENCH && (up || down)
            })
            .collect()
    }

    /// Changes with verdict `v`: the machine's own (`machine`), or accio's counted ones.
    fn count(&self, v: Verdict, machine: bool) -> usize {
        self.changes
            .iter()
            .filter(|c| c.verdict == v && if machine { c.machine } else { c.counted() })
            .count()
    }

    /// The comparison as a text table, one row per figure in both runs, then a count of
    /// the figures only one run has.
    pub fn text(&self) -> String {
        self.text_fit(usize::MAX)
    }

    /// [`Comparison::text`] within `width` columns: rows stacked where the table would be
    /// wider (see [`crate::text::table::render_fit`]), the notes below it wrapped at word
    /// boundaries.
    pub fn text_fit(&self, width: usize) -> String {
        let differed = !self.machine_differed().is_empty();
        let rows: Vec<Vec<String>> = self
            .changes
            .iter()
            .map(|c| {
                vec![
                    c.new.label(),
                    c.new.unit.to_string(),
                    median_range(&c.old.summary),
                    median_range(&c.new.summary),
                    match (c.verdict, c.machine, c.with_ceiling) {
                        (Verdict::Same, _, _) => "within noise".into(),
                        (Verdict::TooFew, _, _) => format!(
                            "{} (n={}, not judged)",
                            c.words(),
                            c.old.summary.n.min(c.new.summary.n)
                        ),
                        (_, true, _) => format!("{} (machine)", c.words()),
                        (_, _, Some(ceiling)) => {
                            format!("{} (ceiling {})", c.words(), c.words_of(ceiling))
                        }
                        _ if differed => format!("{} (machine differed)", c.words()),
                        _ => c.words(),
                    },
                ]
            })
            .collect();
        let mut out = render_fit(&["figure", "unit", "old", "new", "change"], &rows, width);
        // Rounded so that 5% does not print as 5.000000000000001%.
        let pct = (self.threshold * 1e4).round() / 100.0;
        out.push_str(&wrap(
            &format!(
                "old, new: median (min–max) of each run; a change counts when the two \
                 ranges are more than {pct}% apart"
            ),
            width,
            "",
        ));
        let machine = self.count(Verdict::Better, true) + self.count(Verdict::Worse, true);
        if machine > 0 {
            out.push_str(&wrap(
                "(machine): memory copies, the latency floor, file systems and GPU copies \
                 measure the machine, not accio; a change of theirs is not counted",
                width,
                "",
            ));
        }
        let with_ceiling = self
            .changes
            .iter()
            .filter(|c| c.with_ceiling.is_some())
            .count();
        if with_ceiling > 0 {
            out.push_str(&wrap(
                "(ceiling N×): the figure's own ceiling, measured in the same run, moved \
                 alike and the figure kept its fraction of it: the machine's change, not \
                 counted",
                width,
                "",
            ));
        }
        let (worse, better) = (
            self.count(Verdict::Worse, false),
            self.count(Verdict::Better, false),
        );
        let same = self.count(Verdict::Same, false) + self.count(Verdict::Same, true);
        let mut total = if differed {
            format!(
                "{} figures compared: {} moved beyond the noise ({worse} down, {better} \
                 up), {same} within noise",
                self.changes.len(),
                worse + better
            )
        } else {
            format!(
                "{} figures compared: {worse} worse, {better} better, {same} within noise",
                self.changes.len()
            )
        };
        if machine > 0 {
            total.push_str(&format!("; {machine} of the machine's own figures changed"));
        }
        if with_ceiling > 0 {
            total.push_str(&format!(
                "; {with_ceiling} moved with their own ceilings, not counted"
            ));
        }
        let few = self.count(Verdict::TooFew, false) + self.count(Verdict::TooFew, true);
        if few > 0 {
            total.push_str(&format!(
                "; {few} moved but with fewer than {MIN_SAMPLES} samples in a run, not judged"
            ));
        }
        if differed {
            let moved: Vec<String> = self
                .machine_differed()
                .iter()
                .take(3)
                .map(|c| format!("{} {}", c.new.label(), c.words()))
                .collect();
            let more = if self.machine_differed().len() > 3 {
                ", ..."
            } else {
                ""
            };
            total = if worse + better == 0 {
                // Nothing of accio's moved: there is no change to put down to either.
                format!(
                    "{total}. The machine differed between the runs ({}{more}), and none of \
                     accio's figures moved beyond the noise",
                    moved.join(", ")
                )
            } else {
                format!(
                    "{total}. Inconclusive: the machine differed between the runs ({}{more}), \
                     so no change of accio's figures is judged; run both again back to back",
                    moved.join(", ")
                )
            };
        }
        if !self.only_old.is_empty() || !self.only_new.is_empty() {
            total.push_str(&format!(
                "; {} only in the old run, {} only in the new one",
                self.only_old.len(),
                self.only_new.len()
            ));
        }
        out.push_str(&wrap(&total, width, ""));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accio_results::model::Unit;

    fn fig(metric: &str, unit: Unit, size: u64, s: &[f64]) -> Figure {
        Figure::new("transport", metric, unit, s.to_vec())
            .unwrap()
            .param("backend", "shm")
            .param("size", size)
    }

    #[test]
    fn changes_beyond_the_noise_are_flagged_by_direction_in_words() {
        let mut old = Report::new();
        let mut new = Report::new();
        // Bandwidth up with disjoint ranges: 2x higher.
        old.figures
            .push(fig("stream_bw", Unit::GBps, 4096, &[4.0, 5.0, 6.0]));
        new.figures
            .push(fig("stream_bw", Unit::GBps, 4096, &[9.0, 10.0, 11.0]));
        // Latency doubled with disjoint ranges: 2x slower, a regression.
        old.figures
            .push(fig("latency", Unit::Micros, 8, &[0.9, 1.0, 1.1]));
        new.figures
            .push(fig("latency", Unit::Micros, 8, &[1.9, 2.0, 2.1]));
        // Overlapping ranges: within noise, whatever the medians.
        old.figures
            .push(fig("stream_bw", Unit::GBps, 8, &[1.0, 2.0, 3.0]));
        new.figures
            .push(fig("stream_bw", Unit::GBps, 8, &[2.5, 3.0, 4.0]));
        // One figure each run alone.
        old.figures.push(fig("latency", Unit::Micros, 64, &[1.0]));
        new.figures.push(fig("latency", Unit::Micros, 128, &[1.0]));
        // Disjoint ranges but a 2% step: under the threshold.
        old.figures
            .push(fig("rma_write_bw", Unit::GBps, 8, &[10.0, 10.0, 10.0]));
        new.figures
            .push(fig("rma_write_bw", Unit::GBps, 8, &[10.2, 10.2, 10.2]));
        // Medians 8% apart and ranges that do not touch, but only 3% apart: noise.
        old.figures
            .push(fig("latency", Unit::Micros, 4096, &[1.0, 1.0, 1.05]));
        new.figures
            .push(fig("latency", Unit::Micros, 4096, &[1.08, 1.08, 1.12]));
        // A rate that dropped: lower, a regression.
        old.figures
            .push(fig("msg_rate", Unit::MopsPerSec, 8, &[10.0, 11.0, 12.0]));
        new.figures
            .push(fig("msg_rate", Unit::MopsPerSec, 8, &[4.0, 5.0, 6.0]));
        // A time that halved: faster.
        old.figures
            .push(fig("connect", Unit::Millis, 0, &[3.8, 4.0, 4.4]));
        new.figures
            .push(fig("connect", Unit::Millis, 0, &[1.9, 2.0, 2.2]));
        let c = compare(&old, &new, DEFAULT_THRESHOLD);
        let got: Vec<(String, Verdict)> =
            c.changes.iter().map(|c| (c.words(), c.verdict)).collect();
        let want = [
            ("2.00× higher", Verdict::Better),
            ("2.00× slower", Verdict::Worse),
            ("1.50× higher", Verdict::Same),
            ("1.02× higher", Verdict::Same),
            ("1.08× slower", Verdict::Same),
            ("2.20× lower", Verdict::Worse),
            ("2.00× faster", Verdict::Better),
        ];
        let want: Vec<(String, Verdict)> = want.iter().map(|(w, v)| (w.to_string(), *v)).collect();
        assert_eq!(got, want);
        assert_eq!((c.only_old.len(), c.only_new.len()), (1, 1));
        assert_eq!(c.regressions().len(), 2);
        let t = c.text();
        let row = t.lines().find(|l| l.starts_with("shm latency 8 ")).unwrap();
        assert!(row.ends_with("2.00× slower"), "{t}");
        let row = t.lines().find(|l| l.starts_with("shm latency 4K")).unwrap();
        assert!(row.ends_with("within noise"), "{t}");
        assert!(
            t.ends_with(
                "7 figures compared: 2 worse, 2 better, 3 within noise; 1 only in the old run, \
                 1 only in the new one\n"
            ),
            "{t}"
        );
    }

    #[test]
    fn every_line_fits_the_width() {
        let mut old = Report::new();
        let mut new = Report::new();
        for size in [8, 4096, 2 << 20] {
            old.figures
                .push(fig("latency", Unit::Micros, size, &[0.270, 0.272, 0.290]));
            new.figures
                .push(fig("latency", Unit::Micros, size, &[0.480, 0.488, 0.512]));
        }
        old.figures.push(fig("latency", Unit::Micros, 1, &[1.0]));
        let c = compare(&old, &new, DEFAULT_THRESHOLD);
        let t = c.text_fit(80);
        assert!(t.lines().all(|l| l.chars().count() <= 80), "{t}");
        let row = t.lines().find(|l| l.starts_with("shm latency 8 ")).unwrap();
        assert!(row.ends_with("0.488 (0.480–0.512)  1.79× slower"), "{t}");
        assert!(t.contains("more than 10% apart"), "{t}");
        // Narrower than the table: rows stacked, nothing wider than the width.
        let t = c.text_fit(50);
        assert!(t.lines().all(|l| l.chars().count() <= 50), "{t}");
        assert!(t.contains("change: 1.79× slower"), "{t}");
    }

    #[test]
    fn factors_keep_three_significant_digits() {
        let words = |o: f64, n: f64| {
            let (o, n) = (
                fig("latency", Unit::Micros, 8, &[o]),
                fig("latency", Unit::Micros, 8, &[n]),
            );
            change(&o, &n, DEFAULT_THRESHOLD).words()
        };
        assert_eq!(words(0.090, 9.59), "107× slower");
        assert_eq!(words(0.231, 11.2), "48.5× slower");
        assert_eq!(words(2.0, 1.0), "2.00× faster");
        assert_eq!(words(1.0, 1.001), "no change");
    }

    #[test]
    fn the_machines_ceilings_are_shown_but_never_a_regression() {
        let mut old = Report::new();
        let mut new = Report::new();
        let memcpy = |s: &[f64]| {
            Figure::new("transport", "memcpy", Unit::GBps, s.to_vec())
                .unwrap()
                .param("backend", "shm")
                .param("size", 524288u64)
                .param("threads", 1u64)
        };
        old.figures.push(memcpy(&[119.0, 120.0, 120.0]));
        new.figures.push(memcpy(&[97.8, 98.0, 99.6]));
        old.figures
            .push(fig("latency", Unit::Micros, 8, &[1.0, 1.0, 1.0]));
        new.figures
            .push(fig("latency", Unit::Micros, 8, &[1.0, 1.0, 1.0]));
        let c = compare(&old, &new, DEFAULT_THRESHOLD);
        assert_eq!(c.changes[0].verdict, Verdict::Worse);
        assert!(c.changes[0].machine);
        assert!(c.regressions().is_empty());
        let t = c.text();
        let row = t
            .lines()
            .find(|l| l.starts_with("shm memcpy 512K"))
            .unwrap();
        assert!(row.ends_with("1.22× lower (machine)"), "{t}");
        assert!(
            t.ends_with(
                "2 figures compared: 0 worse, 0 better, 1 within noise; 1 of the machine's \
                 own figures changed\n"
            ),
            "{t}"
        );
    }

    /// Two runs of one binary here, the host having moved the vCPUs between them: the
    /// core-to-core hop went from 0.05 to 0.25 µs and the shm latency with it. The change
    /// is shown, not judged, and no regression is counted.
    #[test]
    fn a_machine_that_differed_makes_the_comparison_inconclusive() {
        let mut old = Report::new();
        let mut new = Report::new();
        old.figures.push(fig(
            "latency_floor",
            Unit::Micros,
            8,
            &[0.050, 0.051, 0.055],
        ));
        new.figures.push(fig(
            "latency_floor",
            Unit::Micros,
            8,
            &[0.244, 0.250, 0.251],
        ));
        old.figures
            .push(fig("latency", Unit::Micros, 8, &[0.086, 0.086, 0.086]));
        new.figures
            .push(fig("latency", Unit::Micros, 8, &[0.281, 0.290, 0.291]));
        let c = compare(&old, &new, DEFAULT_THRESHOLD);
        assert_eq!(c.changes[1].verdict, Verdict::Worse);
        assert_eq!(c.regressions().len(), 1);
        assert_eq!(c.machine_differed().len(), 1);
        let t = c.text();
        let row = t.lines().find(|l| l.starts_with("shm latency 8")).unwrap();
        assert!(row.ends_with("3.37× slower (machine differed)"), "{t}");
        assert!(t.contains("Inconclusive: the machine differed"), "{t}");
        assert!(t.contains("1 moved beyond the noise (1 down, 0 up)"), "{t}");

        // The same move of the machine, and accio's latency where it was: nothing to judge
        // as inconclusive.
        new.figures[1] = fig("latency", Unit::Micros, 8, &[0.086, 0.087, 0.088]);
        let c = compare(&old, &new, DEFAULT_THRESHOLD);
        assert_eq!(c.machine_differed().len(), 1);
        let t = c.text();
        assert!(!t.contains("Inconclusive"), "{t}");
        assert!(
            t.contains("The machine differed between the runs (shm latency_floor 8 4.90× slower), and none of accio's figures moved beyond the noise"),
            "{t}"
        );
    }

    /// The file system's own speed measures the node: a single-thread tmpfs read moved
    /// from 7 to 17 GB/s between two quick runs of one binary here. Shown, not counted,
    /// and not a sign that the CPU's ceilings moved.
    #[test]
    fn a_file_systems_speed_is_the_machines() {
        let read = |s: &[f64]| {
            Figure::new("fs", "cold-read", Unit::GBps, s.to_vec())
                .unwrap()
                .param("path", "/dev/shm")
                .param("threads", 1u64)
        };
        let mut old = Report::new();
        let mut new = Report::new();
        old.figures.push(read(&[6.87, 6.97, 10.3]));
        new.figures.push(read(&[17.3, 17.5, 18.0]));
        let c = compare(&old, &new, DEFAULT_THRESHOLD);
        assert!(c.changes[0].machine);
        assert!(c.machine_differed().is_empty());
        let t = c.text();
        assert!(t.contains("2.51× higher (machine)"), "{t}");
        assert!(
            t.contains("0 worse, 0 better, 0 within noise; 1 of the machine's"),
            "{t}"
        );
    }

    /// Two quick runs of one binary here: memcpy of 4 KiB went from 190 to 230 GB/s and
    /// the shm RMA write of 4 KiB (one such copy) from 152 to 177, the same fraction of
    /// it. A latency 8.2x slower beside a ceiling 1.2x slower is accio's own change.
    #[test]
    fn a_figure_that_moved_with_its_own_ceiling_is_not_counted() {
        use accio_results::model::CeilingSource::{Measured, Theoretical};
        let with = |f: Figure, name: &str, c: f64| f.ceiling(name, c, Measured);
        let mut old = Report::new();
        let mut new = Report::new();
        let rma = |s: &[f64]| fig("rma_write_bw", Unit::GBps, 4096, s);
        old.figures.push(with(
            rma(&[151.0, 152.0, 152.0]),
            "memcpy 4K, 1 thread",
            190.0,
        ));
        new.figures.push(with(
            rma(&[177.0, 177.0, 177.0]),
            "memcpy 4K, 1 thread",
            230.0,
        ));
        let lat = |s: &[f64]| fig("latency", Unit::Micros, 8, s);
        old.figures
            .push(with(lat(&[0.09, 0.09, 0.10]), "floor", 0.05));
        new.figures
            .push(with(lat(&[0.74, 0.74, 0.75]), "floor", 0.06));
        // A theoretical ceiling says nothing of the machine's phase.
        let h2d = |s: &[f64]| fig("stream_bw", Unit::GBps, 2 << 20, s);
        old.figures
            .push(h2d(&[40.0, 40.0, 41.0]).ceiling("link", 50.0, Theoretical));
        new.figures
            .push(h2d(&[30.0, 30.0, 31.0]).ceiling("link", 40.0, Theoretical));
        let c = compare(&old, &new, DEFAULT_THRESHOLD);
        let got: Vec<Option<f64>> = c.changes.iter().map(|c| c.with_ceiling).collect();
        assert_eq!(got.len(), 3);
        assert!((got[0].unwrap() - 230.0 / 190.0).abs() < 1e-9);
        assert_eq!((got[1], got[2]), (None, None));
        assert_eq!(c.regressions().len(), 2);
        let t = c.text();
        assert!(t.contains("1.16× higher (ceiling 1.21× higher)"), "{t}");
        assert!(
            t.contains("0 better, 0 within noise; 1 moved with their own ceilings, not counted"),
            "{t}"
        );
    }

    /// A merge figure of a quick run has one sample: two runs of one binary here gave
    /// 3.10 and 2.39 GB/s. Shown, not judged.
    #[test]
    fn one_sample_is_too_few_to_judge() {
        let mut old = Report::new();
        let mut new = Report::new();
        old.figures
            .push(fig("stream_bw", Unit::GBps, 2 << 20, &[3.10]));
        new.figures
            .push(fig("stream_bw", Unit::GBps, 2 << 20, &[2.39]));
        let c = compare(&old, &new, DEFAULT_THRESHOLD);
        assert_eq!(c.changes[0].verdict, Verdict::TooFew);
        assert!(c.regressions().is_empty());
        let t = c.text();
        assert!(t.contains("1.30× lower (n=1, not judged)"), "{t}");
        assert!(
            t.contains("1 moved but with fewer than 3 samples in a run, not judged"),
            "{t}"
        );
    }
}
