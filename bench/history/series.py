"""Runs in order, and one series per impl x scenario x figure-changing parameters x machine class x metric.

Order: commit order (``git rev-list --topo-order`` of the repository bench history runs in)
when every run's commit is known to it, else the runs' start times, and the page says which.
A run's point is the median over its trials of that case (``--trials K``); a point is
hollow when any of those trials was generator-bound or had an ``unknown`` verdict.

Grouping: two runs belong to one series only if nothing but the code changed: the same
impl, workload and scenario (fencing mode, fault), the same case-level users and processes,
the same lock settings (ttl, retry interval, timeout, clock skew, impl parameters) and the
same options of that workload (``--cs``, ``--items`` ... from the workload catalog), on the
same machine class. ``--trials`` and the options of other workloads are left out: they do
not change what one trial of this case measures.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from bench.gate.compare import VIOLATION_COLUMNS
from bench.gate.rules import METRICS as GATE_METRICS
from bench.history.changes import ChangePoint, change_points
from bench.history.read import Loaded, RunInfo
from workloads.harness.catalog import ARRIVAL_OPTIONS, WORKLOADS


@dataclass(frozen=True)
class Metric:
    """A figure drawn over history: its cases.csv column, unit, which way is worse, its gate rule name.

    Why its own table: the gate's metrics have no hold inflation and no violation count,
    and the page needs a display unit (ms for microsecond columns).
    """

    key: str
    label: str
    column: str | None  # None: computed (violations)
    unit: str
    scale: float  # displayed value = column / scale
    worse: int  # +1: up is worse, -1: down is worse
    rule: str | None  # the gate's metric name (bench/gate/rules.py), None when the gate has none
    detect: bool = True


def _gate(key: str, label: str, unit: str, scale: float = 1.0) -> Metric:
    info = GATE_METRICS[key]
    return Metric(key, label, info.column, unit, scale, info.worse, key)


#: What every series page shows, in this order; arrival metrics only where cases have them.
METRICS: tuple[Metric, ...] = (
    _gate("throughput", "throughput", "acq/s"),
    _gate("acquire.p50", "acquire p50", "ms", 1000.0),
    _gate("acquire.p99", "acquire p99", "ms", 1000.0),
    _gate("handoff.p50", "handoff p50", "ms", 1000.0),
    Metric("hold-inflation", "hold inflation", "hold_inflation", "x", 1.0, +1, None),
    Metric("violations", "violations", None, "", 1.0, +1, "violations", detect=False),
    _gate("arrival.p99", "arrival p99", "ms", 1000.0),
    _gate("arrival.served", "buyers served", "buyers"),
    _gate("arrival.gave-up", "buyers gave up", "buyers"),
    _gate("arrival.inversions", "order inversions", ""),
    _gate("arrival.sellout", "sell-out time", "s"),
)


def metrics_for_rules(rule_metrics: Iterable[str]) -> tuple[Metric, ...]:
    """METRICS plus any gate metric a ``--rule`` names that is not drawn by default."""
    have = {m.key for m in METRICS}
    extra = []
    for key in rule_metrics:
        if key in have or key not in GATE_METRICS:
            continue
        info = GATE_METRICS[key]
        latency = info.latency
        extra.append(
            _gate(key, key.replace(".", " "), "ms" if latency else info.unit, 1000.0 if latency else 1.0)
        )
        have.add(key)
    return (*METRICS, *extra)


# run order ---------------------------------------------------------------------------------


def _commit(text: str) -> str:
    return text.split("+", 1)[0].strip()


def git_positions(repo: Path | None) -> dict[str, int]:
    """Every commit the repository knows -> its place in topological order (oldest 0); {} without git."""
    try:
        out = subprocess.run(
            ["git", "-C", str(repo or Path.cwd()), "rev-list", "--topo-order", "--reverse", "--all"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    if out.returncode != 0:
        return {}
    return {sha: i for i, sha in enumerate(out.stdout.split())}


def _time_key(run: RunInfo) -> tuple[float, str]:
    try:
        stamp = datetime.fromisoformat(run.started_at)
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=UTC)
        return stamp.timestamp(), run.run_id
    except ValueError:
        return math.inf, run.run_id  # no usable time: last, by run id (which starts with the time)


@dataclass(frozen=True)
class Order:
    """The runs in history order, and how that order was decided.

    Why the mode travels with the keys: a reader must know whether x means commits or time.
    """

    keys: list[str]
    mode: str  # "commit" or "time"
    note: str


def order_runs(runs: dict[str, RunInfo], repo: Path | None = None) -> Order:
    """Commit order when every run's commit is known to the repository, else run start time."""
    positions = git_positions(repo)
    unknown = [r for r in runs.values() if _commit(r.git_commit) not in positions]
    if positions and not unknown:
        keys = sorted(runs, key=lambda k: (positions[_commit(runs[k].git_commit)], _time_key(runs[k])))
        return Order(keys, "commit", "runs in commit order (git rev-list --topo-order), then by start time")
    keys = sorted(runs, key=lambda k: _time_key(runs[k]))
    if not positions:
        why = "no git repository here to order commits"
    else:
        why = f"{len(unknown)} of {len(runs)} runs have a commit this repository does not know"
    return Order(keys, "time", f"runs in start-time order ({why})")


