//! Sample statistics: median with min and max (what every accio figure quotes).

use serde::{Deserialize, Serialize};

/// Median, minimum and maximum of a set of samples.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The median (mean of the two middle samples for an even count).
    pub median: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Number of samples.
    pub n: usize,
}

impl Summary {
    /// Summarizes `samples`; `None` when there are none or any is NaN.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() || samples.iter().any(|x| x.is_nan()) {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Summary {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }

    /// Applies `f` to every statistic (e.g. turn seconds into bandwidth). For a decreasing
    /// `f` the min and max swap so that `min <= median <= max` still holds.
    pub fn map(self, f: impl Fn(f64) -> f64) -> Summary {
        let (a, b) = (f(self.min), f(self.max));
        Summary {
            median: f(self.median),
            min: a.min(b),
            max: a.max(b),
            n: self.n,
        }
    }

    /// (max - min) / median: how noisy the samples were.
    pub fn spread(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / self.median
        }
    }
}

/// Index of the median sample (the lower of the two middle ones for an even count), to
/// report other measurements of the same run beside a median; `None` when empty.
pub fn median_index(samples: &[f64]) -> Option<usize> {
    let mut order: Vec<usize> = (0..samples.len()).collect();
    order.sort_by(|&a, &b| samples[a].total_cmp(&samples[b]));
    order.get(samples.len().saturating_sub(1) / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let s = Summary::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (3.0, 1.0, 5.0, 3));
        assert_eq!(Summary::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert!(Summary::of(&[]).is_none());
        assert!(Summary::of(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn map_with_decreasing_function_keeps_order() {
        // seconds -> bytes per second for 100 bytes
        let s = Summary::of(&[1.0, 2.0, 4.0]).unwrap().map(|t| 100.0 / t);
        assert_eq!((s.min, s.median, s.max), (25.0, 50.0, 100.0));
        assert!((s.spread() - 1.5).abs() < 1e-12);
    }

    #[test]
    fn median_index_points_at_the_median_sample() {
        assert_eq!(median_index(&[3.0, 1.0, 2.0]), Some(2));
        assert_eq!(median_index(&[4.0, 1.0, 3.0, 2.0]), Some(3));
        assert_eq!(median_index(&[]), None);
    }
}
