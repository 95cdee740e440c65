"""Sections that compare runs: overview, verdict matrix, deltas per impl x scenario, round trips,
fairness and the run-metadata diff.

Trials of one case (``<impl>__<workload>__t<N>``) are one group here: a figure per group is
the median over its trials, with the spread (min-max) beside it. Significance is not
judged here; ``bench gate`` does that (Mann-Whitney U over the trials). Every string
from a results folder goes through :func:`dashboards.html_bits.e`.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from dashboards.charts import all_groups
from dashboards.html_bits import VIOLATIONS, e, fmt, verdict_class, wrap
from dashboards.load import RunData, flag, num, scenario_of, text

#: (cases.csv column, label, format kind, which way is worse: +1 up, -1 down, 0 neither)
COMPARED = (
    ("throughput_acq_s", "acquisitions/s", "rate", -1),
    ("throughput_ops_s", "purchases/s", "rate", -1),
    ("model_acq_s", "model: independent clients (acquisitions/s)", "rate", -1),
    ("acquire_p50_us", "acquire p50", "us", +1),
    ("acquire_p99_us", "acquire p99", "us", +1),
    ("acquire_p999_us", "acquire p99.9", "us", +1),
    ("acquire_max_us", "acquire max", "us", +1),
    ("handoff_p50_us", "handoff gap p50", "us", +1),
    ("handoff_p99_us", "handoff gap p99", "us", +1),
    ("utilization", "utilization", "pct", -1),
    ("jain_index", "Jain's index", "ratio", -1),
    ("server_cmds_per_acquire", "server commands per acquire", "ratio", +1),
)

#: run.json keys left out of the metadata diff: they differ on every run by construction.
_DIFF_SKIP = ("cases", "run_id", "endpoints", "started_at", "finished_at")


def run_labels(runs: list[RunData]) -> list[str]:
    """'baseline' / 'candidate' for two runs, 'baseline', 'run 2', ... for more, '' for one."""
    if len(runs) == 1:
        return [""]
    if len(runs) == 2:
        return ["baseline", "candidate"]
    return ["baseline"] + [f"run {i + 1}" for i in range(1, len(runs))]


def group_labels(runs: list[RunData]) -> dict[str, str]:
    """impl (plus scenario, or workload in older runs, when several appear) per group; the group id on a clash."""
    first: dict[str, dict[str, Any]] = {}
    for run in runs:
        for group, rows in run.groups().items():
            if group not in first:
                first[group] = run.rows(rows)[0]  # a dict: a Series per group cost most of this on a matrix
    scenarios = {scenario_of(r) for r in first.values()}
    labels = {}
    for group, row in first.items():
        impl = text(row, "impl") or group
        scenario = scenario_of(row)
        labels[group] = f"{impl} · {scenario}" if len(scenarios) > 1 and scenario != "n/a" else impl
    if len(set(labels.values())) < len(labels):
        return {g: g for g in labels}
    return labels


def _group_verdict(rows: pd.DataFrame | list[dict[str, Any]]) -> tuple[str, str, int]:
    """(css class, text, violation count) for the trials of one group (a frame, or its rows as dicts)."""
    recs = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else rows
    verdicts = [(text(r, "verdict") or "unknown") for r in recs]
    classes = [verdict_class(v) for v in verdicts]
    violations = 0
    for col in VIOLATIONS:
        violations += int(sum(v for v in (num(r, col) for r in recs) if v is not None))
    cls = "bad" if "bad" in classes or violations else "unknown" if "unknown" in classes else "good"
    shown = ", ".join(sorted(set(verdicts)))
    uncertain = sum(v for v in (num(r, "uncertain_overlaps") for r in recs) if v)
    if uncertain:
        shown += f"; {fmt(uncertain)} uncertain overlaps"
    reasons = list(dict.fromkeys(t for t in (text(r, "verdict_reason") for r in recs) if t))
    if reasons:
        shown += f" ({reasons[0]}{f' +{len(reasons) - 1} more' if len(reasons) > 1 else ''})"
    return cls, shown, violations


def runs_section(runs: list[RunData], rlabels: list[str]) -> str:
    rows = []
    for run, label in zip(runs, rlabels, strict=True):
        host = run.meta.get("host") if isinstance(run.meta.get("host"), dict) else {}
        trials = (
            run.meta.get("params", {}).get("trials") if isinstance(run.meta.get("params"), dict) else None
        )
        rows.append(
            f'<tr data-row="{e(run.run_id)}"><td>{e(label)}</td><td>{e(run.run_id)}</td>'
            f"<td>{e(run.status)}</td><td><code>{e(run.meta.get('git_commit') or 'n/a')}</code></td>"
            f"<td>{e(host.get('machine_class') or 'n/a')}</td><td>{e(run.meta.get('started_at') or 'n/a')}</td>"
            f'<td class="num">{len(run.cases)}</td><td class="num">{e(trials if trials is not None else "n/a")}</td>'
            f"<td>{e(run.path)}</td></tr>"
        )
    return (
        '<h2 id="runs">Runs compared</h2>'
        '<p class="caption">The first run is the baseline; deltas below are each later run against it.</p>'
        '<div class="scroll"><table id="runs-table"><tr><th>role</th><th>run</th><th>status</th>'
        "<th>commit</th><th>machine class</th><th>started</th><th>cases</th><th>trials</th><th>folder</th></tr>"
        f"{''.join(rows)}</table></div>"
    )


def verdict_matrix_section(runs: list[RunData], rlabels: list[str], glabels: dict[str, str]) -> str:
    head = "<th>impl x scenario</th>" + "".join(
        f"<th>{e(label)}<br><small>{e(run.run_id)}</small></th>"
        for run, label in zip(runs, rlabels, strict=True)
    )
    rows = []
    for group in all_groups(runs):
        cells = f"<td>{e(glabels[group])}</td>"
        for run, label in zip(runs, rlabels, strict=True):
            trials = run.groups().get(group)
            if trials is None:
                cells += f'<td class="na" data-col="{e(label)}">not run</td>'
                continue
            cls, shown, violations = _group_verdict(run.rows(trials))
            extra = f", {violations:,} violation(s)" if violations else ""
            cells += (
                f'<td class="{cls}" data-col="{e(label)}">{e(shown)}'
                f"<br><small>{len(trials)} trial(s){e(extra)}</small></td>"
            )
        rows.append(f'<tr data-row="{e(group)}">{cells}</tr>')
    return (
        '<h2 id="verdict-matrix">Verdicts per run</h2>'
        '<p class="caption">Per impl x scenario and run, the checkers\' verdicts over all trials: red when any '
        "trial is invalid or has a safety violation (overlapping holds, witness violations, oversold "
        "units, lost updates), grey when any is unknown, green when all are valid.</p>"
        f'<div class="scroll"><table id="verdict-matrix-table"><tr>{head}</tr>{"".join(rows)}</table></div>'
    )


#: Figures the load generator can distort: greyed where the case was generator-bound.
GENERATOR_SENSITIVE = ("throughput_acq_s", "throughput_ops_s", "acquire_", "handoff_")


def _stat_cell(values: list[float], kind: str, bound: str = "") -> str:
    if not values:
        return '<td class="num na">n/a</td>'
    med = float(pd.Series(values).median())
    spread = f"<br><small>{fmt(min(values), kind)} .. {fmt(max(values), kind)}, n={len(values)}</small>"
    if bound:
        said = f"fidelity {bound}" if bound.startswith("not measured") else f"generator-bound: {bound}"
        spread += f'<br><small class="boundnote">{e(said)}</small>'
        return f'<td class="num bound">{fmt(med, kind)}{spread}</td>'
    return f'<td class="num">{fmt(med, kind)}{spread if len(values) > 1 else ""}</td>'


def _bound_reason(rows: pd.DataFrame, column: str) -> str:
    """Why a group's figure the load generator can distort is no figure of the lock's, else ''.

    Generator-bound in a trial: its reason. Not measured in a trial (the column is there, the
    flag is empty): "not measured ...", so that no delta on it is tinted either. A run from
    before the flag (no column) is left as it was.
    """
    if not column.startswith(GENERATOR_SENSITIVE) or "generator_bound" not in rows.columns:
        return ""
    unmeasured = ""
    for r in rows[
        ["generator_bound", *(["generator_bound_reason"] if "generator_bound_reason" in rows else [])]
    ].to_dict("records"):
        state = flag(r, "generator_bound")
        if state is True:
            return (text(r, "generator_bound_reason") or "").strip() or "reason not recorded"
        if state is None and not unmeasured:
            why = (text(r, "generator_bound_reason") or "").strip()
            unmeasured = why if why.startswith("not measured") else "not measured"
    return unmeasured


def _delta_cell(base: list[float], new: list[float], worse: int) -> str:
    """The change in % of the medians, tinted by ``worse``; pass 0 to leave it untinted."""
    if not base or not new:
        return '<td class="num na">n/a</td>'
    b, n = float(pd.Series(base).median()), float(pd.Series(new).median())
    if b == 0:
        return '<td class="num na">n/a</td>'
    change = (n - b) / abs(b)
    cls = "num"
    if worse and abs(change) >= 0.10:
        cls += " worse" if change * worse > 0 else " better"
    return f'<td class="{cls}">{change * 100:+.1f}%</td>'


def deltas_section(
    runs: list[RunData], rlabels: list[str], glabels: dict[str, str], params_differ: bool = False
) -> str:
    """Per group and metric, baseline and candidate medians and the change; no colour when parameters differ."""
    baseline = runs[0]
    tint = (
        "No delta is tinted: the runs' parameters differ (see the top of the page), so a change is not "
        "a regression or an improvement of the lock."
        if params_differ
        else "Tinted deltas moved 10% or more (red the bad way, green the good way); whether a move "
        "is more than noise is for <code>bench gate</code>, which tests it over the trials."
    )
    parts = [
        '<h2 id="comparison">Baseline vs candidate, per impl x scenario</h2>'
        f'<p class="caption">Baseline: run {e(baseline.run_id)} (commit '
        f"{e(baseline.meta.get('git_commit') or 'n/a')}). Each cell is the median over the group's trials "
        "(small: min .. max and the number of trials); delta = (median - baseline median) / baseline "
        f"median. Grey, hatched: generator-bound (a bound, not the lock's figure) or its fidelity not measured; "
        f"such a delta is never tinted. {tint}</p>"
    ]
    base_groups = baseline.groups()
    for other, label in zip(runs[1:], rlabels[1:], strict=True):
        other_groups = other.groups()
        rows = []
        for group in all_groups([baseline, other]):
            b, o = base_groups.get(group), other_groups.get(group)
            if b is None or o is None:
                where = "baseline" if b is None else "this run"
                rows.append(
                    f'<tr data-row="{e(group)}"><td>{e(glabels[group])}</td><td colspan=4>not in {where}</td></tr>'
                )
                continue
            compared = [c for c in COMPARED if baseline.values(group, c[0]) or other.values(group, c[0])]
            bcls, btext, bviol = _group_verdict(baseline.rows(b))
            ocls, otext, oviol = _group_verdict(other.rows(o))
            rows.append(
                f'<tr data-row="{e(group)}"><td rowspan={len(compared) + 1}>{e(glabels[group])}</td>'
                f'<td>verdict (violations)</td><td class="{bcls}">{e(btext)} ({bviol:,})</td>'
                f'<td class="{ocls}">{e(otext)} ({oviol:,})</td><td></td></tr>'
            )
            for col, name, kind, worse in compared:
                bv, ov = baseline.values(group, col), other.values(group, col)
                b_why, o_why = _bound_reason(b, col), _bound_reason(o, col)
                # a bound or unmeasured figure on either side is no figure of the lock's: never tinted
                tinted = 0 if params_differ or b_why or o_why else worse
                rows.append(
                    f'<tr data-metric="{e(col)}"><td>{e(name)}</td>'
                    f"{_stat_cell(bv, kind, b_why)}{_stat_cell(ov, kind, o_why)}"
                    f"{_delta_cell(bv, ov, tinted)}</tr>"
                )
        parts.append(
            f"<h3>{e(label)} {e(other.run_id)} vs baseline {e(baseline.run_id)}</h3>"
            '<div class="scroll"><table class="deltas"><tr><th>impl x scenario</th><th>metric</th>'
            f"<th>baseline</th><th>{e(label)}</th><th>delta</th></tr>{''.join(rows)}</table></div>"
        )
    return "".join(parts)


def _per_client_range(run: RunData, rows: pd.DataFrame) -> tuple[int, int, int] | None:
    counts: list[int] = []
    for case in [str(c) for c in rows["case"]]:
        counts += run.client_counts(case) or []
    return (len(counts), min(counts), max(counts)) if counts else None


def fairness_table(runs: list[RunData], rlabels: list[str], glabels: dict[str, str]) -> str:
    rows = []
    for group in all_groups(runs):
        for run, label in zip(runs, rlabels, strict=True):
            trials = run.groups().get(group)
            if trials is None:
                continue
            spread = _per_client_range(run, trials)
            clients = (
                f'<td class="num">{spread[0]:,}</td><td class="num">{spread[1]:,}</td><td class="num">{spread[2]:,}</td>'
                if spread
                else '<td class="na" colspan=3>no history/ (baseline folders keep none)</td>'
            )
            rows.append(
                f'<tr data-row="{e(group)}|{e(label)}"><td>{e(glabels[group])}</td><td>{e(label or run.run_id)}</td>'
                f"{_stat_cell(run.values(group, 'jain_index'), 'ratio')}{clients}</tr>"
            )
    return (
        '<div class="scroll"><table id="fairness"><tr><th>impl x scenario</th><th>run</th>'
        "<th>Jain's index (median over trials)</th><th>clients (all trials)</th>"
        "<th>fewest acquisitions</th><th>most acquisitions</th></tr>"
        f"{''.join(rows)}</table></div>"
    )


def _commands_per_acquire(run: RunData, rows: pd.DataFrame) -> dict[str, float]:
    totals: dict[str, float] = {}
    acquisitions = 0.0
    for row in run.rows(rows):
        commands = run.extra(str(row["case"])).get("server_commands")
        got = num(row, "acquisitions")
        if not isinstance(commands, dict) or not got:
            continue
        acquisitions += got
        for name, count in commands.items():
            if isinstance(count, int | float):
                totals[str(name)] = totals.get(str(name), 0.0) + float(count)
    return (
        {k: v / acquisitions for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}
        if acquisitions
        else {}
    )


def round_trips_section(runs: list[RunData], rlabels: list[str], glabels: dict[str, str]) -> str:
    lockstats = sorted({c for run in runs for c in run.cases.columns if str(c).startswith("lockstat_")})
    head = (
        "<th>impl x scenario</th><th>run</th><th>server commands per acquire</th><th>by command, per acquire</th>"
        + "".join(f"<th>{wrap(c.removeprefix('lockstat_'))}</th>" for c in lockstats)
    )
    rows = []
    for group in all_groups(runs):
        for run, label in zip(runs, rlabels, strict=True):
            trials = run.groups().get(group)
            if trials is None:
                continue
            by_command = _commands_per_acquire(run, trials)
            detail = ", ".join(
                f"{e(k)}&nbsp;{v:.3g}" if v >= 0.01 else f"{e(k)}&nbsp;&lt;0.01"
                for k, v in by_command.items()
            )
            detail = detail or '<span class="na">n/a</span>'
            cells = f"<td>{e(glabels[group])}</td><td>{e(label or run.run_id)}</td>"
            cells += _stat_cell(run.values(group, "server_cmds_per_acquire"), "ratio")
            cells += f'<td class="cmds">{detail}</td>'
            cells += "".join(_stat_cell(run.values(group, c), "num") for c in lockstats)
            rows.append(f'<tr data-row="{e(group)}|{e(label)}">{cells}</tr>')
    return (
        '<h2 id="round-trips-title">Round trips per acquire</h2>'
        '<p class="caption">Commands the lock server executed during each case, from its own statistics '
        "(Redis INFO commandstats, ZooKeeper mntr, PostgreSQL pg_stat_*: read before and after the case), "
        "divided by successful acquires; they include the commands of releases and retries. The lock's "
        "own counters (lockstat_*, summed over clients) follow, median over trials.</p>"
        f'<div class="scroll"><table id="round-trips"><tr>{head}</tr>{"".join(rows)}</table></div>'
    )


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list):
        return {prefix: json.dumps(value) if not all(isinstance(v, str) for v in value) else ", ".join(value)}
    return {prefix: "" if value is None else str(value)}


def metadata_diff_section(runs: list[RunData], rlabels: list[str]) -> str:
    flat = [_flatten({k: v for k, v in r.meta.items() if k not in _DIFF_SKIP}) for r in runs]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    differ = [k for k in keys if len({f.get(k, "\0absent") for f in flat}) > 1]
    same = [k for k in keys if k not in differ]
    head = "<th>key</th>" + "".join(
        f"<th>{e(label)}<br><small>{e(run.run_id)}</small></th>"
        for run, label in zip(runs, rlabels, strict=True)
    )

    def row(key: str) -> str:
        cells = "".join(f"<td>{e(f[key])}</td>" if key in f else '<td class="na">absent</td>' for f in flat)
        return f'<tr data-row="{e(key)}"><th>{e(key)}</th>{cells}</tr>'

    diff_table = (
        f'<table id="metadata-diff"><tr>{head}</tr>{"".join(row(k) for k in differ)}</table>'
        if differ
        else "<p>No differences in run.json apart from ids, times and endpoints.</p>"
    )
    same_rows = "".join(f"<tr><th>{e(k)}</th><td>{e(flat[0].get(k, ''))}</td></tr>" for k in same)
    return (
        '<h2 id="metadata-diff-title">Run metadata: what differs</h2>'
        '<p class="caption">run.json of every run, flattened (commit, command, host, versions, parameters); '
        "only keys whose values differ are shown. Run ids, times and endpoint URLs always differ and are "
        "left out.</p>"
        f'<div class="scroll">{diff_table}</div>'
        f'<details><summary>{len(same)} keys identical in every run</summary><table class="kv">{same_rows}</table>'
        "</details>"
    )
