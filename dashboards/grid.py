"""The safety grid: the first screen of a matrix report, one cell per impl x scenario.

It answers "which of these locks survived what, on how much evidence". A cell is green
(*survived*) only when the evidence reached the run's target: k strikes of the fault and n
grants after them (cases.csv ``strikes``, ``acquisitions_after_strike``; the target in
``evidence_target_k`` / ``_n``). Below the target it is pale (*held, thin evidence*); a
fault that never struck is grey (*not tested*), never green. Safety and liveness stay
apart: *failed* (red) is two holders at once or damaged data, *failed, data safe* (amber)
is a lock that failed while fencing kept the data right, *stuck* (purple) is a lock nobody
could take again within its bound after a crash: a liveness failure, not a safety one.
Fenced and unfenced cases of one scenario test the same lock, so their evidence adds up.

Reads cases.csv and run.json only; every string from them goes through
:func:`dashboards.html_bits.e`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dashboards.html_bits import VIOLATIONS, e
from dashboards.load import RunData, flag, num, scenario_of, text
from dashboards.matrix import split_scenario

Row = dict[str, Any]

#: cell class -> (word shown, legend text)
CLASSES = {
    "good": ("survived", "survived, on at least the target evidence"),
    "thin": ("held, thin", "no violation, but fewer strikes or grants than the target"),
    "bad": ("failed", "two holders at once, or the data was damaged"),
    "warn": ("failed, data safe", "the lock failed; fencing kept the data right"),
    "stuck": ("stuck", "nobody got the lock again within its bound after a holder died (liveness)"),
    "nottested": ("not tested", "the fault never struck, or the scenario could not run here"),
    "unknown": ("unknown", "the checkers could not decide (a lost worker, a dead server ...)"),
}
#: Worst first: the cell takes the worst class among its cases.
ORDER = ("bad", "warn", "stuck", "unknown", "thin", "good", "nottested")
#: Extra counters that mean the data suffered.
DATA_DAMAGE = ("oversold_units", "lost_updates", "stale_writes_accepted")

GRID_CSS = """
#safety-grid { font-size: 0.78em; width: 100%; table-layout: fixed; }
#safety-grid th, #safety-grid td { padding: 2px 4px; }
#safety-grid tbody th { text-align: left; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
#safety-grid thead th:first-child { width: 14em; }
#safety-grid td { text-align: center; line-height: 1.15; }
#safety-grid td small { display: block; font-size: 0.88em; color: inherit; opacity: 0.85; }
#safety-grid td.good, .legend span.good { background: #b9e6b9; color: #0f4a0f; }
#safety-grid td.thin, .legend span.thin { background: #eef7ee; color: #4d6b4d; border: 1px dashed #9cc59c; }
#safety-grid td.bad, .legend span.bad { background: #f3b6ae; color: #7a0000; font-weight: bold; }
#safety-grid td.warn, .legend span.warn { background: #fbe2a8; color: #6b4a00; }
#safety-grid td.stuck, .legend span.stuck { background: #e3d3f2; color: #4b2a6b; }
#safety-grid td.nottested, .legend span.nottested { background: #f4f4f4; color: #888; }
#safety-grid td.unknown, .legend span.unknown { background: #dcdcdc; color: #333; }
#safety-grid td.none { background: #fff; color: #bbb; }
#safety-grid td.contradicts { outline: 2px solid #c0392b; outline-offset: -2px; }
.legend span { display: inline-block; padding: 0 5px; margin: 0 4px 2px 0; border-radius: 3px; font-size: 0.85em; }
ul.impl-notes { font-size: 0.85em; margin-top: 0.3em; } ul.impl-notes li { margin: 0.15em 0; }
"""


@dataclass
class GridCell:
    """What one impl x scenario cell shows, over every case (trials, fenced and unfenced) of that pair."""

    cls: str
    word: str
    detail: str
    hover: str
    k: int
    n: int
    contradicts: bool = False

    def html(self, column: str) -> str:
        extra = " contradicts" if self.contradicts else ""
        sort = ORDER.index(self.cls) if self.cls in ORDER else len(ORDER)
        detail = f"<small>{e(self.detail)}</small>" if self.detail else ""
        return (
            f'<td class="{self.cls}{extra}" data-col="{e(column)}" data-sort="{sort}" '
            f'title="{e(self.hover)}">{e(self.word)}{detail}</td>'
        )


def _int(row: Row, column: str) -> int:
    value = num(row, column)
    return int(value) if value is not None and math.isfinite(value) else 0


def _target(rows: list[Row]) -> tuple[int | None, int]:
    ks = [num(r, "evidence_target_k") for r in rows]
    ns = [num(r, "evidence_target_n") for r in rows]
    k = max((int(v) for v in ks if v is not None), default=None)
    n = max((int(v) for v in ns if v is not None), default=0)
    return k, n


def _violated(row: Row) -> bool:
    return text(row, "verdict") == "invalid" and (
        any((num(row, c) or 0) > 0 for c in VIOLATIONS) or (num(row, "stale_writes_accepted") or 0) > 0
    )


def _stuck(row: Row) -> bool:
    return (num(row, "stuck_locks") or 0) > 0


def _recovery(rows: list[Row]) -> str:
    p50 = [v for v in (num(r, "recovery_ms_p50") for r in rows) if v is not None and math.isfinite(v)]
    top = [v for v in (num(r, "recovery_ms_max") for r in rows) if v is not None and math.isfinite(v)]
    if not p50:
        return ""
    text_ = f"recovered in {sorted(p50)[len(p50) // 2] / 1000:.1f} s"
    if top and max(top) > 1.5 * min(p50):
        text_ += f" (max {max(top) / 1000:.1f} s)"
    return text_


def cell_for(rows: list[Row]) -> GridCell:
    """The cell of one impl x scenario from its cases (plain dicts of cases.csv)."""
    target_k, target_n = _target(rows)
    fault_scenario = target_k is not None
    struck = [r for r in rows if _int(r, "strikes") > 0] if fault_scenario else rows
    k = sum(_int(r, "strikes") for r in struck) if fault_scenario else 0
    n = (
        sum(_int(r, "acquisitions_after_strike") for r in struck)
        if fault_scenario
        else sum(_int(r, "acquisitions") for r in rows)
    )
    reasons = sorted({t for t in (text(r, "verdict_reason") for r in rows) if t})
    contradicts = any(flag(r, "contradicts_catalog") is True for r in rows)
    counters = []
    for column in (*VIOLATIONS, *DATA_DAMAGE[2:], "stale_writes_refused", "stuck_locks"):
        total = sum(_int(r, column) for r in rows)
        if total:
            counters.append(f"{column} {total:,}")
    bound = ""
    if fault_scenario and k:
        bound = f"; 95%: per-strike failure < {3 / k:.2g}" + (f", per-grant race < {3 / n:.2g}" if n else "")
    target = (
        f"target k >= {target_k}" + (f", n >= {target_n:,}" if target_n else "") if fault_scenario else ""
    )
    expected = {t for t in (text(r, "expected_outcome") for r in rows) if t}
    hover_parts = [
        f"{len(rows)} case{'s' if len(rows) != 1 else ''}: " + ", ".join(str(r.get("case")) for r in rows),
        f"k={k} strikes, n={n:,} grants after them{bound}" if fault_scenario else f"n={n:,} acquisitions",
        target,
        "expected: " + ", ".join(sorted(expected)) if expected else "",
        *counters,
        *reasons,
    ]
    hover = "; ".join(p for p in hover_parts if p)
    evidence = f"k={k} n={n:,}" if fault_scenario else f"n={n:,}"
    if any(_violated(r) for r in rows):
        fenced = [r for r in rows if text(r, "fencing") == "enforce"]
        data_safe = bool(fenced) and all(flag(r, "data_safe") is True for r in fenced)
        cls = "warn" if data_safe else "bad"
        return GridCell(cls, CLASSES[cls][0], evidence, hover, k, n, contradicts)
    if any(_stuck(r) for r in rows):
        bound_s = max((num(r, "stuck_bound_s") or 0 for r in rows), default=0)
        detail = f"none in {bound_s:g} s" if bound_s else evidence
        return GridCell("stuck", "stuck", detail, hover, k, n, contradicts)
    if any(text(r, "verdict") == "unknown" and (_int(r, "strikes") or not fault_scenario) for r in rows):
        return GridCell("unknown", "unknown", evidence, hover, k, n, contradicts)
    if fault_scenario and not struck:
        return GridCell("nottested", "did not strike", "not tested", hover, 0, 0, contradicts)
    recovery = _recovery(rows)
    earned = (k >= (target_k or 0) and n >= target_n) if fault_scenario else n >= max(target_n, 1)
    cls = "good" if earned else "thin"
    detail = evidence + (f"; {recovery}" if recovery else "")
    return GridCell(cls, CLASSES[cls][0], detail, hover, k, n, contradicts)


def _columns(run: RunData, rows: list[Row]) -> list[str]:
    declared = list((run.meta.get("params") or {}).get("scenarios") or {})
    seen = list(dict.fromkeys(split_scenario(scenario_of(r))[0] for r in rows))
    return [s for s in declared if s in seen] + [s for s in seen if s not in declared]


def _impls(run: RunData, rows: list[Row]) -> list[str]:
    declared = list((run.meta.get("params") or {}).get("impls") or [])
    seen = list(dict.fromkeys(str(r.get("impl") or r.get("case")) for r in rows))
    return [i for i in declared if i in seen] + [i for i in seen if i not in declared]


def grid_cells(run: RunData) -> tuple[list[str], list[str], dict[tuple[str, str], GridCell]]:
    """(impls in catalog order, scenario columns, {(impl, scenario): cell})."""
    if run.cases.empty:
        return [], [], {}
    rows = run.cases.to_dict("records")
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        impl = str(r.get("impl") or r.get("case"))
        groups.setdefault((impl, split_scenario(scenario_of(r))[0]), []).append(r)
    cells = {key: cell_for(members) for key, members in groups.items()}
    for item in (run.meta.get("params") or {}).get("not_run") or []:
        key = (str(item.get("impl")), str(item.get("scenario")))
        if key not in cells:
            reason = str(item.get("reason") or "not run")
            cells[key] = GridCell("nottested", str(item.get("word") or "not tested"), "", reason, 0, 0)
            rows.append({"impl": key[0], "scenario": key[1]})
    return _impls(run, rows), _columns(run, rows), cells


def _paragraph(impl: str, columns: list[str], cells: dict[tuple[str, str], GridCell]) -> str:
    by_class: dict[str, list[str]] = {}
    for column in columns:
        c = cells.get((impl, column))
        if c is not None:
            by_class.setdefault(c.cls, []).append(column)
    parts = []
    for cls, lead in (
        ("bad", "failed"),
        ("warn", "failed with the data kept safe by fencing in"),
        ("stuck", "stuck after"),
        ("good", "survived"),
        ("thin", "held on thin evidence in"),
        ("unknown", "undecided in"),
        ("nottested", "not tested in"),
    ):
        if by_class.get(cls):
            names = ", ".join(
                f"{col} ({cells[(impl, col)].detail})" if cls in ("good", "thin", "stuck") else col
                for col in by_class[cls]
            )
            parts.append(f"{lead} {names}")
    return f"<li><b>{e(impl)}</b>: {e('; '.join(parts))}.</li>"


def safety_grid_section(run: RunData) -> str:
    """The grid as the first section of a matrix report ("" for a run without evidence columns)."""
    if run.cases.empty or "strikes" not in run.cases.columns:
        return ""
    impls, columns, cells = grid_cells(run)
    if not impls:
        return ""
    params = run.meta.get("params") or {}
    target = params.get("evidence_target") or "the target"
    level = params.get("evidence")
    head = "".join(
        f'<th class="sortable" data-sort-col="{i + 1}" title="{e(c)}">{e(c)}</th>'
        for i, c in enumerate(columns)
    )
    body = []
    for impl in impls:
        tds = "".join(
            cells[(impl, c)].html(c) if (impl, c) in cells else f'<td class="none" data-col="{e(c)}">n/a</td>'
            for c in columns
        )
        body.append(f'<tr data-row="{e(impl)}"><th data-sort="{e(impl)}">{e(impl)}</th>{tds}</tr>')
    counts: dict[str, int] = {}
    for c in cells.values():
        counts[c.cls] = counts.get(c.cls, 0) + 1
    legend = " ".join(
        f'<span class="{cls}" title="{e(CLASSES[cls][1])}">{e(CLASSES[cls][0])}: {counts.get(cls, 0)}</span>'
        for cls in ("good", "thin", "bad", "warn", "stuck", "unknown", "nottested")
    )
    level_text = f" ({e(level)})" if level else ""
    caption = (
        f'<p class="caption legend">{legend}<br>Green needs {e(target)}{level_text}: k strikes of the fault '
        "and n grants after them, with no violation; none in k strikes bounds the per-strike failure "
        "probability below 3/k, none in n grants the per-grant race rate below 3/n (95%, rule of three). "
        "Fenced and unfenced cases add up; n/a: the scenario does not apply. Hover a cell for its cases, "
        "counters and reasons; click a header to sort.</p>"
    )
    notes = "".join(_paragraph(impl, columns, cells) for impl in impls)
    return (
        '<h2 id="safety-grid-heading">Which lock survived what, on how much evidence</h2>'
        f'<table id="safety-grid" class="sortable-table"><thead><tr><th class="sortable" data-sort-col="0">'
        f"impl</th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{caption}"
        f'<ul class="impl-notes">{notes}</ul>'
    )
