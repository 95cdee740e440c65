"""The report's open-model section: latency from arrival beside latency from start, and the shop's table.

Reads only what bench wrote: the ``arrival_*`` columns of cases.csv and the HDR histograms
``arrival`` (intended arrival -> purchase), ``arrival_start`` (actual start -> purchase) of
hist/. Runs without open-model cases get no section at all.
"""

from __future__ import annotations

import html

import plotly.graph_objects as go

from dashboards.charts import PALETTE, SPECTRUM_TICKS, spectrum_points
from dashboards.html_bits import cell as _cell
from dashboards.html_bits import e, fmt
from dashboards.load import RunData, flag, num, scenario_of, text

#: (heading, cases.csv column, format) of the shop-owner table.
SHOP_COLUMNS = (
    ("arrivals", "arrival_count", "num"),
    ("offered /s", "arrival_offered_s", "rate"),
    ("served", "arrival_served", "num"),
    ("sold out", "arrival_sold_out", "num"),
    ("gave up", "arrival_gave_up", "num"),
    ("failed", "arrival_failed", "num"),
    ("rejected (in-flight cap)", "arrival_rejected_in_flight", "num"),
    ("unfinished", "arrival_unfinished", "num"),
    ("oversold units", "oversold_units", "num"),
    ("sold out after (s)", "arrival_sellout_s", "rate"),
    ("every arrival p50 (us)", "arrival_all_p50_us", "num"),
    ("every arrival p99 (us)", "arrival_all_p99_us", "num"),
    ("censored (gave up, turned away, unfinished)", "arrival_censored", "num"),
    ("served: arrival->purchase p50 (us)", "arrival_p50_us", "num"),
    ("served: arrival->purchase p99 (us)", "arrival_p99_us", "num"),
    ("start->purchase p50 (us)", "arrival_start_p50_us", "num"),
    ("start->purchase p99 (us)", "arrival_start_p99_us", "num"),
    ("schedule lag p99 (us)", "arrival_schedule_lag_p99_us", "num"),
    ("order inversions", "arrival_order_inversions", "num"),
    ("inversions / grants", "arrival_order_inversion_frac", "pct"),
)
#: (histogram, legend text, line dash) of each open-model case on the chart.
_LINES = (
    ("arrival", "from intended arrival", "solid"),
    ("arrival_start", "from actual start", "dash"),
)


def _is_open(run: RunData) -> bool:
    return "arrival_count" in run.cases.columns and run.cases["arrival_count"].notna().any()


def _label(run: RunData, group: str, several: bool) -> str:
    """impl, scenario, the arrival spec of an open case, and the run's id suffix when there are several."""
    first = run.groups()[group].iloc[0]
    label = f"{text(first, 'impl') or group} {scenario_of(first)}"
    params = run.meta.get("params") if isinstance(run.meta.get("params"), dict) else {}
    if num(first, "arrival_count") is not None and params.get("arrivals"):
        label += f" {params['arrivals']}"
    return f"{label} [{run.run_id[-6:]}]" if several else label


def latency_figure(runs: list[RunData]) -> go.Figure:
    """Percentile spectra (log-log): arrival->purchase and start->purchase of every open-model case,
    and the closed-loop acquire latency (invoke->ok) of the same impls where a run has it."""
    fig = go.Figure()
    several = len(runs) > 1
    open_impls = {
        text(r, "impl")
        for run in runs
        if _is_open(run)
        for r in run.cases.to_dict("records")
        if num(r, "arrival_count")
    }
    shown = 0
    max_x = 10_000.0
    for run in runs:
        for group, rows in run.groups().items():
            impl = text(rows.iloc[0], "impl") or group
            is_open = num(rows.iloc[0], "arrival_count") is not None
            if not is_open and impl not in open_impls:
                continue
            colour = PALETTE[shown % len(PALETTE)]  # one per case; the dash tells the two lines apart
            shown += 1
            lines = _LINES if is_open else (("acquire_ok", "closed loop: acquire invoke->ok", "dot"),)
            for hist_name, what, dash in lines:
                hist = run.merged_histogram(group, hist_name)
                if hist is None:
                    continue
                points = spectrum_points(hist)
                max_x = max(max_x, points[-1][0])
                fig.add_scatter(
                    x=[p[0] for p in points],
                    y=[p[1] for p in points],
                    customdata=[f"{p[2]:.5g}%" for p in points],
                    mode="lines",
                    name=html.escape(f"{_label(run, group, several)}: {what}"),
                    line={"color": colour, "dash": dash},
                    hovertemplate="%{customdata}: %{y} us<extra>%{fullData.name}</extra>",
                )
    ticks = [t for t in SPECTRUM_TICKS if t[0] <= max_x * 1.01]
    fig.update_layout(template="plotly_white", height=460, margin={"l": 70, "r": 20, "t": 60, "b": 60})
    fig.update_xaxes(
        type="log",
        tickvals=[t[0] for t in ticks],
        ticktext=[t[1] for t in ticks],
        title="percentile (log scale of 1/(1-p))",
    )
    fig.update_yaxes(type="log", title="latency (us, log)")
    if not fig.data:
        fig.add_annotation(
            text="no arrival histograms", showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5
        )
    return fig


