//! Stacked horizontal bars as inline SVG: one bar per rank, one segment per phase — seed
//! 001's Figure 1 (time spent computing, communicating and synchronizing on each node).

use std::fmt::Write as _;

use crate::svg::{esc, text_width, tick_label, FONT};

/// Okabe–Ito colours, as the line plots use: compute, synchronize, communicate, ...
const PALETTE: [&str; 4] = ["#0072B2", "#E69F00", "#D55E00", "#009E73"];

/// Bars made of segments that add up.
#[derive(Clone, Debug, PartialEq)]
pub struct StackedBars {
    /// Element id.
    pub id: String,
    /// Title above the bars.
    pub title: String,
    /// Unit of the values (the x axis).
    pub unit: String,
    /// One label per bar, top to bottom.
    pub bars: Vec<String>,
    /// Segments in stacking order: a name and one value per bar.
    pub segments: Vec<(String, Vec<f64>)>,
}

fn px(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

impl StackedBars {
    /// The longest bar's total.
    fn max_total(&self) -> f64 {
        (0..self.bars.len())
            .map(|i| {
                self.segments
                    .iter()
                    .map(|(_, v)| v.get(i).copied().unwrap_or(0.0).max(0.0))
                    .sum::<f64>()
            })
            .fold(0.0, f64::max)
    }

    /// The bars as an `<svg>` element.
    pub fn svg(&self) -> String {
        let left = 12.0
            + self
                .bars
                .iter()
                .map(|l| text_width(l, FONT))
                .fold(text_width("rank", FONT), f64::max);
        let (width, bar, gap, top) = (420.0, 22.0, 8.0, 48.0);
        let n = self.bars.len() as f64;
        let axis_y = top + n * (bar + gap);
        // As wide as the bars, or as the legend above them where that is wider.
        let legend_w: f64 = self
            .segments
            .iter()
            .map(|(name, _)| 24.0 + text_width(name, FONT))
            .sum();
        let (w, h) = (
            (left + width + 30.0).max(left + legend_w + 10.0).ceil(),
            axis_y + 60.0,
        );
        let max = self.max_total();
        let scale = if max > 0.0 { width / max } else { 0.0 };
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot bars\" id=\"{}\" viewBox=\"0 0 {} {}\" \
             width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"{}\" font-family=\"sans-serif\" font-size=\"{FONT}\">\
             <title>{}</title><text x=\"10\" y=\"18\" font-size=\"15\" font-weight=\"bold\">{}</text>",
            esc(&self.id),
            px(w),
            px(h),
            px(w),
            px(h),
            esc(&self.title),
            esc(&self.title),
            esc(&self.title)
        );
        for (i, label) in self.bars.iter().enumerate() {
            let y = top + i as f64 * (bar + gap);
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
                px(left - 6.0),
                px(y + bar / 2.0 + 4.0),
                esc(label)
            );
            let mut x = left;
            for (k, (name, values)) in self.segments.iter().enumerate() {
                let v = values.get(i).copied().unwrap_or(0.0).max(0.0);
                let len = v * scale;
                let _ = write!(
                    s,
                    "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}: {} {} {}</title></rect>",
                    px(x),
                    px(y),
                    px(len),
                    px(bar),
                    PALETTE[k % PALETTE.len()],
                    esc(label),
                    esc(name),
                    accio_results::num::fmt3(v),
                    esc(&self.unit)
                );
                x += len;
            }
        }
        // The axis: five ticks from 0 to the longest bar.
        let _ = write!(
            s,
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#444\"/>",
            px(left),
            px(axis_y),
            px(left + width),
            px(axis_y)
        );
        for t in 0..=4 {
            let v = max * f64::from(t) / 4.0;
            let x = left + v * scale;
            let _ = write!(
                s,
                "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#444\"/>\
                 <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                px(x),
                px(axis_y),
                px(x),
                px(axis_y + 4.0),
                px(x),
                px(axis_y + 16.0),
                tick_label((v * 1000.0).round() / 1000.0)
            );
        }
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            px(left + width / 2.0),
            px(axis_y + 32.0),
            esc(&self.unit)
        );
        // Legend.
        let mut x = left;
        for (k, (name, _)) in self.segments.iter().enumerate() {
            let _ = write!(
                s,
                "<rect x=\"{}\" y=\"28\" width=\"10\" height=\"10\" fill=\"{}\"/>\
                 <text x=\"{}\" y=\"37\">{}</text>",
                px(x),
                PALETTE[k % PALETTE.len()],
                px(x + 14.0),
                esc(name)
            );
            x += 24.0 + text_width(name, FONT);
        }
        s.push_str("</svg>");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_add_up_along_each_bar_and_the_longest_fills_the_width() {
        let b = StackedBars {
            id: "b".into(),
            title: "phases".into(),
            unit: "ms per iteration".into(),
            bars: vec!["rank 0".into(), "rank 1".into()],
            segments: vec![
                ("compute".into(), vec![3.0, 2.0]),
                ("synchronize".into(), vec![1.0, 0.5]),
                ("communicate".into(), vec![0.0, 1.5]),
            ],
        };
        assert_eq!(b.max_total(), 4.0);
        let svg = b.svg();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        // rank 0: 3 + 1 of 4 units over 420 px: 315 px then 105 px.
        assert!(svg.contains("width=\"315\" height=\"22\" fill=\"#0072B2\"><title>rank 0: compute 3.00 ms per iteration"), "{svg}");
        assert!(
            svg.contains(
                "width=\"105\" height=\"22\" fill=\"#E69F00\"><title>rank 0: synchronize 1.00 ms"
            ),
            "{svg}"
        );
        assert!(svg.contains("<title>rank 1: communicate 1.50 ms"), "{svg}");
    }
}
