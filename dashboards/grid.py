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

from dashboards.cells import CLASSES, ORDER, GridCell, Row, cell_for
from dashboards.html_bits import e
from dashboards.load import RunData, scenario_of, split_scenario

__all__ = ["CLASSES", "ORDER", "GridCell", "cell_for", "grid_cells", "safety_grid_section"]

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
#safety-grid td.baseline, .legend span.baseline { background: #eef2f7; color: #4a5a6a; }
#safety-grid td.unknown, .legend span.unknown { background: #dcdcdc; color: #333; }
#safety-grid td.none { background: #fff; color: #bbb; }
#safety-grid td.contradicts { outline: 2px solid #c0392b; outline-offset: -2px; }
.legend span { display: inline-block; padding: 0 5px; margin: 0 4px 2px 0; border-radius: 3px; font-size: 0.85em; }
ul.impl-notes { font-size: 0.85em; margin-top: 0.3em; } ul.impl-notes li { margin: 0.15em 0; }
"""


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
    rows = [r for r in run.cases.to_dict("records") if r.get("role") != "control"]
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        impl = str(r.get("impl") or r.get("case"))
        groups.setdefault((impl, split_scenario(scenario_of(r))[0]), []).append(r)
    cells = {key: cell_for(members) for key, members in groups.items()}
    for item in (run.meta.get("params") or {}).get("not_run") or []:
        key = (str(item.get("impl")), str(item.get("scenario")))
        if item.get("word") == "n/a":
            continue  # the scenario does not apply to the lock (it has no lease): no cell
        if key not in cells:
            reason = str(item.get("reason") or "not run")
            cells[key] = GridCell("nottested", str(item.get("word") or "not tested"), "", reason, 0, 0)
            rows.append({"impl": key[0], "scenario": key[1]})
    return _impls(run, rows), _columns(run, rows), cells


def _control_line(run: RunData, scenario: str) -> str:
    """The column header's second line: what the scenario's positive control did (bench/matrix/controls.py)."""
    said = ((run.meta.get("params") or {}).get("controls") or {}).get(scenario)
    if not said:
        return ""
    bit = str(said).startswith("failed")
    return f'<small class="{"" if bit else "nobite"}">control: {e(said)}</small>'


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
        ("baseline", "held without a fault in"),
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
        f'<th class="sortable" data-sort-col="{i + 1}" title="{e(c)}">{e(c)}{_control_line(run, c)}</th>'
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
        for cls in ("good", "thin", "bad", "warn", "stuck", "unknown", "baseline", "nottested")
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