def shop_table(runs: list[RunData]) -> str:
    """One row per open-model case: what a shop owner asks (cases.csv ``arrival_*``)."""
    head = (
        "<th>case</th>" + "".join(f"<th>{e(h)}</th>" for h, _, _ in SHOP_COLUMNS) + "<th>generator bound</th>"
    )
    rows = []
    for run in runs:
        for row in run.cases.to_dict("records"):
            if num(row, "arrival_count") is None:
                continue
            case = str(row["case"])
            label = f"{run.run_id}: {case}" if len(runs) > 1 else case
            cells = f'<td class="key">{e(label)}</td>'
            for _, column, kind in SHOP_COLUMNS:
                value = num(row, column)
                bad = column == "oversold_units" and value
                cell = _cell(value, kind, cls="bad" if bad else "", col=column)
                censored = column.startswith("arrival_all_") and flag(row, column.replace("_us", "_censored"))
                if censored and value is not None:
                    # a buyer who gave up waited at least its patience: the figure is a lower bound
                    cell = cell.replace(">", ">at least ", 1) if cell.startswith("<td") else cell
                cells += cell
            reason = text(row, "generator_bound_reason") or ""
            cls = ' class="warn"' if reason else ""
            cells += f'<td{cls} data-col="generator_bound_reason">{e(reason) or fmt(None)}</td>'
            rows.append(f'<tr data-row="{e(case)}">{cells}</tr>')
    return f'<div class="scroll"><table id="arrivals"><tr>{head}</tr>{"".join(rows)}</table></div>'


def arrivals_section(runs: list[RunData]) -> str:
    """The whole open-model section, or "" when no run has an open-model case."""
    if not any(_is_open(run) for run in runs):
        return ""
    fig = latency_figure(runs)
    fig.update_layout(
        title={"text": "open model: latency from arrival vs from start (HDR, us)", "font": {"size": 13}}
    )
    fragment = fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False})
    caption = (
        "Open-model flash sale (bench run --arrivals): buyers arrive on a schedule, each tries once. "
        "Solid: intended arrival -> purchase ok; dashed: the buyer's actual start -> purchase ok; both of "
        "served buyers, microseconds, from the HDR histograms arrival and arrival_start in hist/ (computed "
        "by bench from the history's exact nanosecond timestamps, trials merged). The gap between them is "
        "the time buyers spent waiting for the load generator to start them: a closed loop never sees "
        "it (coordinated omission). Dotted, where a run has it: the closed-loop flash-sale's acquire "
        "latency (invoke -> ok) of the same impl, which excludes the critical section."
    )
    table_caption = (
        "Per case, from cases.csv (computed by bench from the history). served: bought units; sold out: "
        "got the lock when too little stock was left; gave up: patience ran out waiting for the lock (not a "
        "lock failure); failed: a lock or resource error; rejected: the in-flight cap was full; unfinished: "
        "still inside when the run stopped; dropped: due before the stop but never launched by the load "
        "generator (the run did not offer its rate, and the case is marked generator-bound). Every arrival: "
        "latency from the intended arrival over all buyers; one not served (gave up, failed, turned away, "
        'dropped, unfinished) counts at its patience and is censored ("at least": it was not served within '
        "it), so a lock that loses or fails buyers does not look faster; the "
        "served-only figures stand beside it. Order inversions: grants that overtook an earlier arrival still "
        "waiting for the same lock. A schedule lag p99 over 1 ms marks the case generator-bound."
    )
    return (
        f'<h2>Open model: arrivals</h2>{fragment}<p class="caption">{e(caption)}</p>'
        f'<h2>Open model: what the shop owner asks</h2><p class="caption">{e(table_caption)}</p>'
        f"{shop_table(runs)}"
    )
