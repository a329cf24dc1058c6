//! The report as text (a terminal) and as a self-contained HTML page (no script, no outside resource).

use std::fmt::Write;

use super::{Report, Verdict};

impl Report {
    /// The report for a terminal: one block per item, `PASS`/`WARN`/`FAIL`, its evidence indented, then
    /// `fix:` lines; a summary line last.
    ///
    /// ```
    /// use kubetrain_tenancy::check::{ClusterView, check};
    /// let text = check(&ClusterView::default()).to_text();
    /// assert!(text.contains("WARN  team-namespaces"));
    /// assert!(text.ends_with("0 fail\n"), "{text}");
    /// ```
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let teams = if self.team_namespaces.is_empty() {
            "none".to_owned()
        } else {
            self.team_namespaces.join(", ")
        };
        let _ = writeln!(out, "team namespaces: {teams}\n");
        for item in &self.items {
            let _ = writeln!(
                out,
                "{:<5} {}  {}",
                item.verdict.as_str().to_uppercase(),
                item.id,
                item.title
            );
            for line in &item.evidence {
                let _ = writeln!(out, "      - {line}");
            }
            if let Some(fix) = &item.fix {
                for (i, line) in fix.lines().enumerate() {
                    let _ = writeln!(out, "      {} {line}", if i == 0 { "fix:" } else { "    " });
                }
            }
        }
        let _ = writeln!(
            out,
            "\n{}: {} pass, {} warn, {} fail",
            self.verdict.as_str().to_uppercase(),
            self.summary.pass,
            self.summary.warn,
            self.summary.fail
        );
        out
    }

    /// The report as one HTML page: a verdict banner, the counts, and a table of the items with their
    /// evidence and fixes. Self-contained: inline CSS, no script, nothing loaded from elsewhere.
    /// `title` names the cluster (e.g. the API server's address).
    pub fn to_html(&self, title: &str) -> String {
        let mut rows = String::new();
        for item in &self.items {
            let evidence: String = item
                .evidence
                .iter()
                .map(|line| format!("<li>{}</li>", escape(line)))
                .collect();
            let fix = item
                .fix
                .as_deref()
                .map(|f| format!("<pre class=\"fix\">{}</pre>", escape(f)))
                .unwrap_or_default();
            let _ = writeln!(
                rows,
                "<tr id=\"item-{id}\" class=\"{v}\"><td><span class=\"badge {v}\">{V}</span></td>\
                 <td><b>{title}</b><div class=\"id\">{id}</div></td><td><ul>{evidence}</ul>{fix}</td></tr>",
                id = escape(&item.id),
                v = item.verdict.as_str(),
                V = item.verdict.as_str().to_uppercase(),
                title = escape(&item.title),
            );
        }
        let teams = if self.team_namespaces.is_empty() {
            "none".to_owned()
        } else {
            escape(&self.team_namespaces.join(", "))
        };
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>Tenancy check: {title}</title><style>{CSS}</style></head><body>\n\
             <h1>Multi-tenancy check</h1><p class=\"cluster\">{title}</p>\n\
             <p id=\"verdict\" class=\"banner {v}\">{V}</p>\n\
             <p class=\"counts\"><span class=\"badge pass\">{p} pass</span> <span class=\"badge warn\">{w} warn</span> \
             <span class=\"badge fail\">{f} fail</span></p>\n<p>Team namespaces: {teams}</p>\n\
             <table><thead><tr><th>Verdict</th><th>Item</th><th>Evidence and fix</th></tr></thead><tbody>\n{rows}\
             </tbody></table>\n<p class=\"foot\">kubetrain tenancy check; the items are described in docs/tenancy.md.</p>\n\
             </body></html>\n",
            title = escape(title),
            v = self.verdict.as_str(),
            V = self.verdict.as_str().to_uppercase(),
            p = self.summary.pass,
            w = self.summary.warn,
            f = self.summary.fail,
        )
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:1rem 1.5rem;color:#1b1f24}\
h1{margin:.2rem 0}.cluster{color:#57606a;margin:0 0 1rem;overflow-wrap:anywhere}\
.banner{font-size:1.6rem;font-weight:700;padding:.5rem 1rem;border-radius:6px;display:inline-block}\
.badge{font-weight:700;padding:.1rem .5rem;border-radius:4px;font-size:.85rem;white-space:nowrap}\
.pass{background:#dafbe1;color:#116329}.warn{background:#fff8c5;color:#7d4e00}.fail{background:#ffebe9;color:#a40e26}\
table{border-collapse:collapse;width:100%;table-layout:fixed}th,td{border-bottom:1px solid #d0d7de;padding:.5rem;\
vertical-align:top;text-align:left;overflow-wrap:anywhere}th:nth-child(1){width:5.5rem}th:nth-child(2){width:28%}\
tr.pass,tr.warn,tr.fail{background:none;color:inherit}ul{margin:0;padding-left:1.1rem}.id{color:#57606a;font-family:monospace}\
pre.fix{white-space:pre-wrap;background:#f6f8fa;border-left:3px solid #a40e26;padding:.4rem .6rem;margin:.4rem 0 0}\
.foot{color:#57606a;font-size:.85rem}";

/// Text for HTML content and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
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
