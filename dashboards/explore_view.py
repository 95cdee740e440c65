"""The shrunk schedule of a ``bench explore`` folder as a picture: its events on the failing run's hold timeline.

A schedule file says "a world pause of 2.5 s at +0 s and a restart at +0.3 s break this lock";
the reader wants to see where those events fell against the holds that went wrong. This section
draws, for each lock explore found a failure of, the violation timeline of the run that failed
(:func:`dashboards.timeline.case_views`: the holds the checkers kept in
``violations/<case>.parquet``, the history drawn around them) and marks the schedule's events on
it, each at its time after the claim of the round the violation fell in. Nothing is judged here:
the holds and the violation are the checkers', the events the schedule's own (run.json
``explore``), the round's start the fault window bench recorded in the history. A failure with no
pair of holds to draw (a lock stuck past its recovery bound) gets the schedule alone on a time
axis, with the reason in words.
"""

from __future__ import annotations

import copy
import html
import json
import math
from typing import Any

from dashboards.html_bits import e
from dashboards.load import RunData
from dashboards.timeline import COLUMNS, OPS, case_views, distinct, recorded_violations

#: The colour of the schedule's events (apart from the timeline's own amber fault windows).
EVENT_COLOUR = "#7c3aed"
HOLDER_KINDS = ("task-pause", "world-pause")


def explore_section(run: RunData) -> str:
    """The shrunk schedule of each lock explore found a failure of, drawn; "" for any other folder."""
    if run.meta.get("kind") != "explore":
        return ""
    blocks = [_block(run, impl, schedule, case, why) for impl, schedule, case, why in _findings(run)]
    if not blocks:
        return ""
    return (
        '<h2 id="explore-schedule">The schedule that breaks it</h2>'
        '<p class="caption">Each lock\'s shrunk schedule (<code>schedule.json</code>), drawn on the run that '
        "failed: purple lines are the schedule's events at their time after the claim of the round the "
        "violation fell in (a pause's bracket at the top spans its length); the lanes, holds and fault window "
        "are the violation timeline's, from the checkers' witnesses and the history.</p>"
        + "".join(blocks)
        + f"<script>{_SCRIPT}</script>"
    )


def _findings(run: RunData) -> list[tuple[str, dict[str, Any], str | None, str]]:
    """(impl, schedule, failing case, why) for every failure run.json ``explore`` records."""
    entries = run.meta.get("explore") or {}
    out: list[tuple[str, dict[str, Any], str | None, str]] = []
    for impl, entry in entries.items():
        if not isinstance(entry, dict):
            continue
        if impl == "replay":  # bench replay: the schedule is in params, the case the first run that failed
            schedule = (run.meta.get("params") or {}).get("schedule")
            failed = _failed_rows(run)
            if isinstance(schedule, dict) and failed:
                out.append((str(schedule.get("impl", "")), schedule, failed[0], "the replay failed"))
            continue
        if entry.get("found") and isinstance(entry.get("schedule"), dict):
            case = entry.get("case")
            out.append(
                (str(impl), entry["schedule"], str(case) if case else None, str(entry.get("reason") or ""))
            )
    return out


def _failed_rows(run: RunData) -> list[str]:
    rows = run.cases.to_dict("records") if not run.cases.empty else []
    return [
        str(r["case"]) for r in rows if r.get("verdict") == "invalid" or _number(r.get("explore_stuck_s"))
    ]


def _number(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return 0.0
    return out if out == out else 0.0


def _json(value: Any) -> str:
    """JSON for a <script> block: nothing in it can close the block, no NaN."""

    def clean(v: Any) -> Any:
        if isinstance(v, float):
            return round(v, 6) if math.isfinite(v) else None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(value), separators=(",", ":"), default=float).replace("</", "<\\/")


def _events_text(schedule: dict[str, Any]) -> str:
    parts = []
    for ev in schedule.get("events") or []:
        seconds = (ev.get("params") or {}).get("seconds")
        extra = f" {seconds:g}s" if ev.get("kind") in HOLDER_KINDS and seconds is not None else ""
        parts.append(f"+{float(ev.get('at', 0)):g}s {ev.get('kind')}{extra}")
    return ", ".join(parts) or "(no events)"


def _row(run: RunData, case: str | None) -> dict[str, Any] | None:
    if case is None or run.cases.empty or "case" not in run.cases:
        return None
    rows = run.cases[run.cases["case"].astype(str) == case].to_dict("records")
    return rows[0] if rows else None


