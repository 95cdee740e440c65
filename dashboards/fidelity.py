"""Cost and fidelity: whether each throughput figure describes the lock or the load generator.

A case whose holds were inflated by the harness (many simulated clients in one process) is
generator-bound: its throughput is a lower bound and its latencies an upper bound. This
section puts beside every measured throughput what independent clients would get (the model
1 / (mean solo hold + mean handoff gap), column ``model_acq_s``; none where either mean is unknown) and the figures no client can
distort (server CPU and commands per acquisition), plus the run's calibration floors. Every
column may be missing (older runs): "n/a", never an error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dashboards.html_bits import duration_us, e, fmt
from dashboards.load import RunData, flag, num, text

#: (column, header, format) of the per-group fidelity table after the throughput pair.
FIGURES = (
    ("hold_p50_us", "hold p50", "us"),
    ("solo_hold_p50_us", "solo hold p50", "us"),
    ("hold_inflation", "hold inflation (x solo)", "x"),
    ("handoff_p50_us", "handoff gap p50", "us"),
    ("server_cpu_us_per_acq", "server CPU per acquire", "us"),
    ("server_cmds_per_acquire", "server commands per acquire", "ratio"),
    ("client_cpu_ms_per_acq", "client CPU per acquire", "ms"),
    ("polls_per_acq", "polls per acquire", "ratio"),
    ("loop_lag_p99_us", "loop lag p99 (worst process)", "us"),
    ("loop_lag_late_share", "time loop >2 ms late", "pct"),
)


def _median(values: list[float]) -> float | None:
    """The median of a group's finite values (RunData.values: each column converted once per page)."""
    return float(np.median(values)) if values else None


def _shown(value: float | None, kind: str) -> str:
    if value is None:
        return "n/a"
    if kind == "us":
        return duration_us(value)
    if kind == "ms":
        return duration_us(value * 1_000)
    if kind == "x":
        return f"{value:.2f}x"
    return fmt(value, kind)


def bound_of(rows: pd.DataFrame | list[dict[str, Any]]) -> tuple[bool | None, str]:
    """(generator-bound in any trial, its reason); None when any trial is not measured (and none bound).

    Three states: a group is "no" only when every trial was measured and none was bound; one
    trial without the figures makes the group's answer unknown, never "no".
    """
    if isinstance(rows, list):  # RunData.rows: the table converted once for the whole page
        recs = rows
    else:  # two columns, not every column of every row as a dict
        recs = rows[[c for c in ("generator_bound", "generator_bound_reason") if c in rows.columns]].to_dict(
            "records"
        )
    flags = [flag(r, "generator_bound") for r in recs]
    reasons = [
        (f, t.strip())
        for f, t in zip(flags, (text(r, "generator_bound_reason") for r in recs), strict=True)
        if t and t.strip()
    ]
    if any(f is True for f in flags):
        return True, next((t for f, t in reasons if f is True), "")
    if any(f is None for f in flags):
        return None, next((t for f, t in reasons if f is None), "")
    return False, ""


def _floors(run: RunData) -> str:
    calibration = run.meta.get("calibration")
    floors: Any = calibration.get("floors") if isinstance(calibration, dict) else None
    if not isinstance(floors, dict) or not floors:
        return '<p class="caption" id="floors">Calibration floors: n/a (run.json has no calibration).</p>'
    rows = "".join(
        f'<tr data-row="{e(b)}"><td>{e(b)}</td><td>{e(f.get("op", "n/a"))}</td>'
        f'<td class="num">{_shown(num(f, "p50_us"), "us")}</td></tr>'
        for b, f in floors.items()
        if isinstance(f, dict)
    )
    return (
        '<table id="floors"><thead><tr><th>backend</th><th>floor: one round trip</th><th>p50</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>{_solo_sources(calibration)}"
    )


