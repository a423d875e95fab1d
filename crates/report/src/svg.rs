//! Plots as inline SVG, written by hand.
//!
//! Two kinds: [`LinePlot`] (a value against message size, thread or producer count, one
//! line per series, min–max whiskers, ceilings as dashed lines) and [`Heatmap`] (a
//! ping-pong matrix). Why not the `plotters` crate: with only its SVG backend and line
//! series it adds four crates and about 12 s of compile time on one core, and it still
//! needs custom code for what these plots are about — binary size ticks (8, 64, 512, 4K),
//! min–max whiskers, a tooltip (`<title>`) on every point with its median, range and
//! ceiling. The whole of that is a few hundred lines here, with no dependency, and the
//! output is byte-stable, which snapshot tests rely on.
//!
//! Layout. Text is [`FONT`] units high in a [`WIDTH`]-unit-wide view box, and the page
//! shows a plot at that natural width (a browser shrinks it only on screens narrower than
//! about 760 px), so axis text reads at 13 px: a report at 1400 px once showed it at about
//! 7 px, because its summary drew the plots at 520 px. The legend is under the plot, in as
//! many columns as fit, each entry wrapped at word boundaries and never cut: a ceiling's
//! name says what it is, and the cut `ceiling: fs write of 2M recor…` did not.
//!
//! Colours. Each backend has one colour of the Okabe–Ito palette in every plot
//! ([`BackendColors`]); series of one colour differ by marker shape (and past six, by a
//! dotted line), so colour is never the only thing that tells two series apart.

use std::fmt::Write as _;

use accio_results::size::format_size;

/// Okabe–Ito colours (distinguishable with every common colour-vision deficiency), the
/// yellow left out for contrast on white: blue, vermillion, bluish green, reddish purple,
/// orange, sky blue, black.
pub const PALETTE: [&str; 7] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
];

/// [`PALETTE`] index of black: a ceiling shared by series of several colours.
pub const BLACK: usize = 6;

/// Backends with a colour of their own, the same in every report: shm blue, tcp
/// vermillion, mpi bluish green, cuda reddish purple (the two far apart for the two
/// backends every run has).
const BACKEND_COLORS: [(&str, usize); 4] = [("shm", 0), ("tcp", 1), ("mpi", 2), ("cuda", 3)];

/// Colours left for backends not in [`BACKEND_COLORS`], in the order first met.
const OTHER_BACKEND_COLORS: [usize; 2] = [4, 5];

/// The [`PALETTE`] index of each backend of a report: a backend has the same colour in
/// every plot of the page, and two backends of a report never share one (up to six
/// backends; a seventh would reuse a colour, its series still told apart by marker).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendColors {
    /// Backends without a fixed colour, in the order first met.
    others: Vec<String>,
}

impl BackendColors {
    /// Colours for `backends` (every backend of the report, in any order; repeats are
    /// fine).
    pub fn new<'a>(backends: impl IntoIterator<Item = &'a str>) -> BackendColors {
        let mut others: Vec<String> = Vec::new();
        for b in backends {
            if !b.is_empty()
                && !BACKEND_COLORS.iter().any(|(k, _)| *k == b)
                && !others.iter().any(|o| o == b)
            {
                others.push(b.to_string());
            }
        }
        BackendColors { others }
    }

    /// The palette index of `backend`.
    pub fn of(&self, backend: &str) -> usize {
        if let Some((_, c)) = BACKEND_COLORS.iter().find(|(k, _)| *k == backend) {
            return *c;
        }
        let i = self.others.iter().position(|o| o == backend).unwrap_or(0);
        OTHER_BACKEND_COLORS
            .get(i)
            .copied()
            .unwrap_or(OTHER_BACKEND_COLORS[i % OTHER_BACKEND_COLORS.len()])
    }
}

/// Escapes text for XML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A number for an axis label: `0.01`, `2.5`, `40`, `1000`, `1e5`.
pub fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{v:.0e}")
    } else {
        // Shortest of a few precisions that round-trips the tick value.
        for d in 0..4 {
            let s = format!("{v:.d$}");
            if (s.parse::<f64>().unwrap_or(f64::NAN) - v).abs() <= a * 1e-9 {
                return s;
            }
        }
        format!("{v:.3}")
    }
}

/// Size of axis, legend and label text, in view-box units (pixels at natural width).
pub const FONT: f64 = 13.0;
/// Size of a plot's title.
const TITLE_FONT: f64 = 15.0;
/// Distance between two lines of legend text.
const LINE_H: f64 = 17.0;

