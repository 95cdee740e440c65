"""The report's plotly figures and the pure computations behind them.

Labels coming from files are HTML-escaped before they reach plotly: plotly.js renders a
subset of HTML in text, and decodes entities, so escaped names display literally.
"""

from __future__ import annotations

import functools
import html
import math
import statistics
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from hdrh.histogram import HdrHistogram
from plotly.subplots import make_subplots

from dashboards.html_bits import duration_us
from dashboards.load import AcquireRows, EventRows, RunData, flag, scenario_of, text

#: Percentile levels marked on the spectrum's x axis, as 1/(1-p).
SPECTRUM_TICKS = [(1, "0%"), (2, "50%"), (10, "90%"), (100, "99%"), (1_000, "99.9%"), (10_000, "99.99%")]
_EXTRA_TICKS = [(100_000, "99.999%"), (1_000_000, "99.9999%"), (10_000_000, "99.99999%")]
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf"]  # fmt: skip
_LAYOUT = {"margin": {"l": 70, "r": 20, "t": 60, "b": 60}, "height": 440}
#: What a figure's ``layout.template`` holds until it is written (page.py puts plotly_white's JSON in its
#: place): plotly copies a template each time it is set, and copies a figure's default one as it is made.
WHITE_SLOT = {"layout": {"meta": "lockbench: plotly_white goes here"}}


def white_figure(**subplots: Any) -> go.Figure:
    """A new figure drawn on the plotly_white template (``subplots`` given: make_subplots' arguments).

    Why a slot and not ``template="plotly_white"``: plotly validates and deep-copies the whole
    template each time one is set, as a figure is made (its default template) and again when
    it is replaced: three copies a figure, about a fifth of a small run's report. The page
    writes the same template's JSON where the slot is (:func:`with_white_template`), so the
    page's figures are what they were, key for key.
    """
    fig = go.Figure(layout={"template": WHITE_SLOT})
    return make_subplots(**subplots, figure=fig) if subplots else fig


@functools.cache
def _white_json() -> dict[str, Any]:
    # as a figure given template="plotly_white" writes it (plotly orders a figure's template's keys its own way)
    return go.Figure(layout={"template": "plotly_white"}).to_dict()["layout"]["template"]


def with_white_template(spec: dict[str, Any]) -> dict[str, Any]:
    """A figure's plain JSON with plotly_white's JSON where :func:`white_figure` left its slot."""
    layout = spec.get("layout")
    if isinstance(layout, dict) and layout.get("template") == WHITE_SLOT:
        layout["template"] = _white_json()
    return spec


def _percentile_walk(hist: HdrHistogram, ticks_per_half_distance: int) -> list[tuple[float, float]]:
    """(percentile level, highest equivalent value) exactly as hdrh's percentile iterator yields them.

    Why not the iterator: it visits every one of the histogram's ~23,000 counts in Python
    (0.05 s a histogram, most of a matrix report's spectrum); this walks only the non-zero
    ones, with numpy's cumulative sum, and levels advance as the iterator's do: ticks per half
    distance to 100%, several levels at one value when its count spans them, the last
    recorded value once, then the 100% step.
    """
    counts = np.ctypeslib.as_array(hist.counts)[: hist.counts_len].astype(np.int64, copy=False)
    nonzero = np.flatnonzero(counts)
    if not len(nonzero):
        return []
    pct = 100.0 * np.cumsum(counts[nonzero]) / hist.get_total_count()

    def value(j: int) -> float:
        return float(hist.get_highest_equivalent_value(hist.get_value_from_index(int(nonzero[j]))))

    out: list[tuple[float, float]] = []
    level, j, last = 0.0, 0, len(nonzero) - 1
    while True:
        j += int(np.searchsorted(pct[j:] >= level, True))  # the first at or after j reaching the level
        if j > last:
            break
        out.append((level, value(j)))
        gap = 100.0 - level
        if gap:
            level += 100.0 / (ticks_per_half_distance * math.pow(2, math.log(100 / gap) / math.log(2) + 1))
        if j == last:
            break  # the iterator stops once the last recorded value is counted
    out.append((100.0, value(last)))
    return out


def spectrum_points(hist: HdrHistogram, ticks_per_half_distance: int = 5) -> list[tuple[float, float, float]]:
    """(x = 1/(1-p), value in us, percentile) at the HDR percentile iterator's levels.

    The final 100% step has no finite 1/(1-p); it is placed at the "1 in N" level (N = total
    count) so the maximum still shows as the last point of the line.
    """
    total = hist.get_total_count()
    points: list[tuple[float, float, float]] = []
    if total == 0:
        return points
    for pct, value in _percentile_walk(hist, ticks_per_half_distance):
        last_x = points[-1][0] if points else 1.0
        x = 1.0 / (1.0 - pct / 100.0) if pct < 100.0 else max(float(total), last_x)
        points.append((x, value, pct))
    return points


