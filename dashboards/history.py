"""The performance-history page: one self-contained HTML file of small multiples, one per series x metric.

It draws what ``bench history`` hands it (a JSON-able dict: runs in order, series, panels,
change points, the check's findings) and imports nothing from bench, like the rest of
dashboards. plotly.js is embedded once, the data sits in one ``application/json`` block
(every ``<`` escaped, so no run.json text can close the script), and a short script draws
each panel with ``Plotly.newPlot``. Every string from a results folder is HTML-escaped,
both in the page's HTML and in the figures' text, which plotly renders as HTML.

Each point links to its run's report.html (click it; the table of runs at the bottom has
the same links); generator-bound and unknown-verdict points are hollow; change points are
dashed lines with the step and the commit range; machine classes get sections of their own.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import plotly.offline

from dashboards.page import ERROR_HOOK

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1em auto; max-width: 1400px;
       padding: 0 1em; color: #222; line-height: 1.35; }
h1 { font-size: 1.35em; margin: 0.3em 0; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1em; margin: 1.2em 0 0.2em; } h3 small { font-weight: normal; color: #666; }
.meta { color: #555; font-size: 0.9em; margin: 0.2em 0; }
.banner { padding: 0.6em 1em; margin: 0.6em 0; border-radius: 4px; font-size: 0.9em; }
.banner.bad { background: #f8d0cc; border: 2px solid #c0392b; }
.banner.warn { background: #fbeccb; border: 2px solid #d9822b; }
.banner.good { background: #d5f0d5; border: 2px solid #2e8b57; }
.banner ul { margin: 0.3em 0; padding-left: 1.2em; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(320px, 1fr)); gap: 6px; }
.hpanel { height: 210px; border: 1px solid #eee; }
.hpanel.regression { border: 2px solid #c0392b; }
table { border-collapse: collapse; font-size: 0.8em; } th, td { border: 1px solid #ccc; padding: 2px 6px; }
th { background: #f3f3f3; } code { font-size: 0.95em; }
#js-error-banner { background: #f8d0cc; border: 2px solid #c0392b; padding: 0.5em; font-weight: bold; }
"""

DRAW = """
(function () {
  var data = JSON.parse(document.getElementById("history-data").textContent);
  var runs = data.runs;
  var axis = data.order.mode === "commit" ? "runs in commit order" : "runs in start-time order";
  function fmt(v) { return v === null ? "n/a" : (Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3)); }
  data.panels.forEach(function (p) {
    var div = document.getElementById(p.div);
    var text = p.x.map(function (x, i) {
      var r = runs[x];
      var flags = p.hollow[i] ? "<br><i>generator-bound or unknown verdict</i>" : "";
      return r.id + (r.commit ? "<br>commit " + r.commit : "") + "<br>" + r.time + "<br>" + p.label + ": " +
        fmt(p.y[i]) + " " + p.unit + flags + (r.link ? "<br>click: report" : "<br>no report.html");
    });
    var trace = {
      type: "scatter", mode: "lines+markers", x: p.x, y: p.y, text: text, hoverinfo: "text",
      customdata: p.x.map(function (x) { return runs[x].link; }),
      line: {width: 1, color: "#4a78b5"},
      marker: {size: 7, color: "#4a78b5", line: {width: 1.5, color: "#4a78b5"},
               symbol: p.hollow.map(function (h) { return h ? "circle-open" : "circle"; })}
    };
    var shapes = [], notes = [];
    p.changes.forEach(function (c) {
      var x = (c.x0 + c.x1) / 2, colour = c.worse ? "#c0392b" : "#2e8b57";
      shapes.push({type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1,
                   line: {color: colour, width: 1.5, dash: "dash"}});
      notes.push({x: x, y: 1, xref: "x", yref: "paper", yanchor: "bottom", showarrow: false,
                  font: {size: 10, color: colour},
                  text: (c.step >= 0 ? "+" : "") + (100 * c.step).toFixed(1) + "% " + c.range,
                  hovertext: "p = " + c.pvalue.toPrecision(2) + ": " + fmt(c.before) + " -> " + fmt(c.after) + " " + p.unit});
    });
    var layout = {
      title: {text: p.label + (p.unit ? " (" + p.unit + ")" : ""), font: {size: 12}, x: 0.02, y: 0.97},
      margin: {l: 48, r: 10, t: 34, b: 30}, showlegend: false, shapes: shapes, annotations: notes,
      xaxis: {title: {text: axis, font: {size: 10}}, zeroline: false},
      yaxis: {zeroline: false, rangemode: p.metric === "violations" ? "tozero" : "normal"},
      hovermode: "closest"
    };
    Plotly.newPlot(div, [trace], layout, {displaylogo: false, responsive: true, modeBarButtons: [["toImage"]]});
    div.on("plotly_click", function (ev) {
      var link = ev.points && ev.points[0] && ev.points[0].customdata;
      if (link) { window.location.href = link; }
    });
  });
})();
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _escaped(value: Any) -> Any:
    """Every string HTML-escaped (plotly renders figure text as HTML), numbers and None as they are."""
    if isinstance(value, str):
        return html.escape(value, quote=True)
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    if isinstance(value, dict):
        return {k: _escaped(v) for k, v in value.items()}
    return value


def _href(link: str | None) -> str | None:
    """A relative link made safe to follow: percent-encoded, and starting with ./ or ../ so that a folder
    named like a URL scheme (``javascript:``) stays a path."""
    if not link:
        return None
    link = quote(link.replace("\\", "/"), safe="/._-~")
    return link if link.startswith(("./", "../")) else f"./{link}"


def _script_json(value: Any) -> str:
    """JSON that cannot end its <script> block or open a comment."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _check_banner(check: dict[str, Any] | None) -> str:
    if check is None:
        return ""
    code, lines = check.get("code"), check.get("lines") or []
    kind, head = {
        0: ("good", "Check: no series' newest change point is a regression beyond its rule (exit 0)."),
        1: ("bad", "Check: REGRESSION (exit 1)."),
    }.get(code, ("warn", "Check: NOT ENOUGH DATA (exit 2); this is not a pass."))
    items = "".join(f"<li><code>{_e(line)}</code></li>" for line in lines[:50])
    more = f"<li>... {len(lines) - 50} more</li>" if len(lines) > 50 else ""
    return (
        f'<div class="banner {kind}">{head}<ul>{items}{more}</ul></div>'
        if items
        else (f'<div class="banner {kind}">{head}</div>')
    )