/// How wide `s` is drawn at `size` px, estimated from the advance widths of DejaVu Sans
/// (the widest common `sans-serif`: Liberation Sans and Arial are narrower), so that a
/// layout made with it leaves room on every usual font. SVG has no text measurement
/// before drawing; the browser test checks the estimate against the drawn boxes.
pub fn text_width(s: &str, size: f64) -> f64 {
    let em: f64 = s
        .chars()
        .map(|c| match c {
            ' ' | '.' | ',' | ':' | ';' | '\'' | '!' | '|' | 'i' | 'j' | 'l' | 'I' => 0.34,
            '(' | ')' | '[' | ']' | 'f' | 'r' | 't' | '-' | '/' | '\\' => 0.43,
            'm' | 'w' | 'M' | 'W' | '@' | '%' | '—' | '…' => 1.0,
            '=' | '+' | '<' | '>' | '×' | '→' | '~' => 0.84,
            'A'..='Z' => 0.76,
            _ => 0.64,
        })
        .sum();
    em * size
}

/// `s` in lines of at most `max` px at `size` px, broken at spaces; a word wider than a
/// line is broken where it must be. Joined with spaces, the lines are `s` again (when it
/// had single spaces and no such word).
pub fn wrap(s: &str, max: f64, size: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in s.split(' ') {
        let joined = if cur.is_empty() {
            word.to_string()
        } else {
            format!("{cur} {word}")
        };
        if text_width(&joined, size) <= max || cur.is_empty() && word.is_empty() {
            cur = joined;
            continue;
        }
        if !cur.is_empty() {
            lines.push(std::mem::take(&mut cur));
        }
        // A word wider than a whole line: as much of it per line as fits.
        let mut rest = word;
        while text_width(rest, size) > max {
            let mut cut = 0;
            for (i, c) in rest.char_indices() {
                if text_width(&rest[..i + c.len_utf8()], size) > max {
                    break;
                }
                cut = i + c.len_utf8();
            }
            if cut == 0 {
                cut = rest.chars().next().map_or(rest.len(), char::len_utf8);
            }
            lines.push(rest[..cut].to_string());
            rest = &rest[cut..];
        }
        cur = rest.to_string();
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

/// One point: a median and its min–max, with a tooltip.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Position on the x axis (a size in bytes, a count).
    pub x: f64,
    /// The median.
    pub y: f64,
    /// The smallest sample.
    pub lo: f64,
    /// The largest sample.
    pub hi: f64,
    /// Text shown on hover.
    pub tip: String,
}

/// A line of points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Legend text, shown whole (wrapped when long).
    pub name: String,
    /// The points, in any order (drawn sorted by x).
    pub points: Vec<Point>,
    /// A ceiling: drawn dashed, without markers or whiskers.
    pub dashed: bool,
    /// [`PALETTE`] index; series with the same index share a colour (a backend's series
    /// and its ceiling).
    pub color: usize,
    /// What tells this series apart from others of its colour: its marker shape (circle,
    /// square, triangle, diamond, triangle down, cross), and from the seventh on a dotted
    /// line; for a ceiling, its dash pattern.
    pub variant: usize,
}

/// How the x axis is scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XScale {
    /// Powers of two, labelled as byte sizes (`8`, `4K`, `2M`).
    Bytes,
    /// Powers of two, labelled as counts (`1`, `2`, `4`).
    Log2,
    /// Linear, labelled as numbers.
    Linear,
}

/// A value against a parameter, one line per series.
#[derive(Clone, Debug, PartialEq)]
pub struct LinePlot {
    /// Element id, unique in the page.
    pub id: String,
    /// Title drawn above the plot.
    pub title: String,
    /// x axis label.
    pub x_label: String,
    /// y axis label (with the unit).
    pub y_label: String,
    /// x axis scaling.
    pub x_scale: XScale,
    /// The lines.
    pub series: Vec<Series>,
}

/// Width of a plot's view box, and the width the page shows it at.
pub const WIDTH: f64 = 720.0;
/// Height of the plot area (the frame inside the axes).
const PLOT_H: f64 = 280.0;
/// Margin to the right of the frame (room for the last x tick label).
const RIGHT: f64 = 20.0;
/// Margin around the title and the legend.
const PAD: f64 = 12.0;
/// Width of a legend entry's line sample and the gap after it.
const SWATCH: f64 = 34.0;
/// Gap between legend columns.
const COL_GAP: f64 = 20.0;

/// Dash patterns of ceilings, by [`Series::variant`].
const CEILING_DASHES: [&str; 3] = ["7 4", "12 4", "7 3 2 3"];
/// Marker shapes, by [`Series::variant`].
const MARKERS: usize = 6;

/// An axis: maps values to [0, 1] and lists ticks.
struct Axis {
    log: bool,
    lo: f64,
    hi: f64,
}

