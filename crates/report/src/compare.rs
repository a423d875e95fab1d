//! Two runs side by side: every figure of the new run matched with the same figure of the
//! old one (same bench, metric and identifying parameters: [`Figure::key`]), their ratio,
//! and whether the change is beyond the noise (as critcmp and hyperfine's relative speeds
//! do for benchmarks).
//!
//! A change counts only when the two runs' min–max ranges do not overlap and the medians
//! differ by more than a threshold ([`DEFAULT_THRESHOLD`]): with medians of a handful of
//! samples on a noisy machine, a ratio whose ranges overlap says nothing, and a 1% step
//! between tight ranges matters to nobody. The
//! ratio is oriented so that above 1 is better whatever the unit (new/old for bandwidths and
//! rates, old/new for times).

use accio_results::model::{Figure, Report};
use accio_results::num::{fmt3, median_range};

use crate::text::table::render_fit;

/// The smallest change that counts: 5%.
pub const DEFAULT_THRESHOLD: f64 = 0.05;

/// What happened to one figure between two runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Better beyond the noise (the ranges do not overlap).
    Better,
    /// Worse beyond the noise.
    Worse,
    /// Within the noise (the ranges overlap).
    Same,
}

/// One figure in both runs.
#[derive(Clone, Debug)]
pub struct Change<'a> {
    /// The figure in the old run.
    pub old: &'a Figure,
    /// The same figure in the new run.
    pub new: &'a Figure,
    /// New against old, above 1 = better (see the module docs).
    pub ratio: f64,
    /// Whether the change is beyond the noise.
    pub verdict: Verdict,
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
    }
}

fn change<'a>(old: &'a Figure, new: &'a Figure, threshold: f64) -> Change<'a> {
    let (o, n) = (old.summary.median, new.summary.median);
    let ratio = if new.higher_is_better() { n / o } else { o / n };
    let disjoint = new.summary.min > old.summary.max || new.summary.max < old.summary.min;
    let counts = disjoint && (ratio - 1.0).abs() > threshold;
    let verdict = match (counts, ratio > 1.0) {
        (false, _) => Verdict::Same,
        (true, true) => Verdict::Better,
        (true, false) => Verdict::Worse,
    };
    Change {
        old,
        new,
        ratio,
        verdict,
    }
}

impl Comparison<'_> {
    /// Changes beyond the noise for the worse.
    pub fn regressions(&self) -> usize {
        self.changes
            .iter()
            .filter(|c| c.verdict == Verdict::Worse)
            .count()
    }

    /// The comparison as a text table, one row per figure in both runs, then a count of
    /// the figures only one run has.
    pub fn text(&self) -> String {
        self.text_fit(usize::MAX)
    }

    /// [`Comparison::text`] within `width` columns (rows stacked where the table would be
    /// wider, see [`crate::text::table::render_fit`]).
    pub fn text_fit(&self, width: usize) -> String {
        let rows: Vec<Vec<String>> = self
            .changes
            .iter()
            .map(|c| {
                vec![
                    c.new.label(),
                    c.new.unit.to_string(),
                    median_range(&c.old.summary),
                    median_range(&c.new.summary),
                    format!("{}x", fmt3(c.ratio)),
                    match c.verdict {
                        Verdict::Better => "better".into(),
                        Verdict::Worse => "WORSE".into(),
                        Verdict::Same => "within noise".into(),
                    },
                ]
            })
            .collect();
        let mut out = render_fit(
            &["figure", "unit", "old", "new", "new/old", "change"],
            &rows,
            width,
        );
        out.push_str(
            "new/old: above 1 is better (new/old for bandwidths and rates, old/new for times); \
             a change counts when the two min–max ranges do not overlap and the medians \
             differ by more than the threshold\n",
        );
        let better = self
            .changes
            .iter()
            .filter(|c| c.verdict == Verdict::Better)
            .count();
        out.push_str(&format!(
            "{} figures compared: {better} better, {} worse, {} within noise",
            self.changes.len(),
            self.regressions(),
            self.changes.len() - better - self.regressions()
        ));
        if !self.only_old.is_empty() || !self.only_new.is_empty() {
            out.push_str(&format!(
                "; {} only in the old run, {} only in the new one",
                self.only_old.len(),
                self.only_new.len()
            ));
        }
        out.push('\n');
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
    fn changes_beyond_the_noise_are_flagged_by_direction() {
        let mut old = Report::new();
        let mut new = Report::new();
        // Bandwidth up with disjoint ranges: better, 2x.
        old.figures
            .push(fig("stream_bw", Unit::GBps, 4096, &[4.0, 5.0, 6.0]));
        new.figures
            .push(fig("stream_bw", Unit::GBps, 4096, &[9.0, 10.0, 11.0]));
        // Latency up with disjoint ranges: worse, 0.5x.
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
        let c = compare(&old, &new, DEFAULT_THRESHOLD);
        let got: Vec<(f64, Verdict)> = c.changes.iter().map(|c| (c.ratio, c.verdict)).collect();
        assert_eq!(
            got,
            [
                (2.0, Verdict::Better),
                (0.5, Verdict::Worse),
                (1.5, Verdict::Same),
                (1.02, Verdict::Same)
            ]
        );
        assert_eq!((c.only_old.len(), c.only_new.len()), (1, 1));
        assert_eq!(c.regressions(), 1);
        let t = c.text();
        assert!(t.contains("shm latency 8") && t.contains("WORSE"), "{t}");
        assert!(
            t.ends_with(
                "4 figures compared: 1 better, 1 worse, 2 within noise; 1 only in the old run, \
                 1 only in the new one\n"
            ),
            "{t}"
        );
    }
}
