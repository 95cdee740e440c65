"""``bench history [ROOT...]``: read every run, build the series, find change points, write the page, check.

The page gets plain data (a JSON-able dict, :func:`page_data`): dashboards import nothing
from bench. It goes to ``<root>/history/index.html`` (``results/history/index.html`` by
default) or ``--out``, never into a run folder: a run folder holds only its own files.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.errors import UserError
from bench.gate.rules import DEFAULT_RULES, parse_rules
from bench.history.changes import MAX_PVALUE, MEASURED_NOISE_CV, MIN_MAGNITUDE, MIN_RUNS, WINDOW
from bench.history.check import Finding, check_series, commit_range, short_commit
from bench.history.checked import CACHE_NAME
from bench.history.read import Loaded, is_run_folder, newest_damaged, read_runs
from bench.history.series import Order, Series, build_series, metrics_for_rules, order_runs


def require_extras() -> None:
    """``bench history`` needs the ``history`` extra (DuckDB, Apache Otava): one line naming the fix."""
    import importlib.util

    missing = [m for m in ("duckdb", "otava") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(
            f"bench history needs {' and '.join(missing)}: install the extra with "
            ".venv/bin/python -m pip install -e '.[history]' (scripts/test installs it)"
        )


def default_out(roots: list[Path]) -> Path:
    """``<first root>/history/index.html``; beside the run when the root is itself a run folder."""
    root = roots[0]
    base = root.parent if is_run_folder(root) else root
    return base / "history" / "index.html"


def _refuse_run_folder(out: Path, loaded: Loaded) -> None:
    target = out.resolve()
    for run in loaded.runs.values():
        folder = run.path.resolve()
        if target == folder or folder in target.parents:
            raise UserError(
                f"--out {out} is inside the run folder {run.path}: a run folder holds only its own files; "
                "write the page elsewhere (default: <results>/history/index.html)"
            )


def _num(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 6)


def page_data(
    loaded: Loaded,
    order: Order,
    series: list[Series],
    out: Path,
    settings: dict[str, Any],
    findings: list[Finding] | None,
    check_code: int | None,
) -> dict[str, Any]:
    """Everything the page draws, as plain JSON-able values (strings unescaped: the page escapes)."""
    index = {key: i for i, key in enumerate(order.keys)}
    runs = []
    for key in order.keys:
        run = loaded.runs[key]
        link = os.path.relpath(run.report, out.parent) if run.report else None
        runs.append(
            {
                "id": run.run_id,
                "commit": short_commit(run) if run.git_commit else "",
                "time": run.started_at[:19].replace("T", " "),
                "machine_class": run.machine_class,
                "status": run.status,
                "link": link.replace(os.sep, "/") if link else None,
            }
        )
    varying = sorted(
        {k for s in series for k, v in s.params.items() if any(o.params.get(k) != v for o in series)}
    )
    status_of = {(f.series, f.metric): f.status for f in findings or []}
    from bench.history.check import series_name

    classes: dict[str, list[dict[str, Any]]] = {}
    for s in series:
        name = series_name(s)
        panels = []
        for p in s.panels:
            xs = [index[k] for k in p.runs]
            changes = []
            for cp in p.changes:
                worse = cp.step * p.metric.worse > 0
                changes.append(
                    {
                        "x0": xs[cp.index - 1] if cp.index > 0 else xs[cp.index],
                        "x1": xs[cp.index],
                        "step": _num(cp.step),
                        "before": _num(cp.before),
                        "after": _num(cp.after),
                        "pvalue": _num(cp.pvalue),
                        "range": commit_range(p, cp.index, loaded.runs),
                        "worse": worse,
                    }
                )
            panels.append(
                {
                    "metric": p.metric.key,
                    "label": p.metric.label,
                    "unit": p.metric.unit,
                    "x": xs,
                    "y": [_num(v) for v in p.values],
                    "hollow": [1 if h else 0 for h in p.hollow],
                    "changes": changes,
                    "status": status_of.get((name, p.metric.key), ""),
                }
            )
        classes.setdefault(s.machine_class, []).append(
            {
                "title": s.label,
                "subtitle": " · ".join(f"{k}={s.params[k]}" for k in varying if k in s.params),
                "params": s.params,
                "name": name,
                "panels": panels,
            }
        )
    return {
        "title": "lockbench performance history",
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "order": {"mode": order.mode, "note": order.note},
        "settings": settings,
        "skipped": [{"path": str(s.path), "why": s.why} for s in loaded.skipped],
        "runs": runs,
        "classes": [
            {
                "machine_class": mc,
                "runs": sum(1 for r in loaded.runs.values() if r.machine_class == mc),
                "series": items,
            }
            for mc, items in sorted(classes.items())
        ],
        "check": None
        if findings is None
        else {"code": check_code, "lines": [f.line for f in findings if f.status != "ok"]},
    }


def _newest_damaged(code: int, findings: list[Finding], path: Path) -> tuple[int, list[Finding]]:
    """--check when the newest run is damaged: exit 2 (1 still wins), and no series is "safe" at it.

    The damaged run was skipped, so each series' newest point is an older run; its safety
    line would speak of that run as if it were the newest.
    """
    out = [
        Finding(
            "(newest run)", "damage", "damaged", f"DAMAGED {path}: the newest run is damaged and was skipped"
        )
    ]
    for f in findings:
        if f.metric == "violations" and f.status == "ok":
            out.append(
                Finding(f.series, f.metric, "damaged",
                        f"UNKNOWN {f.series} violations: the newest run is damaged, its safety is unknown")
            )  # fmt: skip
        else:
            out.append(f)
    return (1 if code == 1 else 2), out


def history_command(
    roots: list[Path],
    out: Path | None = None,
    check: bool = False,
    rules: list[str] | None = None,
    min_runs: int = MIN_RUNS,
    max_pvalue: float = MAX_PVALUE,
    min_magnitude: float = MIN_MAGNITUDE,
    repo: Path | None = None,
    say: Callable[[str], None] | None = None,
) -> int:
    """Write the page (path on stdout); with ``check``, one line per series and the gate's exit codes."""
    require_extras()
    say = say or (lambda text: print(text, file=sys.stderr))
    parsed = parse_rules(list(rules) if rules else list(DEFAULT_RULES))
    out = out or default_out(roots)
    # the reader's verdicts on unchanged folders are kept beside the default page (bench/history/checked.py)
    loaded = read_runs(roots, cache=default_out(roots).parent / CACHE_NAME)
    _refuse_run_folder(out, loaded)
    for skipped in loaded.skipped:
        say(f"bench history: skipped {skipped.path}: {skipped.why}")
    order = order_runs(loaded.runs, repo)
    metrics = metrics_for_rules(r.metric for r in parsed)
    series = build_series(loaded, order, metrics, max_pvalue=max_pvalue, min_magnitude=min_magnitude)
    findings = None
    code = 0
    damaged = newest_damaged(loaded)
    if damaged is not None:
        say(f"bench history: the newest run {damaged.path} is damaged and was skipped: {damaged.why}")
    if check:
        code, findings = check_series(series, parsed, loaded.runs, min_runs)
        if damaged is not None:
            code, findings = _newest_damaged(code, findings, damaged.path)
    settings = {
        "max_pvalue": max_pvalue,
        "min_magnitude": min_magnitude,
        "window": WINDOW,
        "min_runs": min_runs,
        "noise_cv": MEASURED_NOISE_CV["throughput"],
        "rules": [r.text for r in parsed] + ["violations:0"],
    }
    from dashboards.history import render_history

    out.parent.mkdir(parents=True, exist_ok=True)
    path = render_history(
        page_data(loaded, order, series, out, settings, findings, code if check else None), out
    )
    print(path)
    if findings is not None:
        for finding in findings:
            print(finding.line)
        if code == 1:
            say("bench history: REGRESSION (exit 1): the newest change point of a series is beyond its rule")
        elif code == 2 and damaged is not None:
            say(
                f"bench history: DAMAGED (exit 2): the newest run {damaged.path} is damaged, so no series "
                "can be judged at it; this is not a pass (bench report on it names every problem)"
            )
        elif code == 2:
            say(
                "bench history: NOT ENOUGH DATA (exit 2): "
                + (f"some series have fewer than {min_runs} runs; " if findings else "no series to check; ")
                + "this is not a pass"
            )
    return code