impl Axis {
    fn t(&self, v: f64) -> f64 {
        let (v, lo, hi) = if self.log {
            (
                v.max(f64::MIN_POSITIVE).log10(),
                self.lo.log10(),
                self.hi.log10(),
            )
        } else {
            (v, self.lo, self.hi)
        };
        if hi > lo {
            (v - lo) / (hi - lo)
        } else {
            0.5
        }
    }
}

/// 1-2-5 steps: the nice step for about `n` intervals over `span`.
fn nice_step(span: f64, n: f64) -> f64 {
    let raw = span / n;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    mag * if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    }
}

fn linear_ticks(lo: f64, hi: f64, integers: bool) -> Vec<f64> {
    let mut step = nice_step(hi - lo, 5.0);
    if integers {
        step = step.max(1.0).round();
    }
    let first = (lo / step).ceil() * step;
    let mut v = Vec::new();
    let mut t = first;
    while t <= hi + step * 1e-9 {
        v.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    v
}

/// Ticks of a log10 axis: powers of ten, and 2 and 5 times them when the axis spans
/// fewer than three decades.
fn log10_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let mults: &[f64] = if b - a <= 2 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    let step = if b - a > 8 { 2 } else { 1 };
    let mut v = Vec::new();
    for e in a..=b {
        if (e - a) % step != 0 {
            continue;
        }
        for m in mults {
            let t = m * 10f64.powi(e);
            if t >= lo * (1.0 - 1e-9) && t <= hi * (1.0 + 1e-9) {
                v.push(t);
            }
        }
    }
    v
}

/// Ticks of a log2 axis: powers of two, every `k`-th so that at most nine show.
fn log2_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (a, b) = (lo.log2().ceil() as i32, hi.log2().floor() as i32);
    let span = (b - a).max(0);
    let k = ((span as f64) / 8.0).ceil().max(1.0) as i32;
    // Align to multiples of k (for bytes with k = 3: 8, 64, 512, 4K, ...).
    (a..=b)
        .filter(|e| e.rem_euclid(k) == 0)
        .map(|e| 2f64.powi(e))
        .collect()
}

fn fmt_px(v: f64) -> String {
    format!("{v:.1}")
}

/// The dash attribute of a series' line (empty for a solid one).
fn dash(series: &Series) -> String {
    if series.dashed {
        format!(
            " stroke-dasharray=\"{}\"",
            CEILING_DASHES[series.variant % CEILING_DASHES.len()]
        )
    } else if series.variant / MARKERS % 2 == 1 {
        " stroke-dasharray=\"2 3\"".into()
    } else {
        String::new()
    }
}

/// A marker of `series.variant`'s shape at (`x`, `y`), with `tip` on hover.
fn marker(s: &mut String, variant: usize, x: f64, y: f64, color: &str, tip: &str) {
    let tip = format!("<title>{}</title>", esc(tip));
    let (cx, cy) = (fmt_px(x), fmt_px(y));
    let path = |d: String| format!("<path d=\"{d}\" fill=\"{color}\">{tip}</path>");
    let shape = match variant % MARKERS {
        0 => format!("<circle cx=\"{cx}\" cy=\"{cy}\" r=\"3.5\" fill=\"{color}\">{tip}</circle>"),
        1 => format!(
            "<rect x=\"{}\" y=\"{}\" width=\"7\" height=\"7\" fill=\"{color}\">{tip}</rect>",
            fmt_px(x - 3.5),
            fmt_px(y - 3.5)
        ),
        2 => path(format!(
            "M{cx},{}L{},{}L{},{}Z",
            fmt_px(y - 4.5),
            fmt_px(x + 4.5),
            fmt_px(y + 3.5),
            fmt_px(x - 4.5),
            fmt_px(y + 3.5)
        )),
        3 => path(format!(
            "M{cx},{}L{},{cy}L{cx},{}L{},{cy}Z",
            fmt_px(y - 4.5),
            fmt_px(x + 4.5),
            fmt_px(y + 4.5),
            fmt_px(x - 4.5)
        )),
        4 => path(format!(
            "M{cx},{}L{},{}L{},{}Z",
            fmt_px(y + 4.5),
            fmt_px(x + 4.5),
            fmt_px(y - 3.5),
            fmt_px(x - 4.5),
            fmt_px(y - 3.5)
        )),
        _ => format!(
            "<path d=\"M{},{}L{},{}M{},{}L{},{}\" stroke=\"{color}\" stroke-width=\"2.2\">{tip}</path>",
            fmt_px(x - 4.0),
            fmt_px(y - 4.0),
            fmt_px(x + 4.0),
            fmt_px(y + 4.0),
            fmt_px(x - 4.0),
            fmt_px(y + 4.0),
            fmt_px(x + 4.0),
            fmt_px(y - 4.0)
        ),
    };
    s.push_str(&shape);
}

