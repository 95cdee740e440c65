"""``bench history --check``: is the newest change point of any series a regression beyond the gate's rule?

One line per series and metric the rules cover. A series with fewer than ``min_runs`` runs
is "not enough data": the measurement behind MIN_RUNS (bench/history/changes.py) says a
10% step is found less than 4 times in 5 below it, so a pass there would mean nothing.
Safety needs no statistics, as in the gate: a series whose newest run has violations where
an earlier run had none is a regression at once.

Exit codes as the gate's: 1 when any series regressed, else 2 when any series is short of
runs (never a silent pass), else 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.gate.rules import Rule
from bench.history.read import RunInfo
from bench.history.series import Panel, Series


@dataclass(frozen=True)
class Finding:
    """One checked series x metric: its status and the line printed for it.

    Why keep the status beside the line: the exit code and the page's red frame come from it.
    """

    series: str
    metric: str
    status: str  # "regression", "ok", "not enough data", "damaged" (the newest run is)
    line: str


def short_commit(run: RunInfo) -> str:
    sha = run.git_commit.split("+", 1)[0]
    return sha[:8] + ("+dirty" if "+dirty" in run.git_commit else "") if sha else run.run_id


def commit_range(panel: Panel, index: int, runs: dict[str, RunInfo]) -> str:
    """``<last run before>..<first run after>`` of a change at ``index``, by commit (run id without one)."""
    before = runs[panel.runs[index - 1]] if index > 0 else None
    after = runs[panel.runs[index]]
    return f"{short_commit(before)}..{short_commit(after)}" if before else short_commit(after)


def series_name(series: Series) -> str:
    params = " ".join(
        f"{k}={v}" for k, v in series.params.items() if k in ("users", "processes", "cs", "fencing")
    )
    return f"{series.label} [{params}; {series.machine_class}]"


def _fmt(value: float, rule: Rule) -> str:
    if rule.info.latency:
        return f"{value / 1000:.3g} ms"
    return f"{value:.4g}{(' ' + rule.info.unit) if rule.info.unit else ''}"


def check_series(
    series: list[Series], rules: list[Rule], runs: dict[str, RunInfo], min_runs: int
) -> tuple[int, list[Finding]]:
    """(exit code, findings) for every series x metric with a rule; violations always checked."""
    by_metric = {r.metric: r for r in rules}
    findings: list[Finding] = []
    for s in series:
        name = series_name(s)
        for panel in s.panels:
            key = panel.metric.key
            if key == "violations":
                findings.append(_safety(name, panel, runs))
                continue
            rule = by_metric.get(key)
            if rule is None:
                continue
            count = sum(1 for v in panel.values if not math.isnan(v))
            if count < min_runs:
                findings.append(
                    Finding(name, key, "not enough data",
                            f"NOT ENOUGH DATA {name} {key}: {count} runs, needs {min_runs} (--min-runs)")
                )  # fmt: skip
                continue
            if not panel.changes:
                findings.append(Finding(name, key, "ok", f"ok {name} {key}: no change point in {count} runs"))
                continue
            cp = panel.changes[-1]
            scale = panel.metric.scale  # panel values are displayed units; the rule's are the column's
            before, after = cp.before * scale, cp.after * scale
            where = commit_range(panel, cp.index, runs)
            text = (
                f"{key} {cp.step:+.1%} ({_fmt(before, rule)} -> {_fmt(after, rule)}) at {where}, "
                f"p={cp.pvalue:.2g}, rule {rule.text}"
            )
            if rule.beyond(before, after):
                findings.append(Finding(name, key, "regression", f"REGRESSION {name} {text}"))
            else:
                findings.append(Finding(name, key, "ok", f"ok {name} newest change {text}"))
    statuses = {f.status for f in findings}
    code = 1 if "regression" in statuses else 2 if ("not enough data" in statuses or not findings) else 0
    return code, findings


def _safety(name: str, panel: Panel, runs: dict[str, RunInfo]) -> Finding:
    unsafe = panel.unsafe
    if not unsafe or not unsafe[-1]:
        return Finding(name, "violations", "ok", f"ok {name} violations: the newest run is safe")
    safe = [i for i, u in enumerate(unsafe) if not u]
    if not safe:
        return Finding(
            name, "violations", "ok", f"ok {name} violations: unsafe in every run (not a new regression)"
        )
    first = safe[-1] + 1  # the first unsafe run of the streak that reaches the newest
    where = commit_range(panel, first, runs)
    return Finding(
        name,
        "violations",
        "regression",
        f"REGRESSION {name} violations: unsafe since {where} ({panel.values[-1]:g} in the newest run), "
        "rule violations:0",
    )
