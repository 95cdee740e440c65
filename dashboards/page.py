"""Assembling the report page: metadata, tables and figure fragments into one HTML string.

Every string that comes from a results folder passes through :func:`html.escape` here
(or, for figure text, in charts.py). plotly.js is embedded once, in the head, and each
figure is a fragment that only calls ``Plotly.newPlot``, so the file opens offline.
"""

from __future__ import annotations

import html
import json
import shlex
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import plotly.offline

from dashboards.charts import over_time_figure, percentile_us, spectrum_figure, throughput_figure
from dashboards.load import RunData, case_labels, num, text

#: Checker counters whose nonzero value means the lock was unsafe in this case.
VIOLATIONS = ("overlapping_holds", "witness_violations", "oversold_units", "lost_updates")
#: Counters that are not violations by themselves but deserve a look when nonzero.
WARNINGS = ("acquire_info", "releases_not_owned")
VERDICT_CLASS = {"valid": "good", "invalid": "bad", "unknown": "unknown"}
_SUFFIX = {50.0: "p50", 90.0: "p90", 99.0: "p99", 99.9: "p999", 100.0: "max"}
_LATENCY = (("acquire", "acquire_ok"), ("release", "release"), ("hold", "hold"))
_COMPARED = (
    ("throughput_acq_s", "acquisitions/s"),
    ("throughput_ops_s", "purchases/s"),
    ("acquire_p50_us", "acquire p50 (us)"),
    ("acquire_p99_us", "acquire p99 (us)"),
    ("acquire_p999_us", "acquire p99.9 (us)"),
    ("acquire_max_us", "acquire max (us)"),
)

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em auto;
       max-width: 1280px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.kv th { text-align: left; white-space: nowrap; } table.kv table.kv { font-size: 1em; margin: 0; }