# series -----------------------------------------------------------------------------------

_ONLY_WHEN_SET = ("fault", "clock_skew_s", "skewed_clients", "lock_params", "test_hosts", "expect_workers")
_LOCK_PARAMS = ("duration_s", "ttl_s", "retry_interval_s", "acquire_timeout_s", *_ONLY_WHEN_SET)
_CASE_PARAMS = ("users", "processes", "fencing", "fault")
_PER_WORKLOAD = {"duration": "duration_s", "ttl": "ttl_s", "users": "users", "processes": "processes",
                 "cs": "cs", "fencing": "fencing"}  # fmt: skip


def _workload_options(workload: str) -> tuple[str, ...]:
    base = workload.removesuffix("-open")
    info = WORKLOADS.get(base)
    options = tuple(info.options) if info else ()
    return (*options, *ARRIVAL_OPTIONS) if workload.endswith("-open") else options


def _plain(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _blank(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return value in ("", 0, 0.0, [], {}) if not isinstance(value, bool) else False


def case_params(run: RunInfo, row: dict[str, Any]) -> dict[str, str]:
    """The parameters that shape one case's figures: case columns, lock settings, its workload's options."""
    workload = str(row.get("workload") or "")
    params = dict(run.params)
    per = params.get("per_workload")
    if isinstance(per, dict) and isinstance(per.get(workload), dict):
        params.update({_PER_WORKLOAD.get(k, k): v for k, v in per[workload].items()})
    out: dict[str, str] = {}
    for key in (*_LOCK_PARAMS, *_workload_options(workload)):
        if key in params and not (key in _ONLY_WHEN_SET and _blank(params[key])):
            out[key] = _plain(params[key])
    for key in _CASE_PARAMS:
        value = row.get(key)
        if _blank(value) and key in params:
            value = params[key]
        if key in _ONLY_WHEN_SET and _blank(value):
            continue
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            out[key] = _plain(value)
    return dict(sorted(out.items()))


@dataclass
class Panel:
    """One metric of one series: its points in history order and its change points.

    Why per metric: change points, the check and the page's small multiples are all per metric.
    """

    metric: Metric
    runs: list[str]  # run keys, history order
    values: list[float]
    hollow: list[bool]
    changes: list[ChangePoint] = field(default_factory=list)
    unsafe: list[bool] = field(default_factory=list)  # violations only


@dataclass
class Series:
    """The runs of one impl x scenario x parameters x machine class, with a panel per metric.

    Why grouped this way: a change in any of these is a different experiment, and a step
    between experiments is not a regression of the code.
    """

    machine_class: str
    impl: str
    workload: str
    scenario: str
    params: dict[str, str]
    panels: list[Panel]

    @property
    def label(self) -> str:
        scenario = self.scenario if self.scenario and self.scenario != self.workload else ""
        return " ".join(x for x in (self.impl, self.workload, scenario) if x)


def _flag(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "1.0")


def _per_run(cases: pd.DataFrame, metrics: tuple[Metric, ...]) -> pd.DataFrame:
    """One row per series x run: the median over trials of every metric column, violations, hollow.

    Grouped once for all series (a loop per run and metric took 15 s over 1,000 runs)."""
    columns = [m.column for m in metrics if m.column and m.column in cases.columns]
    frame = pd.DataFrame({c: pd.to_numeric(cases[c], errors="coerce") for c in columns}, index=cases.index)
    verdict = (
        cases["verdict"].fillna("unknown").astype(str).str.lower()
        if "verdict" in cases
        else pd.Series("unknown", index=cases.index)
    )
    counts = [pd.to_numeric(cases[c], errors="coerce").fillna(0) for c in VIOLATION_COLUMNS if c in cases]
    frame["_violations"] = sum(counts) if counts else 0.0
    frame["_invalid"] = verdict.eq("invalid")
    bound = cases["generator_bound"].map(_flag) if "generator_bound" in cases else False
    frame["_hollow"] = verdict.eq("unknown") | bound
    frame["_series"] = cases["_series"]
    frame["_folder"] = cases["_folder"]
    grouped = frame.groupby(["_series", "_folder"], sort=False)
    out = grouped[columns].median() if columns else grouped.size().to_frame("_n")[[]]
    out["_violations"] = grouped["_violations"].sum()
    out["_unsafe"] = (out["_violations"] > 0) | grouped["_invalid"].any()
    out["_hollow"] = grouped["_hollow"].any()
    return out


def build_series(
    loaded: Loaded,
    order: Order,
    metrics: tuple[Metric, ...] = METRICS,
    max_pvalue: float | None = None,
    min_magnitude: float | None = None,
) -> list[Series]:
    """Every series with its panels; change points found per panel (runs without a value skipped)."""
    cases = loaded.cases
    if cases.empty or "impl" not in cases.columns:
        return []
    rank = {key: i for i, key in enumerate(order.keys)}
    cases = cases[cases["_folder"].isin(rank)].copy()
    keys: list[str] = []
    for row in cases.to_dict("records"):
        run = loaded.runs[row["_folder"]]
        workload = str(row.get("workload") or "")
        scenario = str(row.get("scenario") or "") if not _blank(row.get("scenario")) else workload
        params = case_params(run, row)
        keys.append(json.dumps([run.machine_class, str(row.get("impl")), workload, scenario, params]))
    cases["_series"] = keys
    per_run = _per_run(cases, metrics)
    settings: dict[str, float] = {}
    if max_pvalue is not None:
        settings["max_pvalue"] = max_pvalue
    if min_magnitude is not None:
        settings["min_magnitude"] = min_magnitude
    out: list[Series] = []
    for key in dict.fromkeys(keys):
        rows = per_run.loc[key]
        rows = rows.iloc[sorted(range(len(rows)), key=lambda i: rank[rows.index[i]])]
        machine_class, impl, workload, scenario, params = json.loads(key)
        run_keys = [str(k) for k in rows.index]
        hollow = [bool(h) for h in rows["_hollow"]]
        panels: list[Panel] = []
        for metric in metrics:
            if metric.column is None:
                unsafe = [bool(u) for u in rows["_unsafe"]]
                panels.append(
                    Panel(metric, run_keys, [float(v) for v in rows["_violations"]], hollow, unsafe=unsafe)
                )
                continue
            if metric.column not in rows.columns:
                continue
            values = [float(v) / metric.scale for v in rows[metric.column]]
            if all(math.isnan(v) for v in values):
                continue
            panel = Panel(metric, run_keys, values, hollow)
            if metric.detect:
                panel.changes = change_points(values, **settings)
            panels.append(panel)
        out.append(Series(machine_class, impl, workload, scenario, params, panels))
    out.sort(key=lambda s: (s.machine_class, s.impl, s.workload, s.scenario, json.dumps(s.params)))
    return out
