//! The HTML exporter: one self-contained page. Styles, plots (inline SVG) and the results
//! themselves (a JSON `<script>` block) are all in the file, so it opens anywhere with no
//! network access. A few lines of script count the plots and write a marker into the page
//! (`#accio-rendered`), which the headless-browser test reads to know that the page's
//! script ran without error. The marker also says how the browser drew the plots' text:
//! the smallest text in pixels (`data-min-font`, after the plot is scaled to the page) and
//! how many text elements reach outside their plot (`data-clipped`, a cut label).

use accio_results::model::Report;

use crate::doc::{document, Block, Plot, PlotRef, Table};
use crate::svg::esc;

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;\
max-width:1140px;padding:0 24px 48px;color:#1b1b1b;line-height:1.45}\
h1{margin:24px 0 4px;font-size:26px}h2{margin-top:36px;border-bottom:2px solid #0072B2;\
padding-bottom:4px}h3{margin-top:24px}\
.subtitle{color:#444;margin:0 0 12px}\
nav{font-size:14px;margin:8px 0 0}nav a{margin-right:14px;color:#0072B2;text-decoration:none}\
table{border-collapse:collapse;margin:10px 0;font-size:13px}\
th,td{border:1px solid #d6d6d6;padding:4px 8px;vertical-align:top}\
th{background:#f1f4f8;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums;\
white-space:nowrap}tr:nth-child(even) td{background:#fafafa}\
.note{font-size:12px;color:#555;margin:4px 0 14px;max-width:900px}\
figure.plot-box{margin:14px 0;padding:8px;border:1px solid #e3e3e3;border-radius:6px;\
display:inline-block;background:#fff;vertical-align:top}\
figure.plot-box svg{max-width:100%;height:auto;display:block}\
figcaption{font-size:12px;color:#555}p.plot-ref{font-size:14px}p.plot-ref a{color:#0072B2}\
ul.warnings li{margin:5px 0;background:#fff6e0;border-left:4px solid #E69F00;padding:3px 8px;\
list-style:none;font-size:13px}ul{padding-left:20px}\
code{background:#f3f3f3;padding:0 3px;border-radius:3px}\
footer{margin-top:40px;font-size:12px;color:#777}";

/// Runs after the page has loaded: counts the plots and the embedded figures, measures
/// the plots' text as drawn, and writes the result into `#accio-rendered`. A script error
/// leaves the marker empty.
const SCRIPT: &str = "(function(){\
var svgs=document.querySelectorAll('svg.plot'),plots=svgs.length,min=1e9,clipped=0;\
svgs.forEach(function(s){var b=s.getBoundingClientRect(),k=b.width/s.viewBox.baseVal.width;\
s.querySelectorAll('text').forEach(function(t){\
min=Math.min(min,parseFloat(getComputedStyle(t).fontSize)*k);\
var r=t.getBoundingClientRect();\
if(r.left<b.left-0.5||r.right>b.right+0.5||r.top<b.top-0.5||r.bottom>b.bottom+0.5)clipped++;});});\
var data=JSON.parse(document.getElementById('accio-results').textContent);\
var m=document.getElementById('accio-rendered');\
m.textContent='rendered: '+plots+' plots, '+data.figures.length+' figures';\
m.setAttribute('data-plots',String(plots));\
m.setAttribute('data-min-font',plots?min.toFixed(1):'-');\
m.setAttribute('data-clipped',String(clipped));\
m.setAttribute('data-ok','1');\
})();";

/// Escapes text and turns `code` spans into `<code>` elements.
fn inline(s: &str) -> String {
    let e = esc(s);
    let mut out = String::with_capacity(e.len());
    let mut parts = e.split('`');
    if let Some(first) = parts.next() {
        out.push_str(first);
    }
    let rest: Vec<&str> = parts.collect();
    // An odd number of backticks: the last one is literal.
    let pairs = rest.len() / 2 * 2;
    for (i, p) in rest.iter().enumerate() {
        if i >= pairs {
            out.push('`');
            out.push_str(p);
        } else if i % 2 == 0 {
            out.push_str("<code>");
            out.push_str(p);
            out.push_str("</code>");
        } else {
            out.push_str(p);
        }
    }
    out
}

fn table(out: &mut String, t: &Table) {
    out.push_str("<table>");
    // A key-value table has no headers: no empty header row either.
    if t.headers.iter().any(|h| !h.is_empty()) {
        out.push_str("<thead><tr>");
        for h in &t.headers {
            out.push_str(&format!("<th>{}</th>", esc(h)));
        }
        out.push_str("</tr></thead>");
    }
    out.push_str("<tbody>\n");
    for r in &t.rows {
        out.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let num = t.numeric.get(i).copied().unwrap_or(false);
            out.push_str(&format!(
                "<td{}>{}</td>",
                if num { " class=\"num\"" } else { "" },
                esc(c)
            ));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
    for n in &t.notes {
        out.push_str(&format!("<p class=\"note\">{}</p>\n", inline(n)));
    }
}

/// JSON for a `<script>` block: `<` is escaped so that no `</script>` (or `<!--`) inside a
/// string can end the block early.
fn script_json(report: &Report) -> String {
    serde_json::to_string(report)
        .expect("a report always serializes")
        .replace('<', "\\u003c")
}

/// The report as one self-contained HTML page.
pub fn html(report: &Report) -> String {
    let doc = document(report);
    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str(&format!("<title>{}</title>\n", esc(&doc.title)));
    out.push_str(&format!("<style>{STYLE}</style>\n</head>\n<body>\n"));
    out.push_str(&format!(
        "<header><h1>{}</h1>\n<p class=\"subtitle\">{}</p>\n<nav>",
        esc(&doc.title),
        inline(&doc.subtitle)
    ));
    for s in &doc.sections {
        out.push_str(&format!(
            "<a href=\"#{}\">{}</a>",
            esc(&s.id),
            esc(&s.title)
        ));
    }
    out.push_str("</nav></header>\n");
    for s in &doc.sections {
        out.push_str(&format!(
            "<section id=\"{}\">\n<h2>{}</h2>\n",
            esc(&s.id),
            esc(&s.title)
        ));
        for (i, b) in s.blocks.iter().enumerate() {
            match b {
                Block::Heading(h) => out.push_str(&format!("<h3>{}</h3>\n", esc(h))),
                Block::Para(p) => out.push_str(&format!("<p>{}</p>\n", inline(p))),
                Block::List(items) => {
                    let class = if s.id == "warnings" {
                        " class=\"warnings\""
                    } else {
                        ""
                    };
                    out.push_str(&format!("<ul{class}>\n"));
                    for i in items {
                        out.push_str(&format!("<li>{}</li>\n", inline(i)));
                    }
                    out.push_str("</ul>\n");
                }
                Block::Table(t) => table(&mut out, t),
                // A run of references is one line of links, written at its first.
                Block::Plot(Plot::Ref(_))
                    if i > 0 && matches!(s.blocks[i - 1], Block::Plot(Plot::Ref(_))) => {}
                Block::Plot(Plot::Ref(_)) => {
                    let refs: Vec<&PlotRef> = s.blocks[i..]
                        .iter()
                        .map_while(|b| match b {
                            Block::Plot(Plot::Ref(r)) => Some(r),
                            _ => None,
                        })
                        .collect();
                    let links: Vec<String> = refs
                        .iter()
                        .map(|r| {
                            format!(
                                "<a href=\"#{}\">{}</a> (in {})",
                                esc(&r.id),
                                esc(&r.title),
                                esc(&r.section)
                            )
                        })
                        .collect();
                    out.push_str(&format!(
                        "<p class=\"plot-ref\">Plot{}: {}</p>\n",
                        if refs.len() == 1 { "" } else { "s" },
                        links.join(", ")
                    ));
                }
                Block::Plot(p) => {
                    out.push_str(&format!(
                        "<figure class=\"plot-box\">{}<figcaption>{}</figcaption></figure>\n",
                        p.svg(),
                        esc(p.title())
                    ));
                }
            }
        }
        out.push_str("</section>\n");
    }
    out.push_str(
        "<footer><p>Written by accio. The results this page was drawn from are embedded \
         below as JSON (<code>#accio-results</code>); the page needs no network access.</p>\
         <p id=\"accio-rendered\"></p></footer>\n",
    );
    out.push_str(&format!(
        "<script type=\"application/json\" id=\"accio-results\">{}</script>\n",
        script_json(report)
    ));
    out.push_str(&format!("<script>{SCRIPT}</script>\n</body>\n</html>\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_spans_and_escaping() {
        assert_eq!(
            inline("run `accio bench` <now>"),
            "run <code>accio bench</code> &lt;now&gt;"
        );
        assert_eq!(inline("a ` b"), "a ` b");
    }

    #[test]
    fn embedded_json_cannot_close_the_script_block() {
        let mut r = Report::new();
        r.warnings.push("</script><script>alert(1)</script>".into());
        let page = html(&r);
        assert_eq!(
            page.matches("</script>").count(),
            2,
            "only the two real blocks"
        );
        let start = page.find("id=\"accio-results\">").unwrap() + "id=\"accio-results\">".len();
        let end = start + page[start..].find("</script>").unwrap();
        let back: Report = serde_json::from_str(&page[start..end]).unwrap();
        assert_eq!(back, r);
    }
}