#: A trailing partial second narrower than this joins the second before it (a rate over a sliver is noise).
SLIVER_S = 0.2


def acquire_timeseries(history: pd.DataFrame | AcquireRows) -> pd.DataFrame:
    """Per-second acquire ok count and latency percentiles from acquire invoke/ok history rows.

    Invoke and completion share (client, seq). A bucket is one second since the case's first
    acquire event, by completion time; seconds without a completion count 0. ``end_s`` is
    where the bucket ends: the trailing partial second ends where the history's acquires end
    and is rated over its real width (joined to the second before it when narrower than
    SLIVER_S), so cases of equal length end at the same x.
    """
    columns = ["second", "acq_per_s", "p50_us", "p99_us", "end_s"]
    acq = history if isinstance(history, AcquireRows) else AcquireRows.from_frame(history)
    if not len(acq.t_ns):
        return pd.DataFrame(columns=columns)
    t_ns = acq.t_ns
    t0 = int(t_ns.min())
    t_end = int(t_ns.max())
    # pair on one integer key per (client, seq), the first invoke with the first ok (numpy: a
    # matrix report pairs 2.5 million rows; a pandas merge per case was most of its over-time chart)
    key = (acq.client << 32) | (acq.seq & 0xFFFFFFFF)
    inv, ok = acq.invoke, acq.ok
    k_inv, i_inv = np.unique(key[inv], return_index=True)
    k_ok, i_ok = np.unique(key[ok], return_index=True)
    _, a, b = np.intersect1d(k_inv, k_ok, assume_unique=True, return_indices=True)
    if not len(a):
        return pd.DataFrame(columns=columns)
    t_inv, t_ok = t_ns[inv][i_inv[a]], t_ns[ok][i_ok[b]]
    span_s = (t_end - t0) / 1e9
    last = int(span_s)
    width = span_s - last
    if last > 0 and width < SLIVER_S:
        last -= 1
        width += 1.0
    elif width == 0:
        width = 1.0
    # numpy to the end: a DataFrame per step cost more than the figures (a matrix has hundreds of cases)
    second = np.minimum((t_ok - t0) // 1_000_000_000, last)
    latency = (t_ok - t_inv).astype("float64") / 1_000.0
    keys, counts, p50, p99 = _per_second(second, latency)
    acq_per_s = np.zeros(last + 1)
    acq_per_s[keys] = counts
    acq_per_s[last] /= width
    q50, q99 = np.full(last + 1, np.nan), np.full(last + 1, np.nan)
    q50[keys], q99[keys] = p50, p99
    end_s = [float(i + 1) for i in range(last)] + [last + width]
    return pd.DataFrame(
        {"second": np.arange(last + 1), "acq_per_s": acq_per_s, "p50_us": q50, "p99_us": q99, "end_s": end_s}
    )


def _per_second(
    second: np.ndarray, latency: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(seconds present, how many in each, the latency's p50, p99) as pandas' groupby quantile computes them.

    Why not that groupby: its cost is per call, and a matrix report made one per case (most of
    the over-time chart). The same linear interpolation, value for value: sorted values v of
    n, position q (n - 1), v[i] + (v[i + 1] - v[i]) * frac.
    """
    order = np.lexsort((latency, second))
    sec, lat = second[order], latency[order]
    keys, starts, counts = np.unique(sec, return_index=True, return_counts=True)
    quantiles = []
    for q in (0.5, 0.99):
        pos = q * (counts - 1)
        idx = pos.astype(np.int64)
        frac = pos % 1
        val = lat[starts + idx]
        nxt = lat[np.minimum(starts + idx + 1, starts + counts - 1)]
        quantiles.append(np.where(frac == 0, val, val + (nxt - val) * frac))
    return keys, counts, quantiles[0], quantiles[1]


def _no_data(fig: go.Figure, message: str) -> go.Figure:
    fig.add_annotation(text=message, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def _spread(values: list[float]) -> tuple[float | None, float, float]:
    """(median, distance down to the min, distance up to the max) of per-trial values."""
    if not values:
        return None, 0.0, 0.0
    med = float(statistics.median(values))  # pandas' median of finite values; a Series per call cost more
    return med, med - min(values), max(values) - med


def _bound(run: RunData, group: str) -> tuple[bool, str]:
    """(generator-bound in any trial of the group, its reason) from cases.csv; (False, "") when absent."""
    rows = run.groups().get(group)
    if rows is None or "generator_bound" not in rows.columns:
        return False, ""
    recs = run.rows(rows)  # the table's rows as dicts, converted once for the whole page
    bound = [flag(r, "generator_bound") is True for r in recs]
    reasons = [t for t in (text(r, "generator_bound_reason") for r in recs) if t and t.strip()]
    return any(bound), (reasons[0].strip() if reasons else "reason not recorded") if any(bound) else ""


def _group_bars(
    fig: go.Figure, runs: list[RunData], groups: list[str], glabels: dict[str, str], rlabels: list[str],
    column: str, row: int | None = None, col: int | None = None, showlegend: bool = True,
    scale: float = 1.0, hatch_bound: bool = False,
) -> bool:  # fmt: skip
    """One bar per group per run: the median over trials, whiskers from min to max. True if any data.

    With ``hatch_bound``, a group whose cases were generator-bound is drawn hatched and pale,
    and its hover says why: the figure is a lower bound, not the lock's.
    """
    any_data = False
    for i, run in enumerate(runs):
        meds, lo, hi, custom, patterns, opacity = [], [], [], [], [], []
        for group in groups:
            values = [v * scale for v in run.values(group, column)]
            med, down, up = _spread(values)
            meds.append(med)
            lo.append(down)
            hi.append(up)
            bound, reason = _bound(run, group) if hatch_bound else (False, "")
            note = f"<br>generator-bound ({html.escape(reason)}): a lower bound" if bound else ""
            custom.append([len(values), note])
            patterns.append("/" if bound else "")
            opacity.append(0.45 if bound else 1.0)
        if not any(v is not None for v in meds):
            continue
        any_data = True
        showlegend = showlegend and len(runs) > 1  # one run: the bars need no legend
        name = html.escape(rlabels[i] or run.run_id)
        bar = go.Bar(
            x=[html.escape(glabels[g]) for g in groups], y=meds, name=name, legendgroup=name,
            marker={"color": PALETTE[i % len(PALETTE)], "opacity": opacity,
                    "pattern": {"shape": patterns, "fillmode": "overlay"}},
            showlegend=showlegend,
            error_y={"type": "data", "symmetric": False, "array": hi, "arrayminus": lo},
            customdata=custom,
            hovertemplate="%{y:.4g} (median of %{customdata[0]} trials)%{customdata[1]}<extra>%{fullData.name}</extra>",
        )  # fmt: skip
        if row is None:
            fig.add_trace(bar)
        else:
            fig.add_trace(bar, row=row, col=col)
    return any_data


def all_groups(runs: list[RunData]) -> list[str]:
    """Every impl x scenario of any run, baseline's order first."""
    out: dict[str, None] = {}
    for run in runs:
        out.update(dict.fromkeys(run.groups()))
    return list(out)


def sorted_groups(runs: list[RunData], column: str) -> list[str]:
    """Every group, highest median of ``column`` in the last run first; groups without it last."""
    groups = all_groups(runs)
    last = runs[-1]

    def key(group: str) -> float:
        med, _, _ = _spread(last.values(group, column) or runs[0].values(group, column))
        return -med if med is not None else float("inf")

    return sorted(groups, key=key)


def throughput_figure(runs: list[RunData], glabels: dict[str, str], rlabels: list[str]) -> go.Figure:
    """Acquisitions/s (and purchases/s) per impl x scenario and run, highest first: median over trials,
    min-max whiskers; generator-bound figures hatched and pale; the model (independent clients) as a marker."""
    groups = sorted_groups(runs, "throughput_acq_s")
    has_ops = any(run.values(g, "throughput_ops_s") for run in runs for g in groups)
    cols = 2 if has_ops else 1
    titles = ["acquisitions/s", "purchases/s"][:cols]
    fig = white_figure(rows=1, cols=cols, subplot_titles=titles)
    fig.update_layout(**_LAYOUT, barmode="group")
    found = _group_bars(fig, runs, groups, glabels, rlabels, "throughput_acq_s", 1, 1, hatch_bound=True)
    if has_ops:
        found |= _group_bars(
            fig, runs, groups, glabels, rlabels, "throughput_ops_s", 1, 2, showlegend=False, hatch_bound=True
        )
    run = runs[-1]
    model = [_spread(run.values(g, "model_acq_s"))[0] for g in groups]
    if any(m is not None for m in model):
        fig.add_scatter(
            x=[html.escape(glabels[g]) for g in groups], y=model, mode="markers", name="model: independent clients",
            marker={"symbol": "line-ew-open", "size": 28, "line": {"width": 3, "color": "#222"}},
            hovertemplate="model %{y:.4g}/s: 1 / (mean solo hold + mean handoff gap)<extra></extra>", row=1, col=1,
        )  # fmt: skip
    fig.update_yaxes(title="per second", rangemode="tozero", row=1, col=1)
    if not found:
        return _no_data(fig, "no throughput columns in cases.csv")
    return fig


def _axis_ticks(max_x: float) -> tuple[list[float], list[str]]:
    ticks = SPECTRUM_TICKS + [t for t in _EXTRA_TICKS if t[0] <= max_x * 1.01]
    return [t[0] for t in ticks], [t[1] for t in ticks]


def _with_traces(fig: go.Figure, traces: list[dict]) -> dict:
    """``fig`` as plain JSON with ``traces`` (plain trace dicts) drawn first, before any trace it has.

    Why plain dicts: ``add_scatter`` validates every value of every line, and a matrix has hundreds
    of lines per figure (page.py draws either form).
    """
    spec = fig.to_dict()
    spec["data"] = traces + spec["data"]
    return spec


def spectrum_figure(
    runs: list[RunData], glabels: dict[str, str], rlabels: list[str], slo_us: float | None
) -> go.Figure | dict:
    """Acquire latency percentile spectra, one line per impl x scenario and run (trials merged), log-log.

    A colour per impl x scenario; the baseline (first run) dashed, later runs solid, so a
    shift between runs reads as the gap between a dashed and a solid line of one colour.
    Plain JSON (data, layout) when it has lines.
    """
    fig = white_figure()
    traces: list[dict] = []
    max_x = 10_000.0
    groups = all_groups(runs)
    dashes = ["dash", "solid", "dot", "dashdot"]
    for r, run in enumerate(runs):
        for g, group in enumerate(groups):
            hist = run.merged_histogram(group, "acquire_ok")
            if hist is None:
                continue
            points = spectrum_points(hist)
            max_x = max(max_x, points[-1][0])
            label = glabels[group] if len(runs) == 1 else f"{rlabels[r]}: {glabels[group]}"
            bound, reason = _bound(run, group)
            if bound:
                label += " (generator-bound: an upper bound)"
            traces.append(
                {
                    "type": "scatter",
                    "x": [p[0] for p in points],
                    "y": [p[1] / 1_000 for p in points],
                    "customdata": [f"{p[2]:.5g}%" for p in points],
                    "mode": "lines",
                    "name": html.escape(label),
                    "opacity": 0.5 if bound else 1.0,
                    "line": {
                        "color": PALETTE[g % len(PALETTE)],
                        "dash": "solid" if len(runs) == 1 else dashes[min(r, len(dashes) - 1)],
                        "width": 1 if bound else 2,
                    },
                    "hovertemplate": "%{customdata}: %{y:.4g} ms"
                    + (f"<br>generator-bound ({html.escape(reason)})" if bound else "")
                    + "<extra>%{fullData.name}</extra>",
                }
            )
    tickvals, ticktext = _axis_ticks(max_x)
    fig.update_layout(**_LAYOUT)
    fig.update_xaxes(
        type="log", tickvals=tickvals, ticktext=ticktext, title="percentile (log scale of 1/(1-p))"
    )
    fig.update_yaxes(type="log", title="acquire latency (ms, log)")
    if not traces:
        return _no_data(fig, "no acquire_ok samples in any histogram")
    if slo_us is not None:
        fig.add_scatter(
            x=[1, max_x],
            y=[slo_us / 1_000, slo_us / 1_000],
            mode="lines",
            name=f"SLO {duration_us(slo_us)}",
            line={"dash": "dash", "color": "#c0392b"},
        )
    return _with_traces(fig, traces)


def handoff_utilization_figure(runs: list[RunData], glabels: dict[str, str], rlabels: list[str]) -> go.Figure:
    """Handoff gap p50 and p99 (ms) and lock utilization per impl x scenario and run."""
    groups = all_groups(runs)
    fig = white_figure(
        rows=1, cols=3, subplot_titles=["handoff gap p50 (ms)", "handoff gap p99 (ms)", "utilization"]
    )
    fig.update_layout(**_LAYOUT, barmode="group")
    found = _group_bars(fig, runs, groups, glabels, rlabels, "handoff_p50_us", 1, 1, scale=0.001)
    found |= _group_bars(
        fig, runs, groups, glabels, rlabels, "handoff_p99_us", 1, 2, showlegend=False, scale=0.001
    )
    found |= _group_bars(fig, runs, groups, glabels, rlabels, "utilization", 1, 3, showlegend=False)
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(tickformat=".0%", row=1, col=3)
    if not found:
        return _no_data(fig, "no handoff or utilization columns in cases.csv")
    return fig


#: Where a client with no acquisition sits on the fairness chart's log axis (shares of the fair share).
ZERO_SHARE = 0.01


def fair_shares(counts: list[int]) -> list[float]:
    """Each client's acquisitions divided by the fair share (the mean): 1 = fair, 0 -> ZERO_SHARE for a log axis."""
    mean = sum(counts) / len(counts) if counts else 0
    if not mean:
        return [ZERO_SHARE] * len(counts)
    return [max(c / mean, ZERO_SHARE) for c in counts]


def fairness_figure(run: RunData, glabels: dict[str, str]) -> go.Figure | dict:
    """Acquisitions per client relative to the fair share, clients sorted from most to fewest, log y.

    Normalised and on a log axis so one client that took most of the acquisitions does not
    flatten every other line. Trials are pooled: each trial's clients are separate clients.
    x is the client's rank as a fraction of all clients, so runs with different user counts overlay.
    """
    fig = white_figure()
    fig.update_layout(**_LAYOUT)
    traces: list[dict] = []
    for g, (group, rows) in enumerate(run.groups().items()):
        counts: list[int] = []
        for case in [str(c) for c in rows["case"]]:
            counts += run.client_counts(case) or []
        if not counts:
            continue
        counts.sort(reverse=True)
        jain = run.values(group, "jain_index")
        jain_text = f"Jain {pd.Series(jain).median():.3f}" if jain else "Jain n/a"
        n = len(counts)
        traces.append(
            {
                "type": "scatter",
                "x": [(i + 0.5) / n for i in range(n)],
                "y": fair_shares(counts),
                "customdata": counts,
                "mode": "lines+markers" if n <= 60 else "lines",
                "name": html.escape(f"{glabels[group]} ({jain_text})"),
                "line": {"color": PALETTE[g % len(PALETTE)], "shape": "hv"},
                "hovertemplate": "%{customdata} acquisitions (%{y:.2f}x the fair share)<extra>%{fullData.name}</extra>",
            }
        )
    fig.update_xaxes(
        title="clients, from most to fewest acquisitions (fraction of all clients)", range=[0, 1]
    )
    ticks = [ZERO_SHARE, 0.1, 0.5, 1, 2, 5, 10, 50]
    fig.update_yaxes(
        type="log", title="acquisitions / fair share (log; 1 = fair)", tickvals=ticks,
        ticktext=["0 (none)", "0.1", "0.5", "1 (fair)", "2", "5", "10", "50"],
    )  # fmt: skip
    if not traces:
        return _no_data(fig, "no history files with acquires")
    return _with_traces(fig, traces)


@dataclass(frozen=True)
class Mark:
    """Something done to a case, in seconds since its first acquire: a server fault window, a
    paused holder (window) or a killed holder (instant, x0 == x1)."""

    kind: str  # fault | pause | crash
    x0: float
    x1: float
    what: str = ""


#: More shapes than this make the chart slow to draw and unreadable; pauses are dropped first.
MAX_MARKS = 300
_MARK_STYLE = {
    # kind: (fill opacity, line opacity, line width, dash, legend text)
    "fault": (0.20, 0.85, 1, "solid", "server fault {what} (shaded)"),
    "pause": (0.08, 0.0, 0, "solid", "holder paused (light shading)"),
    "crash": (0.0, 0.7, 1.5, "dashdot", "holder killed (dash-dot line)"),
}


def event_marks(events: pd.DataFrame | EventRows | None, t0_ns: int, end_ns: int) -> list[Mark]:
    """Fault and pause windows and crash instants from a case's history rows, relative to ``t0_ns``.

    ``fault`` and ``pause`` pair an invoke with the next completion of the same client, seq
    and op; one still open at the end of the history lasts until ``end_ns``. ``crash`` rows
    are instants.
    """
    rows = events if isinstance(events, EventRows) or events is None else EventRows.from_frame(events)
    if rows is None or not rows.t_ns:
        return []
    marks: list[Mark] = []
    open_: dict[tuple[str, str, str], list[tuple[int, str]]] = {}
    ops, kinds, clients, seqs, locks, times = rows.ordered()
    # a killed holder is drawn at its death (crash ok) where the history has it, else at its mark
    dead = {
        (c, s) for o, k, c, s in zip(ops, kinds, clients, seqs, strict=True) if o == "crash" and k == "ok"
    }
    for op, kind, client, seq, what, t in zip(ops, kinds, clients, seqs, locks, times, strict=True):
        x = (t - t0_ns) / 1e9
        if op == "crash":
            if kind == "ok" or (client, seq) not in dead:
                marks.append(Mark("crash", x, x))
            continue
        key = (op, client, seq)
        if kind == "invoke":
            open_.setdefault(key, []).append((t, what))
        elif open_.get(key):
            start, what0 = open_[key].pop(0)
            marks.append(Mark(op, (start - t0_ns) / 1e9, x, what0 if op == "fault" else ""))
    for (op, _, _), starts in open_.items():
        for start, what in starts:
            marks.append(
                Mark(op, (start - t0_ns) / 1e9, (end_ns - t0_ns) / 1e9, what if op == "fault" else "")
            )
    return sorted(marks, key=lambda m: (m.kind, m.x0, m.x1))


def merge_windows(marks: list[Mark]) -> list[Mark]:
    """Overlapping windows of one kind and label as one (pauses of many clients, of many trials)."""
    out: list[Mark] = []
    for mark in sorted(marks, key=lambda m: (m.kind, m.what, m.x0)):
        last = out[-1] if out else None
        if last and last.kind == mark.kind and last.what == mark.what and mark.x0 <= last.x1:
            out[-1] = Mark(last.kind, last.x0, max(last.x1, mark.x1), last.what)
        else:
            out.append(mark)
    return out


def aggregate_trials(series: list[pd.DataFrame]) -> pd.DataFrame:
    """Per second, the median over trials of each trial's acq/s, p50, p99 and bucket end, and how many trials had it."""
    columns = ["second", "acq_per_s", "p50_us", "p99_us", "end_s", "trials"]
    if not series:
        return pd.DataFrame(columns=columns)
    values = ("acq_per_s", "p50_us", "p99_us", "end_s")

    def column(trial: pd.DataFrame, name: str) -> np.ndarray:
        if name == "end_s" and name not in trial.columns:
            return trial["second"].to_numpy(dtype="float64") + 1.0
        return trial[name].to_numpy(dtype="float64")

    # numpy, not a pandas concat and groupby: the over-time chart of a matrix aggregates hundreds of lines
    if len(series) == 1:  # the median of one trial is that trial (a matrix's cases are mostly one)
        one = series[0]
        return pd.DataFrame(
            {"second": one["second"].to_numpy(), **{c: column(one, c) for c in values},
             "trials": np.ones(len(one), dtype=np.int64)}
        )  # fmt: skip
    seconds = np.unique(np.concatenate([t["second"].to_numpy() for t in series]))
    present = np.zeros((len(series), len(seconds)), dtype=bool)
    grid = {c: np.full((len(series), len(seconds)), np.nan) for c in values}
    for i, trial in enumerate(series):
        at = np.searchsorted(seconds, trial["second"].to_numpy())
        present[i, at] = True
        for c in values:
            grid[c][i, at] = column(trial, c)
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", RuntimeWarning
        )  # a second with no value in any trial: NaN, as pandas gives
        medians = {c: np.nanmedian(grid[c], axis=0) for c in values}
    return pd.DataFrame({"second": seconds, **medians, "trials": present.sum(axis=0).astype(np.int64)})


def _rgba(colour: str, alpha: float) -> str:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _mark_shapes(marks: list[Mark], name: str, colour: str) -> list[dict]:
    """Shapes over both rows of the over-time chart; the first of each kind gets a legend entry.

    Plain dicts, set on the layout once: ``fig.add_shape`` re-validates every shape already
    there, so a matrix's 1,900 marks took minutes one by one.
    """
    legend_done: set[str] = set()
    shapes = []
    for mark in marks:
        fill, line, width, dash, legend = _MARK_STYLE[mark.kind]
        entry = f"{mark.kind}:{mark.what}"
        shape = {
            "type": "line" if mark.kind == "crash" else "rect",
            "xref": "x", "yref": "paper", "x0": mark.x0, "x1": mark.x1, "y0": 0, "y1": 1, "layer": "below",
            "line": {"color": _rgba(colour, line), "width": width, "dash": dash},
            "legendgroup": name, "showlegend": entry not in legend_done,
            "name": legend.format(what=html.escape(mark.what)),  # listed under its line: legendgroup
        }  # fmt: skip
        if fill:
            shape["fillcolor"] = _rgba(colour, fill)
        shapes.append(shape)
        legend_done.add(entry)
    return shapes


#: Above this many impl x scenario lines the over-time chart shows one line per backend x scenario
#: (the median over its locks), each lock's own lines behind a click on its legend entry: a matrix
#: has hundreds, and 780 lines drawn at once are no chart to read (issue 42 item 5).
SUMMARY_ABOVE = 24


def _group_line(run: RunData, rows: pd.DataFrame) -> tuple[pd.DataFrame, list[Mark]] | None:
    """One impl x scenario's per-second figures (median over its trials) and its fault marks; None without history."""
    per_trial: list[pd.DataFrame] = []
    marks: list[Mark] = []
    for case in [str(c) for c in rows["case"]]:
        history = run.acquires(case)
        if history is None:
            continue
        series = acquire_timeseries(history)
        if series.empty:
            run.notes.append(f"case {case}: history has no completed acquires")
            continue
        per_trial.append(series)
        events = run.event_rows(case)
        t0 = int(history.t_ns.min())
        end = int(history.t_ns.max())
        if events is not None and events.t_ns:
            end = max(end, max(events.t_ns))
        marks += event_marks(events, t0, end)
    if not per_trial:
        return None
    return aggregate_trials(per_trial), marks


def _summary_lines(run: RunData, lines: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Per backend x scenario, per second, the median over its locks' lines (each already a median over trials)."""
    by_key: dict[str, list[pd.DataFrame]] = {}
    first = {group: rows.index[0] for group, rows in run.groups().items()}
    every = dict(zip(run.cases.index, run.rows(run.cases), strict=True))
    for group, agg in lines.items():
        row = every[first[group]]
        backend = text(row, "backend") or str(text(row, "impl") or group).split(".", 1)[0]
        by_key.setdefault(f"{backend} · {scenario_of(row)}", []).append(agg)  # its trials column is not read
    return {key: aggregate_trials(aggs) for key, aggs in sorted(by_key.items())}


def _line_traces(
    agg: pd.DataFrame, name: str, colour: str, of: str, visible: bool | str, width: float | None = None
) -> list[dict]:
    """p50 (solid) and p99 (dotted) on top, acquisitions/s below: one line's three traces, as plain dicts."""
    # Steps: each bucket a flat segment from its start to its end, the last one ending where the
    # case's acquires end; on the same clock as the shading.
    seconds = agg["second"].to_numpy()
    x = seconds.astype("float64").tolist() + [float(agg["end_s"].to_numpy()[-1])]
    hover = "second %{customdata[0]}: %{y:.4g} {what} (median of %{customdata[1]} " + of + ")<extra>" + name
    custom = [
        [a, b]
        for a, b in zip(
            seconds.astype("int64").tolist(), agg["trials"].to_numpy().astype("int64").tolist(), strict=True
        )
    ]
    custom.append(custom[-1])

    def steps(column: str, scale: float = 1.0) -> list[float | None]:
        """The values, the last repeated to close its step; NaN as null (so plotly's encoder need not re-encode)."""
        values = agg[column].to_numpy(dtype="float64")  # numpy, not a Series per sum: hundreds of lines
        out = [None if v != v else v for v in (values / scale if scale != 1.0 else values).tolist()]
        return [*out, out[-1]]

    # plain trace dicts: go.Scatter validates every value of every line (row 2: axes x2, y2)
    common = {"type": "scatter", "x": x, "legendgroup": name, "mode": "lines", "customdata": custom}
    if visible is not True:
        common["visible"] = visible
    line = {"color": colour, "shape": "hv", **({"width": width} if width else {})}
    return [
        {**common, "y": steps("p50_us", 1_000), "name": name, "line": line,
         "hovertemplate": hover.replace("{what}", "ms p50") + "</extra>", "xaxis": "x", "yaxis": "y"},
        {**common, "y": steps("p99_us", 1_000), "name": f"{name} p99", "line": {**line, "dash": "dot"},
         "showlegend": False, "hovertemplate": hover.replace("{what}", "ms p99") + "</extra>", "xaxis": "x", "yaxis": "y"},
        {**common, "y": steps("acq_per_s"), "name": f"{name} acq/s", "line": line, "showlegend": False,
         "hovertemplate": hover.replace("{what}", "acquisitions/s") + "</extra>", "xaxis": "x2", "yaxis": "y2"},
    ]  # fmt: skip


def over_time_figure(run: RunData, glabels: dict[str, str], slo_us: float | None) -> go.Figure | dict:
    """Acquire p50/p99 latency (top) and acquisitions/s (bottom) per second, one colour per impl x scenario.

    Above :data:`SUMMARY_ABOVE` impl x scenario lines (a matrix), one line per backend x scenario
    is drawn, per second the median over its locks' lines; each lock's own lines and shading are
    in the figure, behind a click on its legend entry. Trials of one impl x scenario are one line: per second, the median over the trials of
    each trial's own value (each trial on its own clock, from its first acquire). Server
    fault windows are shaded in the line's colour, paused holders lighter, killed holders
    are dotted vertical lines, all on the same clock.

    Returns the figure as plain JSON (data, layout) when it has lines: a matrix has hundreds of
    lines and two thousand marks, and plotly's validation of each took minutes (page.py draws
    either form).
    """
    fig = white_figure(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    longest = 0.0
    all_marks: list[tuple[list[Mark], str, str]] = []
    traces: list[dict] = []
    lines: dict[str, pd.DataFrame] = {}
    summarised = len(run.groups()) > SUMMARY_ABOVE
    for g, (group, rows) in enumerate(run.groups().items()):
        found = _group_line(run, rows)
        if found is None:
            continue
        agg, marks = found
        lines[group] = agg
        name, colour = html.escape(glabels.get(group, group)), PALETTE[g % len(PALETTE)]
        longest = max(longest, float(agg["end_s"].max()))
        traces += _line_traces(agg, name, colour, "trial(s)", "legendonly" if summarised else True)
        windows = [m for m in marks if m.kind != "pause"] + merge_windows(
            [m for m in marks if m.kind == "pause"]
        )
        all_marks.append((windows, name, colour))
    if summarised:
        summary = []
        for k, (key, agg) in enumerate(_summary_lines(run, lines).items()):
            colour = PALETTE[k % len(PALETTE)]
            summary += _line_traces(agg, html.escape(key), colour, "lock(s)", True, width=3)
        traces = summary + traces
    total = sum(len(m) for m, _, _ in all_marks)
    if total > MAX_MARKS:
        dropped = sum(1 for m, _, _ in all_marks for x in m if x.kind == "pause")
        all_marks = [([x for x in m if x.kind != "pause"], n, c) for m, n, c in all_marks]
        run.notes.append(f"over-time chart: {dropped} pause windows not shaded (more than {MAX_MARKS} marks)")
    shapes = [sh for marks, name, colour in all_marks for sh in _mark_shapes(marks[:MAX_MARKS], name, colour)]
    if summarised:
        for shape in shapes:
            shape["visible"] = "legendonly"  # with its lock's lines, behind a click on the legend
    fig.update_layout(**{**_LAYOUT, "height": 620})
    kinds = {m.kind for marks, _, _ in all_marks for m in marks}
    if kinds:
        legend_note = {
            "fault": "shaded: server fault window",
            "pause": "light: holder paused",
            "crash": "dash-dot vertical: holder killed",
        }
        note = "; ".join(text for kind, text in legend_note.items() if kind in kinds)
        fig.update_layout(legend_title_text=f"solid p50, dotted p99<br>{note}<br>(in the line's colour)")
    fig.update_yaxes(type="log", title="acquire latency (ms, log)", row=1, col=1)
    fig.update_yaxes(title="acquisitions/s", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(title="seconds since the case's first acquire", row=2, col=1)
    if not traces:
        return _no_data(fig, "no history files with completed acquires")
    if slo_us is not None and longest > 0:
        fig.add_scatter(
            x=[0, longest],
            y=[slo_us / 1_000, slo_us / 1_000],
            mode="lines",
            name=f"SLO {duration_us(slo_us)}",
            line={"dash": "dash", "color": "#c0392b"},
            row=1,
            col=1,
        )
    spec = fig.to_dict()
    spec["data"] = traces + spec["data"]  # the SLO line, if any, stays last
    if shapes:
        spec["layout"]["shapes"] = shapes
    return spec


def percentile_us(hist: HdrHistogram | None, pct: float) -> float | None:
    """A percentile of a histogram in us, or None for an absent or empty histogram."""
    if hist is None or hist.get_total_count() == 0:
        return None
    if pct >= 100.0:
        return float(hist.get_max_value())
    return float(hist.get_value_at_percentile(pct))