def _skipped_banner(skipped: list[dict[str, str]]) -> str:
    if not skipped:
        return ""
    items = "".join(f"<li><code>{_e(s['path'])}</code>: {_e(s['why'])}</li>" for s in skipped)
    return f'<div class="banner warn">{len(skipped)} folder(s) skipped, not drawn:<ul>{items}</ul></div>'


def _runs_table(runs: list[dict[str, Any]]) -> str:
    rows = []
    for i, r in enumerate(runs):
        name = f'<a href="{_e(r["link"])}">{_e(r["id"])}</a>' if r.get("link") else _e(r["id"])
        rows.append(
            f"<tr><td>{i}</td><td>{name}</td><td><code>{_e(r['commit'])}</code></td><td>{_e(r['time'])}</td>"
            f"<td>{_e(r['machine_class'])}</td><td>{_e(r['status'])}</td></tr>"
        )
    return (
        f"<details><summary>All {len(runs)} runs (x = the run's place; links open its report)</summary>"
        "<table><tr><th>x</th><th>run</th><th>commit</th><th>started (UTC)</th><th>machine class</th>"
        f"<th>status</th></tr>{''.join(rows)}</table></details>"
    )


def render_history(data: dict[str, Any], out: Path) -> Path:
    """Write the page for ``data`` (see bench/history/command.py ``page_data``) to ``out``; returns it."""
    settings = data.get("settings") or {}
    panels: list[dict[str, Any]] = []
    sections: list[str] = []
    count = 0
    for mc in data.get("classes") or []:
        blocks = []
        for s in mc["series"]:
            divs = []
            for p in s["panels"]:
                div = f"h{len(panels)}"
                cls = "hpanel regression" if p.get("status") == "regression" else "hpanel"
                divs.append(f'<div class="{cls}" id="{div}" data-metric="{_e(p["metric"])}"></div>')
                panels.append({**_escaped({k: v for k, v in p.items() if k != "status"}), "div": div})
            count += 1
            params = ", ".join(f"{k}={v}" for k, v in s["params"].items())
            subtitle = f" <small>{_e(s['subtitle'])}</small>" if s.get("subtitle") else ""
            blocks.append(
                f'<section class="series"><h3 title="{_e(params)}">{_e(s["title"])}{subtitle}</h3>'
                f'<div class="grid">{"".join(divs)}</div></section>'
            )
        sections.append(
            f"<h2>Machine class <code>{_e(mc['machine_class'])}</code> ({mc['runs']} runs, "
            f"{len(mc['series'])} series)</h2>{''.join(blocks)}"
        )
    runs = [{**r, "link": _href(r.get("link"))} for r in data.get("runs") or []]
    shown = [{**_escaped({k: v for k, v in r.items() if k != "link"}), "link": r["link"]} for r in runs]
    payload = {"order": data.get("order") or {"mode": "time"}, "runs": shown, "panels": panels}
    settings_text = (
        f"Change points: E-divisive means (Apache Otava), p &lt; {_e(settings.get('max_pvalue'))}, "
        f"step &gt; {_e(round(100 * float(settings.get('min_magnitude', 0)), 2))}%, window "
        f"{_e(settings.get('window'))} runs; a point is the median of the run's trials; hollow: generator-bound "
        "or unknown verdict; dashed line: a change point with its step and commit range (red: worse, "
        f"green: better). Check rules: {_e(' '.join(settings.get('rules') or []))}; at least "
        f"{_e(settings.get('min_runs'))} runs per series."
    )
    body = (
        f'<div id="js-error-banner" hidden></div><h1>{_e(data.get("title", "Performance history"))}</h1>'
        f'<p class="meta">{len(runs)} runs, {count} series; {_e((data.get("order") or {}).get("note", ""))}; '
        f'generated {_e(data.get("generated_at", ""))}</p><p class="meta">{settings_text}</p>'
        f"{_check_banner(data.get('check'))}{_skipped_banner(data.get('skipped') or [])}"
        f"{''.join(sections) if sections else '<p>No series: the runs have no cases.</p>'}"
        f"{_runs_table(runs)}"
    )
    page = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(data.get('title', 'Performance history'))}</title><style>{CSS}</style>"
        f"<script>{ERROR_HOOK}</script>"
        f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script></head><body>{body}'
        f'<script type="application/json" id="history-data">{_script_json(payload)}</script>'
        f"<script>{DRAW}</script></body></html>"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)
    return out
