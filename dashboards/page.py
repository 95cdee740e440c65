"""Assembling the report page: metadata, tables and figure fragments into one HTML string.

Every string that comes from a results folder passes through :func:`html.escape` here
(or, for figure text, in charts.py). plotly.js is embedded once, in the head, and each
figure is a fragment that only calls ``Plotly.newPlot``, so the file opens offline.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import plotly.io
import plotly.offline

from dashboards.arrivals import arrivals_section
from dashboards.charts import (
    SUMMARY_ABOVE,
    fairness_figure,
    handoff_utilization_figure,
    over_time_figure,
    percentile_us,
    spectrum_figure,
    throughput_figure,
    with_white_template,
)
from dashboards.compare import (
    deltas_section,
    fairness_table,
    group_labels,
    metadata_diff_section,
    round_trips_section,
    run_labels,
    runs_section,
    verdict_matrix_section,
)
from dashboards.decision import contradictions_banner, decision_section, no_fault_banner
from dashboards.explore_view import explore_section
from dashboards.fidelity import fidelity_section
from dashboards.first_screen import FIRST_CSS, first_screen_section, load_sources
from dashboards.grid import GRID_CSS, safety_grid_section
from dashboards.html_bits import VIOLATIONS, WARNINGS, duration_us, e, verdict_word, wrap
from dashboards.html_bits import cell as _cell
from dashboards.html_bits import verdict_class as _verdict_class
from dashboards.load import RunData, case_labels, flag, gc_paused, num, scenario_of, text
from dashboards.matrix import scenario_matrix_section
from dashboards.params import applicable_params, param_differences
from dashboards.timeline import timeline_section

_SUFFIX = {50.0: "p50", 90.0: "p90", 99.0: "p99", 99.9: "p999", 100.0: "max"}
_LATENCY = (("acquire", "acquire_ok"), ("release", "release"), ("hold", "hold"))

#: Records JavaScript errors (a chart that failed) on the page itself, visibly, and for tests.
ERROR_HOOK = """
window.lockbenchErrors = [];
window.addEventListener("error", function (ev) {
  window.lockbenchErrors.push(String(ev.message || ev));
  document.documentElement.setAttribute("data-js-errors", String(window.lockbenchErrors.length));
  var b = document.getElementById("js-error-banner");
  if (b) { b.hidden = false; b.textContent = "A chart failed to render: " + ev.message; }
});
"""

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1em auto;
       max-width: 1340px; padding: 0 1em; color: #222; line-height: 1.35; }
h1 { font-size: 1.35em; margin: 0.3em 0; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 3px 6px; vertical-align: top; overflow-wrap: break-word; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.num small, td.num br { white-space: normal; } td.num small { display: inline-block; max-width: 13em; }
table.kv th { text-align: left; } table.kv table.kv { font-size: 1em; margin: 0; }
.scroll { overflow-x: auto; } code { font-size: 0.95em; word-break: break-all; }
td.bad { background: #f8d0cc; color: #8b0000; font-weight: bold; }
td.good { background: #d5f0d5; color: #185c18; } td.unknown { background: #e4e4e4; color: #444; }
td.warn { background: #fbeccb; } td.na { color: #999; } td.key { white-space: nowrap; }
td.mcell { min-width: 6em; } td.mcell small { font-weight: normal; }
td.bound, span.bound { color: #777; background: repeating-linear-gradient(45deg, #eee, #eee 4px, #fafafa 4px, #fafafa 8px); }
small.boundnote { color: #777; font-style: italic; }
.banner { padding: 0.6em 1em; margin: 0.6em 0; border-radius: 4px; }
.banner.incomplete { background: #fde2c8; border: 2px solid #d9822b; font-weight: bold; }
.banner.error { background: #f8d0cc; border: 2px solid #c0392b; font-weight: bold; }
.banner.nofault { background: #eef3fb; border: 2px solid #6b8fc9; font-size: 0.9em; }
.banner.contradicts { background: #f8d0cc; border: 2px solid #c0392b; font-size: 0.9em; }
.banner.params { background: #fff6d6; border: 2px solid #c9a227; font-size: 0.9em; }
.banner ul { margin: 0.3em 0 0 0; }
td.cmds { min-width: 14em; } td.worse { background: #fbe3e0; } td.better { background: #e3f4e3; } small { color: #666; }
p.caption { font-size: 0.85em; color: #555; margin-top: 0.2em; }
ul.notes { font-size: 0.85em; color: #555; }
#decision-details { width: 100%; font-size: 0.8em; }
#decision-details td.sentence { min-width: 14em; } #decision-details td.safety { min-width: 20em; }
#decision-details td[data-col="acq_s"] { min-width: 12em; } #decision-details td[data-col="acq_s"] small { max-width: none; }
#decision-details tbody th { white-space: nowrap; text-align: left; } #decision-details thead th { overflow-wrap: normal; }
.chip { display: inline-block; border-radius: 3px; padding: 0 4px; margin: 1px 2px 1px 0; font-size: 0.95em;
        white-space: nowrap; }
.chip.good { background: #d5f0d5; color: #185c18; } .chip.bad { background: #f8d0cc; color: #8b0000; font-weight: bold; }
.chip.warn { background: #fbeccb; color: #6b4a00; } .chip.unknown { background: #e4e4e4; color: #444; }
.chip.untested { background: #eeeeee; color: #777; border: 1px dashed #aaa; }
.chip.thin { background: #eef7ee; color: #4d6b4d; border: 1px dashed #9cc59c; }
.chip.stuck { background: #e3d3f2; color: #4b2a6b; } .chip.nottested { background: #f4f4f4; color: #888; } .chip.baseline { background: #eef2f7; color: #4a5a6a; }
.chip.contradicts { outline: 2px solid #c0392b; }
ul.evidence { margin: 2px 0 0 0; padding-left: 1.1em; font-size: 0.92em; color: #555; }
th.sortable { cursor: pointer; } th.sortable::after { content: " \\2195"; color: #aaa; }
"""