/// One legend entry, placed: its series, the lines of its text and its top-left corner.
struct LegendEntry<'a> {
    series: &'a Series,
    lines: Vec<String>,
    x: f64,
    y: f64,
}

/// The legend laid out under the plot from `top`, in series order: entries in as many
/// equal columns as the widest of those no wider than half the plot allows, row by row;
/// an entry wider than a column takes a row of its own, wrapped to the plot's width.
/// Returns the entries and the height used.
fn legend_layout(series: &[Series], top: f64) -> (Vec<LegendEntry<'_>>, f64) {
    let avail = WIDTH - 2.0 * PAD;
    let width = |s: &Series| SWATCH + text_width(&s.name, FONT);
    let half = (avail - COL_GAP) / 2.0;
    let col = series
        .iter()
        .map(width)
        .filter(|w| *w <= half)
        .fold(0.0, f64::max);
    let cols = if col > 0.0 {
        (((avail + COL_GAP) / (col + COL_GAP)).floor() as usize).max(1)
    } else {
        1
    };
    let col_w = (avail - COL_GAP * (cols - 1) as f64) / cols as f64;
    // Rows first: full rows of columns, and a row of its own for each wide entry.
    let mut rows: Vec<Vec<&Series>> = Vec::new();
    let mut open = false;
    for s in series {
        if width(s) > col_w {
            rows.push(vec![s]);
            open = false;
        } else if open && rows.last().is_some_and(|r| r.len() < cols) {
            rows.last_mut().expect("an open row").push(s);
        } else {
            rows.push(vec![s]);
            open = true;
        }
    }
    let mut entries = Vec::new();
    let mut y = top;
    for row in rows {
        let w = if row.len() == 1 && width(row[0]) > col_w {
            avail
        } else {
            col_w
        };
        let mut tallest = 1;
        for (i, s) in row.into_iter().enumerate() {
            let lines = wrap(&s.name, w - SWATCH, FONT);
            tallest = tallest.max(lines.len());
            entries.push(LegendEntry {
                series: s,
                lines,
                x: PAD + i as f64 * (col_w + COL_GAP),
                y,
            });
        }
        y += tallest as f64 * LINE_H + 3.0;
    }
    (entries, y - top)
}

impl LinePlot {
    /// Every point's y and range, and x: the data bounds.
    fn bounds(&self) -> Option<((f64, f64), (f64, f64))> {
        let pts = self.series.iter().flat_map(|s| s.points.iter());
        let mut x = (f64::INFINITY, f64::NEG_INFINITY);
        let mut y = (f64::INFINITY, f64::NEG_INFINITY);
        let mut any = false;
        for p in pts {
            if !(p.x.is_finite() && p.y.is_finite()) {
                continue;
            }
            any = true;
            x = (x.0.min(p.x), x.1.max(p.x));
            y = (y.0.min(p.lo.min(p.y)), y.1.max(p.hi.max(p.y)));
        }
        any.then_some((x, y))
    }

    /// Whether the plot has anything worth drawing: some series with two or more points.
    pub fn is_useful(&self) -> bool {
        self.series.iter().any(|s| !s.dashed && s.points.len() >= 2)
    }