def _solo_sources(calibration: dict[str, Any]) -> str:
    """Where each lock's solo figure came from: measured in this run, or kept from an earlier one."""
    solo = calibration.get("solo")
    if not isinstance(solo, dict) or not solo:
        return ""
    reused = {i: s for i, s in solo.items() if isinstance(s, dict) and s.get("reused_from")}
    if not reused:
        return f'<p class="caption" id="solo-sources">Solo figures: all {len(solo)} measured in this run.</p>'
    items = "; ".join(f"{i}: {s.get('source', 'reused')}" for i, s in sorted(reused.items()))
    return (
        f'<p class="caption" id="solo-sources">Solo figures: {len(solo) - len(reused)} measured in this run, '
        f"{len(reused)} kept from an earlier run of this commit ({e(items)}).</p>"
    )


def fidelity_section(run: RunData, glabels: dict[str, str]) -> str:
    """Measured throughput beside the model, the fidelity figures and the calibration floors."""
    head = (
        "<th>impl x scenario</th><th>acquisitions/s measured</th><th>model: independent clients</th>"
        "<th>measured / model</th>"
        + "".join(f"<th>{e(h)}</th>" for _, h, _ in FIGURES)
        + "<th>generator-bound</th>"
    )
    rows = []
    for group, trials in run.groups().items():
        acq, model = _median(run.values(group, "throughput_acq_s")), _median(run.values(group, "model_acq_s"))
        bound, reason = bound_of(run.rows(trials))
        cls = ' class="num bound"' if bound else ' class="num"'
        title = f' title="generator-bound: {e(reason)}"' if bound else ""
        cells = f"<td>{e(glabels.get(group, group))}</td>"
        cells += f'<td{cls}{title} data-col="throughput_acq_s">{_shown(acq, "rate")}</td>'
        cells += f'<td class="num" data-col="model_acq_s">{_shown(model, "rate")}</td>'
        ratio = acq / model if acq is not None and model else None
        cells += f'<td class="num" data-col="ratio">{"n/a" if ratio is None else f"{ratio:.2f}"}</td>'
        for column, _, kind in FIGURES:
            value = _median(run.values(group, column))
            cells += f'<td class="num{" na" if value is None else ""}" data-col="{column}">{_shown(value, kind)}</td>'
        if bound is None:
            # not measured is never "no": say why when the run said why, else n/a (older runs)
            verdict = f'<td class="na" data-col="generator_bound">{e(reason) if reason else "n/a"}</td>'
        elif bound:
            verdict = (
                f'<td class="bound" data-col="generator_bound">yes: {e(reason or "reason not recorded")}; '
                "throughput is a lower bound, latencies an upper bound</td>"
            )
        else:
            verdict = '<td data-col="generator_bound">no</td>'
        rows.append(f'<tr data-row="{e(group)}">{cells}{verdict}</tr>')
    return (
        '<h2 id="fidelity">Cost and fidelity: the lock or the load generator?</h2>'
        '<p class="caption">Per impl x scenario, medians over trials, from cases.csv. Measured acquisitions/s '
        "beside the model <code>model_acq_s</code> = 1 / (mean solo hold + mean handoff gap): the rate "
        "independent clients would get if each grant followed the last by the measured mean gap (means, "
        "since a rate is a mean: the gap's tail counts; n/a where either mean is unknown); the distance between them is what the load generator cost. Hold inflation: "
        "contended hold p50 / solo hold p50 (1 client, same run). A generator-bound case is hatched and grey "
        'with the reason: its throughput is a lower bound, its latencies an upper bound; "not measured": no '
        'loop-lag probe or solo figures, so nobody knows (never a "no"). Loop lag: how late each Locust '
        "process's loop woke for a 1 ms timer, the worst process. Server CPU and "
        "commands per acquire come from the lock server's own statistics, which no client can distort; "
        "client CPU and polls per acquire from the clients. n/a: the run did not record that column. "
        "Floors: one round trip to each backend (run.json calibration); the machine may have been shared, "
        "so compare figures as ratios to the floor of the same run.</p>"
        f'<table id="fidelity-table"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
        + _floors(run)
    )
