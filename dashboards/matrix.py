"""The safety verdict matrix: one row per impl, one column per scenario, one coloured cell each.

This is the report's answer to "which lock stays safe when a holder stalls, crashes or a
server dies, and does a fencing token save the data when it does not": red where the lock
failed its guarantee and the data suffered (or a lock stayed stuck), amber where the lock
failed but the data survived, green where it held, grey where the run proved nothing.
Fenced and unfenced runs of one scenario sit side by side so the difference a token makes
reads across one row. Every string from a results folder goes through
:func:`dashboards.html_bits.e`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dashboards.cells import CLASSES, ORDER, case_class, cell_for
from dashboards.html_bits import e, fmt
from dashboards.load import RunData, flag, num, scenario_of, split_scenario, text

#: split_scenario lives in dashboards/load.py: timeline.py needs it, and this module imports cells -> timeline.
#: Counters summed over trials and shown in a cell when present and nonzero: (column, short label).
SHOWN = (
    ("overlapping_holds", "overlaps"),
    ("witness_violations", "witness"),
    ("oversold_units", "oversold"),
    ("lost_updates", "lost updates"),
    ("stale_writes_accepted", "stale writes accepted"),
    ("stale_writes_refused", "stale writes refused"),
    ("stuck_locks", "stuck"),
    ("fencing_order_violations", "tokens out of grant order"),
    ("legit_writes_refused", "legitimate writes refused"),
    ("uncertain_overlaps", "uncertain overlaps"),
    ("open_ended_overlaps", "after a lost holder"),
)
#: Further counters for the cell's tooltip only (summed over trials).
TOOLTIP = ("stale_reads", "pauses", "crashes", "acquire_info", "releases_not_owned")
#: Cell classes from worst to best (dashboards/cells.py ORDER).
SEVERITY = ORDER
_VERDICT_TEXT = {c: word for c, (word, _) in CLASSES.items()}
#: Classes the page's own CSS does not colour (it knows good, warn, bad, unknown).
MATRIX_CSS = (
    "<style>td.mcell.thin{background:#eef7ee;color:#4d6b4d}td.mcell.stuck{background:#e3d3f2;color:#4b2a6b}"
    "td.mcell.nottested{background:#f4f4f4;color:#888}td.mcell.baseline{background:#eef2f7;color:#4a5a6a}</style>"
)


def trial_class(row: pd.Series | dict[str, Any]) -> str:
    """bad / warn / stuck / unknown / thin / nottested / good for one case: the cell rules of
    :func:`dashboards.cells.cell_for`, so every view colours a case the same way."""
    return case_class(dict(row))


def _sum(rows: list[dict[str, Any]], column: str) -> float | None:
    values = [v for v in (num(r, column) for r in rows) if v is not None]
    return sum(values) if values else None


@dataclass
class MatrixCell:
    """What one impl x scenario cell shows, aggregated over the trials of that pair."""

    cls: str
    verdict: str
    counters: list[str]
    trials: int
    tooltip: str
    note: str = ""
    cases: list[str] = field(default_factory=list)

    def html(self, column: str) -> str:
        lines = [f"<b>{e(self.verdict)}</b>"]
        shown = list(self.counters)
        if self.cls == "warn":
            shown.append("fencing kept the data safe")
        if shown:
            lines.append(f"<small>{e(' · '.join(shown))}</small>")
        extra = [f"{self.trials} trials"] if self.trials > 1 else []
        if self.note:
            extra.append(self.note)
        if extra:
            lines.append(f'<small class="na">{e("; ".join(extra))}</small>')
        return (
            f'<td class="mcell {self.cls}" data-col="{e(column)}" title="{e(self.tooltip)}">'
            f"{'<br>'.join(lines)}</td>"
        )


def summarize(trials: pd.DataFrame | list[dict[str, Any]], note: str = "") -> MatrixCell:
    """The cell for the trials of one impl x scenario (rows of cases.csv): worst verdict, counters summed."""
    # plain dicts: iterrows converts every arrow string column on every row (minutes on a matrix run)
    rows = trials.to_dict("records") if isinstance(trials, pd.DataFrame) else list(trials)
    cases = [str(r.get("case")) for r in rows]
    cell = cell_for(rows) if rows else None
    cls = cell.cls if cell is not None else "unknown"
    counters = []
    details = []
    for column, label in SHOWN:
        total = _sum(rows, column)
        if column == "witness_violations" and (_sum(rows, "overlapping_holds") or 0) > 0:
            total_shown = None  # the same incidents as the overlaps, seen by the resource
        else:
            total_shown = total
        if total_shown:
            counters.append(f"{label} {fmt(total_shown)}")
        if total is not None:
            details.append(f"{column} {fmt(total)}")
    recovery = [v for v in (num(r, "recovery_ms_p50") for r in rows) if v is not None]
    if recovery:
        p50 = float(pd.Series(recovery).median())
        counters.append(f"recovery p50 {fmt(p50)} ms")
        details.append(f"recovery_ms_p50 {fmt(p50)}" + (" (median over trials)" if len(recovery) > 1 else ""))
    crashes = _sum(rows, "crashes") or 0
    if crashes and not recovery and not (_sum(rows, "stuck_locks") or 0):
        # killed holders whose locks nobody took before the run ended, in less than the stuck bound
        counters.append("killed holder's lock not re-acquired before the end")
    recovery_max = [v for v in (num(r, "recovery_ms_max") for r in rows) if v is not None]
    if recovery_max:
        details.append(f"recovery_ms_max {fmt(max(recovery_max))}")
    for column in TOOLTIP:
        total = _sum(rows, column)
        if total is not None:
            details.append(f"{column} {fmt(total)}")
    safe = [flag(r, "data_safe") for r in rows]
    if any(s is not None for s in safe):
        details.append("data_safe " + ", ".join("n/a" if s is None else str(s).lower() for s in safe))
    window = [v for v in (num(r, "fault_window_s") for r in rows) if v is not None]
    if window:
        details.append("fault window " + ", ".join(f"{w:.3g} s" for w in window))
    modes = sorted({m for m in (text(r, "fencing") for r in rows) if m})
    if modes:
        details.append("fencing " + ", ".join(modes))
    verdicts = sorted({text(r, "verdict") or "unknown" for r in rows})
    reasons = list(dict.fromkeys(t for t in (text(r, "verdict_reason") for r in rows) if t))
    why = [f"why: {' | '.join(reasons)}"] if reasons else []
    tooltip = "; ".join([f"verdicts: {', '.join(verdicts)}", *why, *details, f"cases: {', '.join(cases)}"])
    if (
        cell is not None
        and cell.cls in ("bad", "nottested")
        and cell.detail
        and not cell.detail.startswith("k=")
    ):
        counters.insert(0, cell.detail)  # "the data happened to survive (no fencing)", "control survived ..."
    return MatrixCell(
        cls=cls, verdict=cell.word if cell is not None else _VERDICT_TEXT[cls], counters=counters, trials=len(rows), tooltip=tooltip, note=note,
        cases=cases,
    )  # fmt: skip


def _columns(scenarios: list[str]) -> list[tuple[str, list[str]]]:
    """(base, [scenario, ...]) in first-seen order of the bases, unsuffixed, unfenced, fenced within one."""
    bases: dict[str, list[str]] = {}
    for scenario in scenarios:
        base, _ = split_scenario(scenario)
        bases.setdefault(base, [])
        if scenario not in bases[base]:
            bases[base].append(scenario)
    order = {"": 0, "unfenced": 1, "fenced": 2}
    return [(b, sorted(s, key=lambda x: order[split_scenario(x)[1]])) for b, s in bases.items()]


def matrix_cells(run: RunData) -> tuple[list[str], list[tuple[str, list[str]]], dict[tuple[str, str], str]]:
    """(impls, columns grouped by base scenario, {(impl, column): cell html}) for ``run``."""
    cases = run.cases
    if cases.empty:
        return [], [], {}
    impl_key = cases["impl"].astype("string") if "impl" in cases.columns else cases["case"].astype("string")
    impl_key = impl_key.fillna(cases["case"].astype("string"))
    # rows as dicts grouped in first-seen order (a pandas groupby sliced all ~140 columns per group)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for impl, row in zip(impl_key.tolist(), run.rows(cases), strict=True):
        groups.setdefault((str(impl), scenario_of(row)), []).append(row)
    present = {s for _, s in groups}
    impls = list(dict.fromkeys(i for i, _ in groups))
    placed: dict[tuple[str, str], tuple[list[dict[str, Any]], str]] = {}
    tokenless: set[tuple[str, str]] = set()
    for (impl, scenario), rows in groups.items():
        base, variant = split_scenario(scenario)
        column = scenario
        note = ""
        if not variant and f"{base}+unfenced" in present and (impl, f"{base}+unfenced") not in groups:
            # An impl without fencing tokens ran unfenced only (fencing off): its result is
            # the unfenced one, and its fenced cell says why it is empty.
            column = f"{base}+unfenced"
            note = "no fencing tokens: ran unfenced only"
            tokenless.add((impl, f"{base}+fenced"))
        placed[(impl, column)] = (rows, note)
    columns = _columns([s for _, s in placed] if placed else [])
    html_cells: dict[tuple[str, str], str] = {}
    for _, scenarios in columns:
        for scenario in scenarios:
            for impl in impls:
                if (impl, scenario) in placed:
                    rows, note = placed[(impl, scenario)]
                    html_cells[(impl, scenario)] = summarize(rows, note).html(scenario)
                elif (impl, scenario) in tokenless:
                    html_cells[(impl, scenario)] = (
                        f'<td class="mcell na" data-col="{e(scenario)}">no fencing tokens</td>'
                    )
                else:
                    html_cells[(impl, scenario)] = (
                        f'<td class="mcell na" data-col="{e(scenario)}">not run</td>'
                    )
    return impls, columns, html_cells


def _variant_label(scenario: str) -> str:
    return split_scenario(scenario)[1] or "no fencing"


def scenario_matrix_section(run: RunData, several: bool = False) -> str:
    """The impl x scenario verdict matrix of ``run`` as an HTML section."""
    impls, columns, cells = matrix_cells(run)
    which = f" (run {e(run.run_id)})" if several else ""
    caption = (
        '<p class="caption">One row per impl, one column per scenario (workload, server fault, fencing: '
        "<i>unfenced</i> counts stale writes but accepts them, <i>fenced</i> refuses writes carrying an "
        "older token than the resource has seen). The colours are the safety grid's, from one cell "
        "function: <b>red</b>, the lock failed (its verdict is invalid, whatever counter made it so; "
        "an unfenced failure whose data survived is red and says the data happened to survive); "
        "<b>amber</b>, it failed but fencing kept the data right; <b>purple</b>, stuck; <b>green</b>, "
        "survived on the target evidence (for a fault: k strikes that hit and n grants after them); "
        "<b>pale</b>, held on thin evidence; <b>grey</b>, unknown, not struck, or its positive control "
        "survived (did not bite). Counters are summed over trials; hover a cell for every counter "
        "and its cases.</p>" + MATRIX_CSS
    )
    if not impls:
        return f'<h2 id="scenario-matrix">Verdict matrix: impl x scenario{which}</h2><p>No cases.</p>'
    two = any(len(s) > 1 or split_scenario(s[0])[1] for _, s in columns)
    span = " rowspan=2" if two else ""
    head1 = [f"<th{span}>impl</th>"]
    head2 = []
    for base, scenarios in columns:
        if len(scenarios) == 1 and not split_scenario(scenarios[0])[1]:
            head1.append(f'<th{span} data-scenario="{e(scenarios[0])}">{e(base)}</th>')
            continue
        head1.append(f"<th colspan={len(scenarios)}>{e(base)}</th>")
        head2 += [f'<th data-scenario="{e(s)}">{e(_variant_label(s))}</th>' for s in scenarios]
    rows = []
    for impl in impls:
        body = "".join(cells[(impl, s)] for _, scenarios in columns for s in scenarios)
        rows.append(f'<tr data-row="{e(impl)}"><th>{e(impl)}</th>{body}</tr>')
    second = f"<tr>{''.join(head2)}</tr>" if head2 else ""
    table = f'<table id="scenario-matrix-table"><tr>{"".join(head1)}</tr>{second}{"".join(rows)}</table>'
    return (
        f'<h2 id="scenario-matrix">Verdict matrix: impl x scenario{which}</h2>{caption}'
        f'<div class="scroll">{table}</div>'
    )