    /// The plot as an `<svg>` element.
    pub fn svg(&self) -> String {
        let Some(((x0, x1), (y0, y1))) = self.bounds() else {
            return String::new();
        };
        let x_log = self.x_scale != XScale::Linear && x0 > 0.0;
        let x_axis = if x_log {
            // Half a step of margin on both sides so that end points are not on the frame.
            Axis {
                log: true,
                lo: x0 / 1.4,
                hi: x1 * 1.4,
            }
        } else {
            let pad = ((x1 - x0) * 0.05).max(0.5);
            Axis {
                log: false,
                lo: x0 - pad,
                hi: x1 + pad,
            }
        };
        // Log y when the values span more than a factor of 30 (latency from 8 B to 64 MiB
        // spans four decades); otherwise linear from zero, which shows ratios honestly.
        let y_log = y0 > 0.0 && y1 / y0 > 30.0;
        let y_axis = if y_log {
            Axis {
                log: true,
                lo: 10f64.powf(y0.log10().floor()),
                hi: 10f64.powf(y1.log10().ceil()),
            }
        } else {
            let hi = if y1 > 0.0 { y1 * 1.08 } else { 1.0 };
            let lo = if y0 < 0.0 { y0 * 1.08 } else { 0.0 };
            let step = nice_step(hi - lo, 5.0);
            Axis {
                log: false,
                lo: (lo / step).floor() * step,
                hi: (hi / step).ceil() * step,
            }
        };
        let x_ticks = match (x_log, self.x_scale) {
            (true, _) => log2_ticks(x_axis.lo, x_axis.hi),
            (false, XScale::Linear) => linear_ticks(x_axis.lo, x_axis.hi, false),
            (false, _) => linear_ticks(x_axis.lo, x_axis.hi, true),
        };
        let y_ticks: Vec<(f64, String)> = if y_log {
            log10_ticks(y_axis.lo, y_axis.hi)
        } else {
            linear_ticks(y_axis.lo, y_axis.hi, false)
        }
        .into_iter()
        .map(|t| (t, tick_label(t)))
        .collect();
        // Room on the left for the rotated y label and the widest y tick label.
        let widest_tick = y_ticks
            .iter()
            .map(|(_, l)| text_width(l, FONT))
            .fold(0.0, f64::max);
        let left = (FONT + 14.0 + widest_tick + 8.0).max(56.0);
        let title = wrap(&self.title, WIDTH - 2.0 * PAD, TITLE_FONT * 1.08);
        let top = PAD + title.len() as f64 * (TITLE_FONT + 4.0) + 10.0;
        let pw = WIDTH - left - RIGHT;
        let ph = PLOT_H;
        let px = |x: f64| left + x_axis.t(x) * pw;
        let py = |y: f64| top + (1.0 - y_axis.t(y)) * ph;
        let legend_top = top + ph + 2.0 * FONT + 28.0;
        let (legend, legend_h) = legend_layout(&self.series, legend_top);
        let h = (legend_top + legend_h + PAD).round();

        let mut s = String::new();
        let _ = write!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" id=\"{}\" viewBox=\"0 0 {WIDTH} {h}\" \
             width=\"{WIDTH}\" height=\"{h}\" role=\"img\" aria-label=\"{}\" font-family=\"sans-serif\" \
             font-size=\"{FONT}\">",
            esc(&self.id),
            esc(&self.title)
        );
        let _ = write!(s, "<title>{}</title>", esc(&self.title));
        let _ = write!(
            s,
            "<text class=\"title\" x=\"{}\" y=\"{}\" font-size=\"{TITLE_FONT}\" font-weight=\"bold\">",
            fmt_px(PAD),
            fmt_px(PAD + TITLE_FONT)
        );
        for (i, l) in title.iter().enumerate() {
            let _ = write!(
                s,
                "<tspan x=\"{}\" dy=\"{}\">{}</tspan>",
                fmt_px(PAD),
                if i == 0 { 0.0 } else { TITLE_FONT + 4.0 },
                esc(l)
            );
        }
        s.push_str("</text>");
        // Grid and ticks.
        s.push_str("<g class=\"grid\" stroke=\"#ddd\" stroke-width=\"1\">");
        for &t in &x_ticks {
            let x = fmt_px(px(t));
            let _ = write!(
                s,
                "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\"/>",
                fmt_px(top),
                fmt_px(top + ph)
            );
        }
        for (t, _) in &y_ticks {
            let y = fmt_px(py(*t));
            let _ = write!(
                s,
                "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\"/>",
                fmt_px(left),
                fmt_px(left + pw)
            );
        }
        s.push_str("</g>");
        let _ = write!(
            s,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>",
            fmt_px(left),
            fmt_px(top),
            fmt_px(pw),
            fmt_px(ph)
        );
        s.push_str("<g class=\"ticks\" fill=\"#222\">");
        for &t in &x_ticks {
            let label = match self.x_scale {
                XScale::Bytes => format_size(t.round() as u64),
                _ => tick_label(t),
            };
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                fmt_px(px(t)),
                fmt_px(top + ph + FONT + 5.0),
                esc(&label)
            );
        }
        for (t, label) in &y_ticks {
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
                fmt_px(left - 6.0),
                fmt_px(py(*t) + FONT * 0.35),
                esc(label)
            );
        }
        s.push_str("</g>");
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            fmt_px(left + pw / 2.0),
            fmt_px(top + ph + 2.0 * FONT + 12.0),
            esc(&self.x_label)
        );
        let _ = write!(
            s,
            "<text transform=\"translate({} {}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            fmt_px(PAD + FONT - 2.0),
            fmt_px(top + ph / 2.0),
            esc(&self.y_label)
        );
        // Series: ceilings first, so that measured lines are drawn over them.
        let mut order: Vec<&Series> = self.series.iter().filter(|s| s.dashed).collect();
        order.extend(self.series.iter().filter(|s| !s.dashed));
        for series in order {
            let color = PALETTE[series.color % PALETTE.len()];
            let mut pts: Vec<&Point> = series
                .points
                .iter()
                .filter(|p| p.x.is_finite() && p.y.is_finite() && (!y_log || p.y > 0.0))
                .collect();
            pts.sort_by(|a, b| a.x.total_cmp(&b.x));
            let _ = write!(
                s,
                "<g class=\"series{}\" data-name=\"{}\">",
                if series.dashed { " ceiling" } else { "" },
                esc(&series.name)
            );
            let line: Vec<String> = pts
                .iter()
                .map(|p| format!("{},{}", fmt_px(px(p.x)), fmt_px(py(p.y))))
                .collect();
            let _ = write!(
                s,
                "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"{}\"{} points=\"{}\"/>",
                if series.dashed { "1.5" } else { "2" },
                dash(series),
                line.join(" ")
            );
            for p in &pts {
                let (x, y) = (fmt_px(px(p.x)), fmt_px(py(p.y)));
                if series.dashed {
                    let _ = write!(
                        s,
                        "<circle cx=\"{x}\" cy=\"{y}\" r=\"5\" fill=\"transparent\"><title>{}</title></circle>",
                        esc(&p.tip)
                    );
                    continue;
                }
                let (lo, hi) = (p.lo.min(p.y), p.hi.max(p.y));
                if hi > lo && (!y_log || lo > 0.0) {
                    let (ylo, yhi) = (fmt_px(py(lo)), fmt_px(py(hi)));
                    let (xa, xb) = (fmt_px(px(p.x) - 3.0), fmt_px(px(p.x) + 3.0));
                    let _ = write!(
                        s,
                        "<path class=\"whisker\" stroke=\"{color}\" d=\"M{x},{ylo}V{yhi}M{xa},{ylo}H{xb}M{xa},{yhi}H{xb}\"/>"
                    );
                }
                marker(&mut s, series.variant, px(p.x), py(p.y), color, &p.tip);
            }
            s.push_str("</g>");
        }
        // Legend: each entry whole, its line sample (and marker) then its text.
        s.push_str("<g class=\"legend\">");
        for e in &legend {
            let color = PALETTE[e.series.color % PALETTE.len()];
            let mid = e.y + LINE_H / 2.0;
            let _ = write!(
                s,
                "<g class=\"legend-entry\" data-name=\"{}\"><line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" \
                 stroke=\"{color}\" stroke-width=\"2\"{}/>",
                esc(&e.series.name),
                fmt_px(e.x),
                fmt_px(mid),
                fmt_px(e.x + SWATCH - 8.0),
                fmt_px(mid),
                dash(e.series)
            );
            if !e.series.dashed {
                let tip = e.series.name.clone();
                marker(
                    &mut s,
                    e.series.variant,
                    e.x + (SWATCH - 8.0) / 2.0,
                    mid,
                    color,
                    &tip,
                );
            }
            let _ = write!(s, "<text y=\"{}\">", fmt_px(e.y + FONT));
            for (i, l) in e.lines.iter().enumerate() {
                let _ = write!(
                    s,
                    "<tspan x=\"{}\" dy=\"{}\">{}</tspan>",
                    fmt_px(e.x + SWATCH),
                    if i == 0 { 0.0 } else { LINE_H },
                    esc(l)
                );
            }
            s.push_str("</text></g>");
        }
        s.push_str("</g></svg>");
        s
    }
}

