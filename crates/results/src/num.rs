//! Numbers as tables and messages print them: about three significant digits (two for
//! values below 0.01, so they do not read as `0.000`), and a
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

/// Like [`fmt3`], but values below 0.01 keep two significant digits instead of reading as
/// `0.000` (an 8-byte stream over TCP moves about 0.001 GB/s).
pub fn fmt_small(v: f64) -> String {
    let a = v.abs();
    if a >= 0.01 || a == 0.0 || !a.is_finite() {
        return fmt3(v);
    }
    let decimals = (-a.log10()).ceil() as usize + 1;
    format!("{v:.decimals$}")
}

/// A summary as `median (min–max)`, each with [`fmt_small`]: the one form every table
/// quotes a figure in.
pub fn median_range(s: &Summary) -> String {
    format!(
        "{} ({}–{})",
        fmt_small(s.median),
        fmt_small(s.min),
        fmt_small(s.max)
    )
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
        assert_eq!(fmt_small(0.00123), "0.0012");
    }
}