def _block(run: RunData, impl: str, schedule: dict[str, Any], case: str | None, why: str) -> str:
    head = (
        f"<h3>{e(impl)}: {e(_events_text(schedule))} <small>(seed {e(schedule.get('seed'))}"
        f"{', ' + e(case) if case else ''})</small></h3>"
    )
    row = _row(run, case)
    figure = _on_timeline(run, row, schedule) if row is not None else None
    if figure is None:
        figure = _alone(schedule)
        caption = (
            f"{why or 'failed'}. No pair of holds to draw (the checkers kept no witness of this run): the "
            "schedule alone, in seconds after the claim."
        )
    else:
        caption = f"{str(figure.pop('caption')).rstrip('. ')}. The schedule: {_events_text(schedule)}."
    return (
        f'<div class="explore-schedule" data-impl="{e(impl)}">{head}'
        f'<div class="ex-plot" style="min-height:{figure["layout"]["height"]}px"></div>'
        f'<p class="caption">{e(caption)}</p>'
        f'<script type="application/json" class="ex-data">{_json(figure)}</script></div>'
    )


def _on_timeline(run: RunData, row: dict[str, Any], schedule: dict[str, Any]) -> dict[str, Any] | None:
    """The failing run's first violation timeline with the schedule's events marked; None without one."""
    views = case_views(run, row)
    if not views:
        return None
    case = str(row["case"])
    found = distinct(recorded_violations(run.violations(case)))
    history = run.history(case, COLUMNS, ops=OPS, quiet=True)
    if not found or history is None or history.empty:
        return None
    t0 = int(history["t_ns"].min())  # the timeline's own zero (case_views reads the same rows)
    at_ns = found[0][0].at_ns
    starts = sorted(
        int(t)
        for t in history.loc[
            ((history["client"] == "bench") & (history["op"] == "fault") & (history["type"] == "invoke")).to_numpy(
                dtype=bool
            ),
            "t_ns",
        ]
    )  # fmt: skip
    if not starts:
        return None
    # the round the violation fell in: the last strike that began before it (else the first)
    zero = max((t for t in starts if t <= at_ns), default=starts[0])
    figure = copy.deepcopy(views[0])
    layout = figure["layout"]
    shapes, notes = layout.setdefault("shapes", []), layout.setdefault("annotations", [])
    lo, hi = layout["xaxis"]["range"]
    for row, ev in enumerate(schedule.get("events") or []):
        x0 = (zero - t0) / 1e9 + float(ev.get("at", 0))
        seconds = float((ev.get("params") or {}).get("seconds") or 0.0)
        _mark(shapes, notes, ev, x0, seconds, row)
        lo, hi = min(lo, x0 - 0.2), max(hi, x0 + seconds + 0.2)
    layout["xaxis"]["range"] = [lo, hi]
    return figure


def _mark(
    shapes: list[dict[str, Any]],
    notes: list[dict[str, Any]],
    ev: dict[str, Any],
    x0: float,
    seconds: float,
    row: int,
) -> None:
    """One schedule event: a line across every lane, a label, and a pause's span as a bracket at the top."""
    kind = str(ev.get("kind"))
    label = f"{kind} {seconds:g}s" if kind in HOLDER_KINDS else kind
    shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x0, "x1": x0, "y0": 0, "y1": 1,
                   "line": {"color": EVENT_COLOUR, "width": 2}})  # fmt: skip
    if seconds:
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": x0, "x1": x0 + seconds, "y0": 0.96,
                       "y1": 1.0, "fillcolor": EVENT_COLOUR, "opacity": 0.3, "line": {"width": 0}})  # fmt: skip
    # each event's label a line below the last, inside the plot's top (above it stands the legend)
    notes.append({"x": x0, "y": 1, "yref": "paper", "yanchor": "top", "yshift": -4 - 15 * row, "xanchor": "left",
                  "showarrow": False, "bgcolor": "rgba(255,255,255,0.85)", "text": html.escape(f"event: {label}"),
                  "font": {"size": 11, "color": EVENT_COLOUR}})  # fmt: skip


def _alone(schedule: dict[str, Any]) -> dict[str, Any]:
    """The schedule's events on a time axis after the claim (no history drawn: no witness to draw around)."""
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    hi = 1.0
    for row, ev in enumerate(schedule.get("events") or []):
        x0 = float(ev.get("at", 0))
        seconds = float((ev.get("params") or {}).get("seconds") or 0.0)
        _mark(shapes, notes, ev, x0, seconds, row)
        hi = max(hi, x0 + seconds + 0.5)
    layout = {
        "height": 160, "margin": {"l": 10, "r": 20, "t": 60, "b": 50},
        "xaxis": {"title": {"text": "seconds after the claim"}, "range": [-0.2, hi], "zeroline": False},
        "yaxis": {"visible": False, "range": [0, 1]}, "shapes": shapes, "annotations": notes,
    }  # fmt: skip
    return {"data": [], "layout": layout}


_SCRIPT = """
(function () {
  document.querySelectorAll('.explore-schedule').forEach(function (block) {
    var fig = JSON.parse(block.querySelector('script.ex-data').textContent);
    Plotly.react(block.querySelector('.ex-plot'), fig.data, fig.layout, {displaylogo: false, responsive: true});
  });
})();
"""