#: Sorts a table with class sortable-table by the clicked header: data-sort when present (numbers first).
SORT_SCRIPT = """
document.addEventListener("click", function (ev) {
  var th = ev.target.closest ? ev.target.closest("th.sortable") : null;
  if (!th) { return; }
  var table = th.closest("table"), body = table.tBodies[0], col = Number(th.dataset.sortCol);
  var dir = th.dataset.dir === "asc" ? -1 : 1;
  th.dataset.dir = dir === 1 ? "asc" : "desc";
  var key = function (tr) {
    var cell = tr.children[col], v = cell.dataset.sort;
    if (v === undefined) { v = cell.textContent; }
    var n = parseFloat(v);
    return isNaN(n) ? [1, String(v).toLowerCase()] : [0, n];
  };
  Array.from(body.rows).sort(function (a, b) {
    var x = key(a), y = key(b);
    if (x[0] !== y[0]) { return x[0] - y[0]; }
    return (x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0) * dir;
  }).forEach(function (tr) { body.appendChild(tr); });
});
"""


def _value_html(value: Any) -> str:
    if isinstance(value, dict):
        if not value:
            return "<i>none</i>"
        rows = "".join(f"<tr><th>{e(k)}</th><td>{_value_html(v)}</td></tr>" for k, v in value.items())
        return f'<table class="kv">{rows}</table>'
    if isinstance(value, list) and all(isinstance(v, str | int | float | bool) for v in value):
        return e(", ".join(str(v) for v in value)) if value else "<i>none</i>"
    if isinstance(value, list):
        return f"<code>{e(json.dumps(value))}</code>"
    if value is None or value == "":
        return '<span class="na">n/a</span>'
    return e(value)