/// A matrix of values between endpoints (seed 003's ping-pong latency and bandwidth
/// tables), drawn as a heat map with the value in each cell.
#[derive(Clone, Debug, PartialEq)]
pub struct Heatmap {
    /// Element id, unique in the page.
    pub id: String,
    /// Title drawn above the map.
    pub title: String,
    /// Endpoint names: rows are sources, columns destinations.
    pub labels: Vec<String>,
    /// `cells[row][col]`: the median, or `None` where the pair was not measured.
    pub cells: Vec<Vec<Option<f64>>>,
    /// Unit of the values.
    pub unit: String,
    /// Whether larger is better (bandwidth) or smaller (latency): the better end is dark.
    pub higher_is_better: bool,
}

/// Colour for `t` in [0, 1] on a light-to-dark blue ramp.
fn ramp(t: f64) -> String {
    let t = t.clamp(0.0, 1.0);
    let (a, b) = ((0xef, 0xf3, 0xff), (0x08, 0x30, 0x6b));
    let mix = |x: i32, y: i32| (f64::from(x) + (f64::from(y) - f64::from(x)) * t).round() as i32;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

impl Heatmap {
    /// The map as an `<svg>` element.
    pub fn svg(&self) -> String {
        let n = self.labels.len();
        let cell = 64.0;
        let widest = self
            .labels
            .iter()
            .map(|l| text_width(l, FONT))
            .fold(text_width("cpu0", FONT), f64::max);
        let left = 10.0 + widest;
        // Column labels wider than a cell are slanted, so neighbours do not overlap.
        let slant = widest > cell - 8.0;
        let top = if slant { 34.0 + widest * 0.72 } else { 56.0 };
        // As wide as the cells, or as the title and the key under the map where wider.
        let key = format!(
            "rows: from, columns: to, {}; darker is better (log shading)",
            self.unit
        );
        let w = (left + cell * n as f64 + 20.0)
            .max(20.0 + text_width(&key, FONT))
            .max(20.0 + text_width(&self.title, TITLE_FONT * 1.08))
            .ceil();
        let h = top + cell * n as f64 + 40.0;
        let values: Vec<f64> = self.cells.iter().flatten().flatten().copied().collect();
        let (lo, hi) = values
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
                (a.min(v), b.max(v))
            });
        // Log shading when the values span more than a factor of ten.
        let log = lo > 0.0 && hi / lo > 10.0;
        let shade = |v: f64| {
            let t = if hi <= lo {
                0.5
            } else if log {
                (v.ln() - lo.ln()) / (hi.ln() - lo.ln())
            } else {
                (v - lo) / (hi - lo)
            };
            if self.higher_is_better {
                t
            } else {
                1.0 - t
            }
        };
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot heatmap\" id=\"{}\" viewBox=\"0 0 {} {}\" \
             width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"{}\" font-family=\"sans-serif\" font-size=\"{FONT}\">",
            esc(&self.id),
            fmt_px(w),
            fmt_px(h),
            fmt_px(w),
            fmt_px(h),
            esc(&self.title)
        );
        let _ = write!(
            s,
            "<title>{}</title><text x=\"10\" y=\"18\" font-size=\"{TITLE_FONT}\" font-weight=\"bold\">{}</text>",
            esc(&self.title),
            esc(&self.title)
        );
        for (j, l) in self.labels.iter().enumerate() {
            let (x, y) = (left + cell * (j as f64 + 0.5), top - 8.0);
            if slant {
                let _ = write!(
                    s,
                    "<text transform=\"translate({},{}) rotate(-45)\" text-anchor=\"start\">{}</text>",
                    fmt_px(x - 4.0),
                    fmt_px(y),
                    esc(l)
                );
            } else {
                let _ = write!(
                    s,
                    "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                    fmt_px(x),
                    fmt_px(y),
                    esc(l)
                );
            }
        }
        for (i, row) in self.cells.iter().enumerate().take(n) {
            let y = top + cell * i as f64;
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
                fmt_px(left - 6.0),
                fmt_px(y + cell / 2.0 + 4.0),
                esc(&self.labels[i])
            );
            for (j, v) in row.iter().enumerate().take(n) {
                let x = left + cell * j as f64;
                let (fill, text, tip) = match v {
                    Some(v) => {
                        let t = shade(*v);
                        (
                            ramp(t),
                            accio_results::num::fmt3(*v),
                            format!(
                                "{} → {}: {} {}",
                                self.labels[i],
                                self.labels[j],
                                accio_results::num::fmt3(*v),
                                self.unit
                            ),
                        )
                    }
                    None => (
                        "#f4f4f4".to_string(),
                        "–".to_string(),
                        format!("{} → {}: not measured", self.labels[i], self.labels[j]),
                    ),
                };
                let dark = v.is_some_and(|v| shade(v) > 0.55);
                let _ = write!(
                    s,
                    "<g class=\"cell\"><rect x=\"{}\" y=\"{}\" width=\"{cell}\" height=\"{cell}\" fill=\"{fill}\" \
                     stroke=\"#fff\"><title>{}</title></rect><text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{}\">{}</text></g>",
                    fmt_px(x),
                    fmt_px(y),
                    esc(&tip),
                    fmt_px(x + cell / 2.0),
                    fmt_px(y + cell / 2.0 + 4.0),
                    if dark { "#fff" } else { "#111" },
                    esc(&text)
                );
            }
        }
        let _ = write!(
            s,
            "<text x=\"10\" y=\"{}\" fill=\"#444\">{}; darker is better{}</text></svg>",
            fmt_px(h - 14.0),
            esc(&format!("rows: from, columns: to, {}", self.unit)),
            if log { " (log shading)" } else { "" }
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(x: f64, y: f64) -> Point {
        Point {
            x,
            y,
            lo: y * 0.9,
            hi: y * 1.1,
            tip: format!("{x}: {y}"),
        }
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(2.5), "2.5");
        assert_eq!(tick_label(40.0), "40");
        assert_eq!(tick_label(0.01), "0.01");
        assert_eq!(tick_label(1e6), "1e6");
    }

    #[test]
    fn ticks_of_each_axis_kind() {
        assert_eq!(log10_ticks(0.1, 100.0), vec![0.1, 1.0, 10.0, 100.0]);
        assert_eq!(log10_ticks(1.0, 10.0), vec![1.0, 2.0, 5.0, 10.0]);
        // 8 B .. 64 MiB: every third power of two.
        let t = log2_ticks(8.0, 64.0 * 1048576.0);
        assert_eq!(t.first(), Some(&8.0));
        assert!(
            t.len() <= 9 && t.windows(2).all(|w| w[1] == w[0] * 8.0),
            "{t:?}"
        );
        assert_eq!(
            linear_ticks(0.0, 10.0, false),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        );
        assert_eq!(linear_ticks(0.5, 2.5, true), vec![1.0, 2.0]);
    }

    #[test]
    fn line_plot_has_a_line_markers_whiskers_ceiling_and_legend() {
        let p = LinePlot {
            id: "p1".into(),
            title: "shm <bandwidth>".into(),
            x_label: "message size".into(),
            y_label: "GB/s".into(),
            x_scale: XScale::Bytes,
            series: vec![
                Series {
                    name: "shm stream".into(),
                    points: vec![pt(8.0, 0.01), pt(4096.0, 3.0), pt(2097152.0, 9.0)],
                    dashed: false,
                    color: 0,
                    variant: 0,
                },
                Series {
                    name: "ceiling: memcpy".into(),
                    points: vec![pt(8.0, 1.0), pt(2097152.0, 12.0)],
                    dashed: true,
                    color: 0,
                    variant: 0,
                },
            ],
        };
        assert!(p.is_useful());
        let svg = p.svg();
        assert!(
            svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" id=\"p1\"")
        );
        assert!(svg.ends_with("</svg>"));
        assert!(svg.contains("shm &lt;bandwidth&gt;"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(
            svg.matches("stroke-dasharray").count(),
            2,
            "ceiling line and its legend"
        );
        assert_eq!(svg.matches("class=\"whisker\"").count(), 3);
        // Byte-size ticks.
        assert!(
            svg.contains(">4K</text>") && svg.contains(">2M</text>"),
            "{svg}"
        );
        // Log y: 0.01 .. 12 spans three decades.
        assert!(
            svg.contains(">0.01</text>") && svg.contains(">100</text>"),
            "{svg}"
        );
    }

    #[test]
    fn a_single_point_plot_is_not_useful_and_an_empty_one_draws_nothing() {
        let mut p = LinePlot {
            id: "p".into(),
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            x_scale: XScale::Linear,
            series: vec![Series {
                name: "s".into(),
                points: vec![pt(1.0, 1.0)],
                dashed: false,
                color: 1,
                variant: 0,
            }],
        };
        assert!(!p.is_useful());
        p.series.clear();
        assert_eq!(p.svg(), "");
    }

    #[test]
    fn heatmap_shades_better_cells_darker() {
        let h = Heatmap {
            id: "m".into(),
            title: "latency".into(),
            labels: vec!["cpu0".into(), "cpu1".into(), "gpu0".into()],
            cells: vec![
                vec![Some(0.3), Some(1.2), None],
                vec![Some(1.2), Some(0.3), Some(4.0)],
                vec![None, Some(4.0), Some(2.0)],
            ],
            unit: "us".into(),
            higher_is_better: false,
        };
        let svg = h.svg();
        assert_eq!(svg.matches("class=\"cell\"").count(), 9);
        assert!(svg.contains("cpu0 → cpu1: 1.20 us"));
        assert!(svg.contains("cpu0 → gpu0: not measured"));
        // Lowest latency is the darkest colour, the highest the lightest.
        assert!(svg.contains(&format!("fill=\"{}\"", ramp(1.0))));
        assert!(svg.contains(&format!("fill=\"{}\"", ramp(0.0))));
        assert!(svg.contains("(log shading)"));
        // Short labels stand upright over their columns.
        assert!(!svg.contains("rotate("));
    }

    #[test]
    fn heatmap_slants_column_labels_wider_than_a_cell() {
        let labels: Vec<String> = (0..4)
            .map(|r| format!("r{r} host{} [0-1]", r / 2 + 1))
            .collect();
        let h = Heatmap {
            id: "m".into(),
            title: "bandwidth".into(),
            cells: vec![vec![Some(1.0); 4]; 4],
            labels,
            unit: "GB/s".into(),
            higher_is_better: true,
        };
        let svg = h.svg();
        assert_eq!(svg.matches("rotate(-45)").count(), 4);
        assert!(svg.contains(">r3 host2 [0-1]</text>"));
    }
}