.scroll { overflow-x: auto; } code { font-size: 0.95em; word-break: break-all; }
td.bad { background: #f8d0cc; color: #8b0000; font-weight: bold; }
td.good { background: #d5f0d5; color: #185c18; } td.unknown { background: #e4e4e4; color: #444; }
td.warn { background: #fbeccb; } td.na { color: #999; }
.banner { padding: 0.8em 1em; margin: 1em 0; border-radius: 4px; font-weight: bold; }
.banner.incomplete { background: #fde2c8; border: 2px solid #d9822b; }
p.caption { font-size: 0.85em; color: #555; margin-top: 0.2em; }
ul.notes { font-size: 0.85em; color: #555; }
"""


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: float | None, kind: str = "num") -> str:
    """Human formatting of a metric; 'n/a' for a missing value."""
    if value is None:
        return "n/a"
    if kind == "pct":
        return f"{value * 100:.1f}%"
    if kind == "ratio":
        return f"{value:.3f}"
    if kind == "rate":
        return f"{value:,.1f}"
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _cell(value: float | None, kind: str = "num", cls: str = "", col: str = "") -> str:
    classes = " ".join(c for c in ("num", cls, "na" if value is None else "") if c)
    data = f' data-col="{e(col)}"' if col else ""
    return f'<td class="{classes}"{data}>{fmt(value, kind)}</td>'


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
        ("params", _value_html(meta.get("params"))),
        ("endpoints", _value_html(meta.get("endpoints"))),
        ("cases", e(f"{len(run.cases)} in cases.csv")),
    ]
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<h2>Run</h2><table class="kv" id="metadata">{body}</table>'


def status_banner(run: RunData) -> str:
    if run.status == "complete":
        return ""
    missing = run.missing_cases()
    detail = f" {len(missing)} planned case(s) have no results: {', '.join(missing)}." if missing else ""
    why = {
        "incomplete": "This run was interrupted: only the cases below finished.",
        "running": "run.json still says 'running': the run is in progress or died before finishing.",
        "failed": "The run failed: only the cases below finished.",
    }.get(run.status, "The run's status is not 'complete'.")
    return (
        f'<div class="banner incomplete" id="status-banner">Run status: {e(run.status)}. '
        f"{e(why)}{e(detail)} Numbers below cover finished cases only.</div>"
    )


def _verdict_class(verdict: str | None) -> str:
    return VERDICT_CLASS.get((verdict or "unknown").strip().lower(), "unknown")


def verdict_section(run: RunData) -> str:
    cases = run.cases
    keys = [c for c in ("impl", "workload") if c in cases.columns] or ["case"]
    counters = VIOLATIONS + WARNINGS
    head = "".join(f"<th>{e(k)}</th>" for k in keys) + "<th>cases</th>"
    head += "".join(f"<th>{e(c)}</th>" for c in counters) + "<th>verdict</th>"
    rows = []
    for key, group in cases.groupby(keys, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        key_text = ["n/a" if pd.isna(k) else str(k) for k in key]
        cells = "".join(f"<td>{e(k)}</td>" for k in key_text)
        cells += f'<td class="num">{len(group)}</td>'
        for col in counters:
            values = [v for v in (num(r, col) for _, r in group.iterrows()) if v is not None]
            total = sum(values) if values else None
            cls = ""
            if total:
                cls = "bad" if col in VIOLATIONS else "warn"
            cells += _cell(total, cls=cls, col=col)
        verdicts = [_verdict_class(text(r, "verdict")) for _, r in group.iterrows()]
        cls = "bad" if "bad" in verdicts else "unknown" if "unknown" in verdicts else "good"
        shown = sorted({(text(r, "verdict") or "unknown") for _, r in group.iterrows()})
        cells += f'<td class="{cls}" data-col="verdict">{e(", ".join(shown))}</td>'
        rows.append(f'<tr data-row="{e("|".join(key_text))}">{cells}</tr>')
    table = f'<table id="verdicts"><tr>{head}</tr>{"".join(rows)}</table>' if rows else "<p>No cases.</p>"
    return (
        "<h2>Verdicts</h2>"
        '<p class="caption">Checker counters from cases.csv, summed over the cases of each row '
        "(trials, user counts). Red: a safety violation (overlapping holds, witness violations, "
        "oversold units, lost updates). Amber: acquires with unknown outcome, or releases that "
        "found the lock no longer owned. Verdict: red invalid, green valid, grey unknown.</p>"
        f'<div class="scroll">{table}</div>'
    )


def _latency(run: RunData, row: pd.Series, family: str, hist_name: str, pct: float) -> float | None:
    value = num(row, f"{family}_{_SUFFIX[pct]}_us")
    if value is None:
        value = percentile_us(run.histogram(str(row["case"]), hist_name), pct)
    return value


def latency_section(run: RunData, labels: dict[str, str]) -> str:
    pcts = list(_SUFFIX)
    head1 = "<th rowspan=2>case</th>"
    head1 += "".join(f"<th colspan={len(pcts)}>{name} (us)</th>" for name, _ in _LATENCY)
    head1 += (
        "<th colspan=2>handoff gap (us)</th><th rowspan=2>utilization</th><th rowspan=2>Jain's index</th>"
    )
    head2 = (
        "".join(f"<th>{'max' if p == 100.0 else f'p{p:g}'}</th>" for _ in _LATENCY for p in pcts)
        + "<th>p50</th><th>p99</th>"
    )
    rows = []
    for _, row in run.cases.iterrows():
        case = str(row["case"])
        cells = f"<td>{e(labels[case])}</td>"
        for family, hist_name in _LATENCY:
            cells += "".join(_cell(_latency(run, row, family, hist_name, p)) for p in pcts)
        cells += _cell(num(row, "handoff_p50_us")) + _cell(num(row, "handoff_p99_us"))
        cells += _cell(num(row, "utilization"), "pct") + _cell(num(row, "jain_index"), "ratio")
        rows.append(f'<tr data-row="{e(case)}">{cells}</tr>')
    return (
        "<h2>Latency, handoff, utilization, fairness</h2>"
        '<p class="caption">Microseconds. acquire: invoke -> ok; release: invoke -> ok; hold: acquire ok '
        "-> release invoke; handoff gap: release ok of one holder -> acquire ok of the next on the same "
        "lock; utilization: fraction of wall time the lock was held; Jain's index: fairness of "
        "acquisitions per client (1 = equal). Values from cases.csv (computed by bench from the "
        "lockbench clients' recording); where a latency column is absent it is read from the case's "
        "HDR histogram in hist/; n/a where neither has it.</p>"
        f'<div class="scroll"><table id="latency"><tr>{head1}</tr><tr>{head2}</tr>{"".join(rows)}</table></div>'
    )


def _delta(base: float | None, new: float | None) -> str:
    if base is None or new is None or base == 0:
        return '<td class="num na">n/a</td>'
    return f'<td class="num">{(new - base) / abs(base) * 100:+.1f}%</td>'


def comparison_section(baseline: RunData, others: list[RunData]) -> str:
    parts = [
        '<h2 id="comparison">Comparison with baseline</h2>'
        f'<p class="caption">Baseline: run {e(baseline.run_id)} (commit '
        f"{e(baseline.meta.get('git_commit') or 'n/a')}). Cases are matched by case id; values from "
        "each run's cases.csv; delta = (run - baseline) / baseline.</p>"
    ]
    base_rows = {str(r["case"]): r for _, r in baseline.cases.iterrows()}
    for other in others:
        other_rows = {str(r["case"]): r for _, r in other.cases.iterrows()}
        order = list(base_rows) + [c for c in other_rows if c not in base_rows]
        rows = []
        for case in order:
            b, o = base_rows.get(case), other_rows.get(case)
            if b is None or o is None:
                where = "baseline" if b is None else "this run"
                rows.append(
                    f'<tr data-row="{e(case)}"><td>{e(case)}</td><td colspan=4>not in {where}</td></tr>'
                )
                continue
            bv, ov = text(b, "verdict"), text(o, "verdict")
            first = (
                f'<tr data-row="{e(case)}"><td rowspan={len(_COMPARED) + 1}>{e(case)}</td><td>verdict</td>'
                f'<td class="{_verdict_class(bv)}">{e(bv or "unknown")}</td>'
                f'<td class="{_verdict_class(ov)}">{e(ov or "unknown")}</td><td></td></tr>'
            )
            rows.append(first)
            for col, label in _COMPARED:
                bn, on = num(b, col), num(o, col)
                kind = "rate" if col.startswith("throughput") else "num"
                rows.append(f"<tr><td>{e(label)}</td>{_cell(bn, kind)}{_cell(on, kind)}{_delta(bn, on)}</tr>")
        parts.append(
            f"<h3>run {e(other.run_id)} vs baseline {e(baseline.run_id)}</h3>"
            '<div class="scroll"><table class="deltas"><tr><th>case</th><th>metric</th><th>baseline</th>'
            f"<th>this run</th><th>delta</th></tr>{''.join(rows)}</table></div>"
        )
    return "".join(parts)


def _figure(fig: go.Figure, title: str, caption: str, plot_title: str) -> str:
    fig.update_layout(title={"text": plot_title, "font": {"size": 13}})
    fragment = fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False})
    return f'<h2>{e(title)}</h2>{fragment}<p class="caption">{e(caption)}</p>'


def build_page(runs: list[RunData], slo_us: float | None) -> str:
    """The full HTML document for ``runs[-1]``, compared against ``runs[0]`` when there are several."""
    run = runs[-1]
    labels = case_labels(run.cases)
    slo = f" Dashed red line: SLO {slo_us:g} us." if slo_us is not None else ""
    figures = [
        _figure(
            throughput_figure(run, labels),
            "Throughput per case",
            "Acquisitions/s (successful acquires / case duration) and purchases/s (completed purchases / "
            "duration), from cases.csv columns throughput_acq_s and throughput_ops_s, computed by bench from "
            "the lockbench clients' recording.",
            "acquisitions/s and purchases/s per case (cases.csv, computed by bench)",
        ),
        _figure(
            spectrum_figure(run, labels, slo_us),
            "Acquire latency percentile spectrum",
            "Acquire latency, invoke -> ok, microseconds (log), from the HDR histograms in hist/<case>.json "
            "(acquire_ok, 1 us .. 1 h, 3 significant digits) recorded by lockbench clients; not Locust's "
            "rounded stats. x: percentile on a log scale of 1/(1-p); the last point of each line is the "
            "maximum." + slo,
            "acquire latency, invoke->ok, HDR histogram, microseconds, recorded by lockbench clients",
        ),
        _figure(
            over_time_figure(run, labels, slo_us),
            "Acquire latency and acquisitions over time",
            "Per 1-second bucket (by completion time, since the case's first acquire): acquire latency "
            "p50 (solid) and p99 (dotted), invoke -> ok in microseconds, and successful acquisitions/s. "
            "Computed by this report from history/<case>.parquet, pairing acquire invoke -> ok by client "
            "+ seq; timed-out and unknown acquires are not in the latency lines." + slo,
            "acquire latency p50/p99 and acquisitions/s per second, from history/*.parquet (invoke->ok)",
        ),
    ]
    sections = [
        status_banner(run),
        metadata_section(run),
        verdict_section(run),
        *figures,
        latency_section(run, labels),
    ]
    if len(runs) > 1:
        sections.append(comparison_section(runs[0], runs[1:]))
    notes = [n for r in runs for n in r.notes]
    if notes:
        items = "".join(f"<li>{e(n)}</li>" for n in dict.fromkeys(notes))
        sections.append(f'<h2>Notes</h2><ul class="notes" id="notes">{items}</ul>')
    title = f"lockbench report: {run.run_id}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(title)}</title><style>{CSS}</style>"
        f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script></head>'
        f"<body><h1>{e(title)}</h1>{''.join(sections)}</body></html>\n"
    )