def _command(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = shlex.join(value)
    return f"<code>{e(value)}</code>" if value else '<span class="na">n/a</span>'


def _params_html(meta: dict[str, Any]) -> str:
    applies, unused = applicable_params(meta)
    if not isinstance(meta.get("params"), dict):
        return _value_html(meta.get("params"))
    shown = _value_html(applies)
    if unused:
        shown += (
            f"<details><summary>{len(unused)} recorded option(s) that do not apply to this run's "
            f"workloads</summary>{_value_html(unused)}</details>"
        )
    return shown


def metadata_section(run: RunData) -> str:
    meta = run.meta
    rows = [
        ("run", e(run.run_id)),
        ("status", e(run.status)),
        ("command", _command(meta.get("command"))),
        ("git commit", _value_html(meta.get("git_commit"))),
        ("started at", _value_html(meta.get("started_at"))),
        ("finished at", _value_html(meta.get("finished_at"))),
        ("host", _value_html(meta.get("host"))),
        ("versions", _value_html(meta.get("versions"))),
        ("params", _params_html(meta)),
        ("endpoints", _value_html(meta.get("endpoints"))),
        ("cases", e(f"{len(run.cases)} in cases.csv")),
    ]
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<h2>Run</h2><table class="kv" id="metadata">{body}</table>'


#: Parameter differences listed in the banner; the rest fold away so the decision table stays on screen.
_SHOWN_DIFFERENCES = 6


def params_banner(runs: list[RunData], rlabels: list[str], differences: list[tuple[str, list[str]]]) -> str:
    """For a comparison: the parameters that differ between the runs, first, before any figure."""
    if len(runs) < 2:
        return ""
    if not differences:
        return (
            '<div class="banner params" id="params-banner">The compared runs used the same parameters '
            "(run.json params that apply to their workloads).</div>"
        )
    items = [
        f'<li data-param="{e(k)}"><b>{e(k)}</b>: '
        + " → ".join(f"{e(v)} ({e(label)})" for v, label in zip(values, rlabels, strict=True))
        + "</li>"
        for k, values in differences
    ]
    more = (
        f"<details><summary>{len(items) - _SHOWN_DIFFERENCES} more</summary><ul>"
        f"{''.join(items[_SHOWN_DIFFERENCES:])}</ul></details>"
        if len(items) > _SHOWN_DIFFERENCES
        else ""
    )
    return (
        '<div class="banner params" id="params-banner">The compared runs differ in their parameters, so '
        "their figures differ for that reason too: no change below is coloured as better or worse."
        f"<ul>{''.join(items[:_SHOWN_DIFFERENCES])}</ul>{more}</div>"
    )


def damage_banner(run: RunData) -> str:
    """A red banner listing the damaged files and cells of a run (dashboards/load.py); "" when none."""
    if not run.damaged:
        return ""
    items = "".join(f"<li>{e(d)}</li>" for d in run.damaged[:_SHOWN_DIFFERENCES])
    more = (
        f"<p>... and {len(run.damaged) - _SHOWN_DIFFERENCES} more.</p>"
        if len(run.damaged) > _SHOWN_DIFFERENCES
        else ""
    )
    return (
        f'<div class="banner error" id="damage-banner">DAMAGED DATA in {e(run.run_id)}: the figures below '
        f"leave out or misread what is listed here; re-run the cases to trust them.<ul>{items}</ul>{more}</div>"
    )


def status_banner(run: RunData) -> str:
    if run.status == "complete":
        return ""
    missing = run.missing_cases()
    detail = f" {len(missing)} planned case(s) have no results: {', '.join(missing)}." if missing else ""
    params = run.meta.get("params") if isinstance(run.meta.get("params"), dict) else {}
    not_run = [n for n in params.get("not_run") or [] if isinstance(n, dict) and n.get("word") == "not run"]
    if not_run:  # a matrix that stopped: every planned impl x scenario it never ran, and why
        names = ", ".join(f"{n.get('impl')} x {n.get('scenario')}" for n in not_run[:10])
        more = f" (+{len(not_run) - 10} more)" if len(not_run) > 10 else ""
        detail += f" Did not run: {names}{more} ({not_run[0].get('reason') or 'no reason recorded'})."
    why = {
        "incomplete": "This run was interrupted: only the cases below finished.",
        "running": "run.json still says 'running': the run is in progress or died before finishing.",
        "interrupted": "The bench process died before finishing (a later bench found it gone): only the cases "
        "below finished.",
        "failed": "The run failed: only the cases below finished.",
    }.get(run.status, "The run's status is not 'complete'.")
    return (
        f'<div class="banner incomplete" id="status-banner">Run status: {e(run.status)}. '
        f"{e(why)}{e(detail)} Numbers below cover finished cases only.</div>"
    )


def _verdict_why(group: pd.DataFrame | list[dict[str, Any]]) -> str:
    """Under a verdict: the uncertain overlaps (clock error could explain them) and each reason given."""
    group = group.to_dict("records") if isinstance(group, pd.DataFrame) else group
    uncertain = sum(v for v in (num(r, "uncertain_overlaps") for r in group) if v)
    reasons = list(dict.fromkeys(t for t in (text(r, "verdict_reason") for r in group) if t))
    out = f"<br><small>{int(uncertain):,} uncertain overlaps</small>" if uncertain else ""
    return out + "".join(f'<br><small class="reason">{e(t)}</small>' for t in reasons[:3])


def verdict_section(run: RunData) -> str:
    cases = run.cases
    # fenced and unfenced runs of a workload are different rows: their counters must not add up
    by_scenario = "workload" in cases.columns or "scenario" in cases.columns
    keys = [c for c in ("impl", "scenario") if c in cases.columns or (c == "scenario" and by_scenario)] or [
        "case"
    ]
    counters = VIOLATIONS + WARNINGS
    head = "".join(f"<th>{e(k)}</th>" for k in keys) + "<th>cases</th>"
    head += "".join(f"<th>{wrap(c)}</th>" for c in counters) + "<th>verdict</th>"

    def key_of(row: dict[str, Any], column: str) -> Any:
        value = scenario_of(row) if column == "scenario" else row.get(column)
        return None if value is None or (not isinstance(value, str) and pd.isna(value)) else value

    # rows as dicts grouped in first-seen order (a pandas groupby sliced all ~140 columns per group)
    grouped: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in run.rows(cases):
        grouped.setdefault(tuple(key_of(row, k) for k in keys), []).append(row)
    rows = []
    for key, recs in grouped.items():
        key_text = ["n/a" if k is None else str(k) for k in key]
        cells = "".join(f'<td class="key">{e(k)}</td>' for k in key_text)
        cells += f'<td class="num">{len(recs)}</td>'
        for col in counters:
            values = [v for v in (num(r, col) for r in recs) if v is not None]
            total = sum(values) if values else None
            cls = ""
            if total:
                cls = "bad" if col in VIOLATIONS else "warn"
            cells += _cell(total, cls=cls, col=col)
        verdicts = [_verdict_class(text(r, "verdict")) for r in recs]
        cls = "bad" if "bad" in verdicts else "unknown" if "unknown" in verdicts else "good"
        shown = sorted({verdict_word(text(r, "verdict"), text(r, "verdict_reason")) for r in recs})
        cells += f'<td class="{cls}" data-col="verdict">{e(", ".join(shown))}{_verdict_why(recs)}</td>'
        rows.append(f'<tr data-row="{e("|".join(key_text))}">{cells}</tr>')
    table = f'<table id="verdicts"><tr>{head}</tr>{"".join(rows)}</table>' if rows else "<p>No cases.</p>"
    return (
        "<h2>Verdicts</h2>"
        '<p class="caption">Checker counters from cases.csv, summed over the cases of each row '
        "(trials, user counts). Red: a safety violation (overlapping holds, witness violations, "
        "oversold units, lost updates). Amber: acquires with unknown outcome, or releases that "
        "found the lock no longer owned. Verdict: red invalid, green valid, grey unknown.</p>"
        f"{table}"
    )


def _latency(run: RunData, row: pd.Series, family: str, hist_name: str, pct: float) -> float | None:
    value = num(row, f"{family}_{_SUFFIX[pct]}_us")
    if value is None:
        value = percentile_us(run.histogram(str(row["case"]), hist_name), pct)
    return value


#: Percentiles shown per latency family: the acquire tail in full, release and hold at p50/p99/max.
_SHOWN_PCTS = {
    "acquire": (50.0, 90.0, 99.0, 99.9, 100.0),
    "release": (50.0, 99.0, 100.0),
    "hold": (50.0, 99.0, 100.0),
}


def latency_section(run: RunData, labels: dict[str, str]) -> str:
    head1 = "<th rowspan=2>case</th>"
    head1 += "".join(f"<th colspan={len(_SHOWN_PCTS[name])}>{name}</th>" for name, _ in _LATENCY)
    head1 += "<th colspan=2>handoff gap</th><th rowspan=2>utilization</th><th rowspan=2>Jain's index</th>"
    head2 = (
        "".join(
            f"<th>{'max' if p == 100.0 else f'p{p:g}'}</th>"
            for name, _ in _LATENCY
            for p in _SHOWN_PCTS[name]
        )
        + "<th>p50</th><th>p99</th>"
    )
    rows = []
    for row in run.cases.to_dict("records"):
        case = str(row["case"])
        bound = flag(row, "generator_bound") is True
        cls = "bound" if bound else ""
        reason = text(row, "generator_bound_reason") or "reason not recorded"
        mark = f'<br><small class="boundnote">generator-bound: {e(reason)}</small>' if bound else ""
        cells = f"<td>{e(labels[case])}{mark}</td>"
        for family, hist_name in _LATENCY:
            cells += "".join(
                _cell(_latency(run, row, family, hist_name, p), "us", cls=cls) for p in _SHOWN_PCTS[family]
            )
        cells += _cell(num(row, "handoff_p50_us"), "us", cls=cls) + _cell(
            num(row, "handoff_p99_us"), "us", cls=cls
        )
        cells += _cell(num(row, "utilization"), "pct") + _cell(num(row, "jain_index"), "ratio")
        rows.append(f'<tr data-row="{e(case)}">{cells}</tr>')
    return (
        "<h2>Latency, handoff, utilization, fairness</h2>"
        '<p class="caption">Durations in µs, ms or s as marked. acquire: invoke -> ok; release: invoke -> ok; '
        "hold: acquire ok -> release invoke; handoff gap: release ok of one holder -> acquire ok of the next "
        "on the same lock; utilization: fraction of wall time the lock was held; Jain's index: fairness of "
        "acquisitions per client (1 = equal). Values from cases.csv (computed by bench from the "
        "lockbench clients' recording); where a latency column is absent it is read from the case's "
        "HDR histogram in hist/; n/a where neither has it. Grey, hatched rows were generator-bound: "
        "their latencies are an upper bound.</p>"
        f'<table id="latency"><tr>{head1}</tr><tr>{head2}</tr>{"".join(rows)}</table>'
    )


def _figure(fig: go.Figure | dict, title: str, caption: str, plot_title: str) -> str:
    """A figure's section: heading, the plot (it calls the page's one plotly.js), caption.

    ``fig`` may be plain JSON (data, layout) already: it is written as is, unvalidated
    (charts.over_time_figure builds hundreds of lines that way).
    """
    if isinstance(fig, dict):
        fig["layout"]["title"] = {"text": plot_title, "font": {"size": 13}}
    else:
        fig.update_layout(title={"text": plot_title, "font": {"size": 13}})
        fig = fig.to_dict()  # what plotly.io.to_html does with a figure, before its template goes in
    fragment = plotly.io.to_html(
        with_white_template(fig), full_html=False, include_plotlyjs=False, config={"displaylogo": False},
        validate=False,
    )  # fmt: skip
    return f'<h2>{e(title)}</h2>{fragment}<p class="caption">{e(caption)}</p>'


def _comparison_figures(
    runs: list[RunData], glabels: dict[str, str], rlabels: list[str], slo_us: float | None
) -> tuple[str, str, str]:
    """Throughput, the latency spectrum and handoff/utilization: every run shown, the first the baseline."""
    several = len(runs) > 1
    slo = f" Dashed red line: SLO {duration_us(slo_us)}." if slo_us is not None else ""
    across = " Every run is shown; the first is the baseline." if several else ""
    return (
        _figure(
            throughput_figure(runs, glabels, rlabels),
            "Throughput per impl x scenario",
            "Acquisitions/s (successful acquires / steady-state duration) and, for the flash sale, purchases/s, "
            "from cases.csv (throughput_acq_s, throughput_ops_s, computed by bench from the lockbench "
            "clients' recording), highest first. Bar: median over the trials; whiskers: min and max trial. "
            "Hatched, pale bars were generator-bound (the load generator was the limit: a lower bound; hover "
            "for the reason). Black dash: the model, what independent clients would get "
            "(model_acq_s = 1 / (mean solo hold + mean handoff gap)), where recorded." + across,
            "acquisitions/s and purchases/s, median over trials (cases.csv, computed by bench)",
        ),
        _figure(
            spectrum_figure(runs, glabels, rlabels, slo_us),
            "Acquire latency percentile spectrum",
            "Acquire latency, invoke -> ok, milliseconds (log), from the HDR histograms in hist/ (acquire_ok, "
            "1 us .. 1 h, 3 significant digits) recorded by lockbench clients, all trials of an impl x "
            "workload merged exactly (HDR add); not Locust's rounded stats. x: percentile on a log scale "
            "of 1/(1-p); the last point of each line is the maximum. Thin, pale lines marked generator-bound: "
            "the load generator inflated these latencies (an upper bound)."
            + (" One colour per impl; dashed: baseline, solid: later run." if several else "")
            + slo,
            "acquire latency, invoke->ok, HDR histogram, milliseconds, recorded by lockbench clients",
        ),
        _figure(
            handoff_utilization_figure(runs, glabels, rlabels),
            "Handoff gap and utilization per impl",
            "Handoff gap: from one holder's release ok to the next holder's acquire ok on the same lock "
            "(milliseconds, p50 and p99 over the case); utilization: fraction of the steady-state window "
            "during which the lock was held. From cases.csv (handoff_p50_us, handoff_p99_us, "
            "utilization, computed by bench from the history). Bar: median over trials; whiskers: min "
            "and max trial." + across,
            "handoff gap p50/p99 (ms) and utilization, median over trials (cases.csv, computed by bench)",
        ),
    )


def _last_run_figures(
    run: RunData, several: bool, glabels: dict[str, str], slo_us: float | None
) -> tuple[str, str]:
    """Acquire latency and acquisitions over time, and fairness: the last run only (from its history files)."""
    slo = f" Dashed red line: SLO {duration_us(slo_us)}." if slo_us is not None else ""
    last = f" Last run ({e(run.run_id)}) only." if several else ""
    return (
        _figure(
            over_time_figure(run, glabels, slo_us),
            "Acquire latency and acquisitions over time",
            "Per 1-second bucket (by completion time, since the case's own first acquire; each bucket a flat "
            "step, the last one ending where the case's acquires end, so cases of equal length end "
            "together): acquire latency p50 (solid) and p99 (dotted), invoke -> ok in "
            "milliseconds, and successful acquisitions/s (bottom). One colour per impl x scenario: with "
            "several trials, each point is the median over the trials of that trial's own value for the "
            "second (each trial timed from its own first acquire; hover for how many trials). Computed "
            "by this report from history/<case>.parquet, pairing acquire invoke -> ok by client + seq; "
            "timed-out and unknown acquires are not in the latency lines. Shading, in the line's "
            "colour, on the same clock: a server fault window (history op 'fault': from the fault's "
            "start to the server being back), darker, with a border so a short one stays visible; a "
            "holder paused (op 'pause', lease-expiry), light; a dash-dot vertical line: a holder killed "
            "(op 'crash'). With trials, every trial's windows are drawn, so darker shading is where "
            "several trials' windows overlap. Each appears once in the legend; clicking an impl x "
            "scenario hides its lines and its shading together. With more than "
            f"{SUMMARY_ABOVE} impl x scenario lines (a matrix), one thick line per backend x scenario is "
            "drawn, per second the median over its locks' lines; each lock's own lines and shading are "
            "in the chart, hidden: click its legend entry to show them." + slo + last,
            "acquire latency p50/p99 and acquisitions/s per second, from history/*.parquet (invoke->ok); "
            "shaded: fault windows",
        ),
        _figure(
            fairness_figure(run, glabels),
            "Fairness: acquisitions per client",
            "Successful acquires per client divided by the fair share (the mean over the clients), clients "
            "sorted from most to fewest, on a log axis so one client that took most acquisitions does not "
            "flatten the other lines (trials pooled: each trial's clients are separate clients; clients that "
            "never got the lock sit on the '0 (none)' line), from history/<case>.parquet. A flat line at 1 is "
            "fair; a steep one means some clients starve (hover for the counts). Jain's "
            "index (in the legend; (sum x)^2 / (n sum x^2), 1 = equal) is the median over trials from "
            "cases.csv." + last,
            "successful acquires per client / fair share, sorted, log, from history/*.parquet",
        ),
    )


def _sections(
    runs: list[RunData], rlabels: list[str], glabels: dict[str, str], figures: list[str], sources: Any
) -> list[str]:
    """The page's sections in reading order: banners, the answers (safety, decision, why red), then the figures."""
    run = runs[-1]
    several = len(runs) > 1
    labels = case_labels(run.cases)
    differences = param_differences([r.meta for r in runs]) if several else []
    sections = [
        '<div class="banner error" id="js-error-banner" hidden></div>',
        *(damage_banner(r) for r in runs),
        *(status_banner(r) for r in runs),
        params_banner(runs, rlabels, differences),
        contradictions_banner(run),
        no_fault_banner(run, matrix_answers=bool(sources)),
        safety_grid_section(run),
        first_screen_section(run, sources),
        decision_section(run),
        timeline_section(run),  # why each red: dashboards/timeline.py
        explore_section(run),  # bench explore's shrunk schedule on its failing run; "" otherwise
        scenario_matrix_section(run, several),
    ]
    if several:
        sections += [runs_section(runs, rlabels), verdict_matrix_section(runs, rlabels, glabels)]
    sections.append(verdict_section(run))
    if several:
        sections.append(deltas_section(runs, rlabels, glabels, params_differ=bool(differences)))
    sections.append(fidelity_section(run, glabels))
    sections += figures[:4]
    sections.append(arrivals_section(runs))  # open-model cases only; "" otherwise
    sections += [figures[4], fairness_table(runs, rlabels, glabels)]
    sections.append(round_trips_section(runs, rlabels, glabels))
    sections.append(latency_section(run, labels))
    if several:
        sections.append(metadata_diff_section(runs, rlabels))
    sections.append(metadata_section(run))
    return sections


def _notes_section(runs: list[RunData]) -> str:
    """Every run's notes, the generator-bound cases first; "" when there are none."""
    run = runs[-1]
    notes = [n for r in runs for n in r.notes]
    narrow = run.cases[[c for c in ("case", "generator_bound") if c in run.cases.columns]]
    bound = [str(r["case"]) for r in narrow.to_dict("records") if flag(r, "generator_bound") is True]
    if bound:
        notes.insert(0, f"load generator was the limit (generator-bound) in {len(bound)} case(s): "
                     f"{', '.join(bound)}; their throughput is a lower bound and their latencies an upper "
                     "bound (reasons in the fidelity table)")  # fmt: skip
    if notes:
        items = "".join(f"<li>{e(n)}</li>" for n in dict.fromkeys(notes))
        return f'<h2>Notes</h2><ul class="notes" id="notes">{items}</ul>'
    return ""


def build_page(
    runs: list[RunData], slo_us: float | None, safety_sources: list[dict[str, Any]] | None = None
) -> str:
    """The full HTML document: ``runs[-1]`` in detail, compared against ``runs[0]`` when there are several.

    ``safety_sources``: the matrix folders bench chose for the locks' safety (bench/results/matrices.py).
    """
    with gc_paused():
        return _build_page(runs, slo_us, safety_sources)


def _build_page(
    runs: list[RunData], slo_us: float | None, safety_sources: list[dict[str, Any]] | None
) -> str:
    run = runs[-1]
    several = len(runs) > 1
    rlabels = run_labels(runs)
    glabels = group_labels(runs)
    throughput, spectrum, handoff = _comparison_figures(runs, glabels, rlabels, slo_us)
    over_time, fairness = _last_run_figures(run, several, glabels, slo_us)
    figures = [throughput, spectrum, over_time, handoff, fairness]
    sections = _sections(runs, rlabels, glabels, figures, load_sources(safety_sources))
    sections.append(_notes_section(runs))
    title = f"lockbench report: {run.run_id}" + (f" vs baseline {runs[0].run_id}" if several else "")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(title)}</title><style>{CSS}{GRID_CSS}{FIRST_CSS}</style>"
        f'<script type="text/javascript">{ERROR_HOOK}{SORT_SCRIPT}</script>'
        f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script></head>'
        f"<body><h1>{e(title)}</h1>{''.join(sections)}</body></html>\n"
    )
