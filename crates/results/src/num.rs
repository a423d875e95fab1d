//! Numbers as tables and messages print them: about three significant digits, and a
//! figure's summary as `median (min–max)`. One definition each, shared by the benches'
//! messages and every exporter.

use crate::stats::Summary;

/// Formats a value with about three significant digits (`0.123`, `12.3`, `1234`).
pub fn fmt3(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A summary as `median (min–max)`, each with [`fmt3`].
pub fn median_range(s: &Summary) -> String {
    format!("{} ({}–{})", fmt3(s.median), fmt3(s.min), fmt3(s.max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_significant_digits() {
        assert_eq!(fmt3(1234.5), "1234");
        assert_eq!(fmt3(12.345), "12.3");
        assert_eq!(fmt3(1.2345), "1.23");
        assert_eq!(fmt3(0.012345), "0.012");
    }

    #[test]
    fn median_range_reads_median_then_range() {
        let s = Summary::of(&[1.0, 2.0, 30.0]).unwrap();
        assert_eq!(median_range(&s), "2.00 (1.00–30.0)");
    }
}
