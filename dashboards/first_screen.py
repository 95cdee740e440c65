"""The report's first screen: one row per lock answering "which lock", ranked, with a pick.

Three questions per lock, one short row each, so the ten locks of a default Redis run fit one
1400x900 screen: what it costs at the hot key (acquisitions/s and acquire p99, marked † where
the load generator was the limit, the reason once in a footnote), whether it is safe, and
where it ranks (safety first, then cost) with the reason in one line; the first row is the
pick. The per-lock details (fencing, solo latency, round trips, fairness, servers, the
evidence) sit in the table below it.

Safety never comes from a fault-free case: plain contention cannot show what a stalled,
crashed or restarted holder does. It comes from, in order:

1. the newest ``bench matrix`` folder that put the lock through faults, found by bench
   (bench/results/matrices.py) and named in ``safety_sources``; its cells are the safety
   grid's (:func:`dashboards.grid.cell_for`), with their provenance (matrix id, date, k and
   n; a matrix of another commit is shown as older);
2. the fault cases of this run itself;
3. otherwise a grey "no fault tried" chip, never green, and the ``bench matrix`` command.

Reads files only (dashboards may not import bench): the matrix folders are loaded with
:func:`dashboards.load.load_run` like any results folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dashboards.decision import FAULT_WORKLOADS, ImplRow, Outcome, impl_rows, is_fault_case, records
from dashboards.grid import CLASSES, GridCell, grid_cells
from dashboards.html_bits import duration_us, e
from dashboards.load import ReportInputError, RunData, load_run, num, scenario_of, text

#: Safety tiers, best first: the rank's first key.
TIERS = {
    "safe": 0,  # every scenario that applies decided, and survived on the target evidence
    "none": 1,  # no fault tried: nothing known
    "thin": 2,  # nothing failed, but some held on thin evidence, undecided, or not yet tried
    "warn": 3,  # the lock failed, fencing kept the data right
    "bad": 4,  # failed (two holders or damaged data) or stuck
}
#: Why "thin" sits below "none": a partial or thin matrix is not evidence of safety, and ranking
#: it above an untested lock reads as a recommendation (a shard whose only Redis column was
#: failover once ranked a lock that fails three other scenarios first).

FIRST_CSS = """
#pick { font-size: 1em; margin: 0.4em 0 0.2em 0; }
#decision-table { width: 100%; font-size: 0.82em; table-layout: fixed; }
#decision-table td, #decision-table th { padding: 2px 5px; }
#decision-table tbody tr { height: 1.9em; }
#decision-table th.rank { width: 2.2em; } #decision-table th.impl { width: 15em; }
#decision-table th.cost { width: 6.5em; } #decision-table th.why { width: 34%; }
#decision-table tbody th { text-align: left; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
#decision-table td.safety { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
#decision-table td.why { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
#decision-table tr.picked th, #decision-table tr.picked td { border-top: 2px solid #2d6a2d; border-bottom: 2px solid #2d6a2d; }
#decision-table sup.mark { color: #777; } #decision-table sup.src { color: #555; }
.chip.nofault { background: #eeeeee; color: #666; border: 1px dashed #999; }
ol.sources, p.footnote { font-size: 0.8em; color: #555; margin: 0.2em 0; }
"""


@dataclass
class Safety:
    """What the first screen says about one lock's safety, and where it came from.

    Why its own record: the same lock can be answered by a matrix of this commit, an older
    matrix, this run's own fault cases or nothing, and the row must say which.
    """

    tier: str = "none"
    cells: dict[str, GridCell] = field(default_factory=dict)  # scenario -> cell (matrix or this run)
    source: int | None = None  # index into the page's source list (1-based), matrix only
    from_run: bool = False
    plain_failed: list[str] = field(default_factory=list)  # fault-free scenarios where the lock failed
    #: applicable fault scenarios not decided green (a pick needs none), and how many apply
    missing: list[str] = field(default_factory=list)
    applicable: int = 0
    shard: str = ""


@dataclass
class Source:
    """One matrix the page cites: its id, date, commit, evidence target and the locks it answers for."""

    run_id: str
    started_at: str
    git_commit: str
    same_commit: bool
    target: str
    evidence: str
    impls: list[str]
    cells: dict[tuple[str, str], GridCell]
    #: impl -> the fault scenarios that apply to it in the whole plan (every shard); None: not recorded
    applicable: dict[str, list[str]] | None = None
    #: "shard I/N" when this matrix ran one slice of its plan
    shard: str = ""
    #: why this matrix is not used (resultsio found it damaged, or it is gone): it answers for no lock
    damaged: str = ""


def _unused(entry: dict[str, Any], why: str) -> Source:
    """A matrix bench named whose safety is not taken: listed with why, answering for no lock."""
    return Source(
        run_id=str(entry.get("run_id") or Path(str(entry.get("path"))).name),
        started_at=str(entry.get("started_at") or ""),
        git_commit=str(entry.get("git_commit") or ""),
        same_commit=bool(entry.get("same_commit")),
        target="",
        evidence="",
        impls=[],
        cells={},
        damaged=why,
    )


def load_sources(sources: list[dict[str, Any]] | None) -> list[Source]:
    """The matrix folders bench named, loaded and graded with the grid's cells.

    Safety is never taken from a matrix the results reader finds damaged (or cannot read): it
    is listed with its first problem and answers for no lock, whose safety then reads as if
    no matrix held it.
    """
    out: list[Source] = []
    for entry in sources or []:
        try:
            matrix = load_run(Path(str(entry.get("path"))))
        except ReportInputError as exc:
            out.append(_unused(entry, str(exc)))  # removed or unreadable since bench chose it
            continue
        if matrix.damaged:
            more = f" (+{len(matrix.damaged) - 1} more)" if len(matrix.damaged) > 1 else ""
            out.append(_unused(entry, f"damaged: {matrix.damaged[0]}{more}"))
            continue
        _, _, cells = grid_cells(matrix)
        params = matrix.meta.get("params") if isinstance(matrix.meta.get("params"), dict) else {}
        declared = params.get("scenarios") if isinstance(params.get("scenarios"), dict) else {}

        def no_fault(name: str, declared: dict = declared) -> bool:
            spec = declared.get(name)
            if not isinstance(spec, dict) or "skew" in name:
                return False
            return not spec.get("fault") and spec.get("workload") not in FAULT_WORKLOADS

        # the matrix's fault-free baseline (flash-sale) shows exclusion, not safety: it counts only if it failed
        cells = {k: c for k, c in cells.items() if not (no_fault(k[1]) and c.cls in ("good", "thin"))}
        out.append(
            Source(
                run_id=str(entry.get("run_id") or matrix.run_id),
                started_at=str(entry.get("started_at") or matrix.meta.get("started_at") or ""),
                git_commit=str(entry.get("git_commit") or matrix.meta.get("git_commit") or ""),
                same_commit=bool(entry.get("same_commit")),
                target=str(params.get("evidence_target") or ""),
                evidence=str(params.get("evidence") or ""),
                impls=[str(i) for i in entry.get("impls") or []],
                cells=cells,
                applicable=_applicable(params),
                shard=_shard(params),
            )
        )
    return out


def _applicable(params: dict[str, Any]) -> dict[str, list[str]] | None:
    raw = params.get("applicable")
    if not isinstance(raw, dict):
        return None
    return {str(k): [str(s) for s in v] for k, v in raw.items() if isinstance(v, list)}


def _shard(params: dict[str, Any]) -> str:
    shard = params.get("shard")
    if isinstance(shard, dict) and shard.get("index") and shard.get("of"):
        return f"shard {shard['index']}/{shard['of']}"
    return ""


def missing_scenarios(impl: str, cells: dict[str, GridCell], sources: list[Source]) -> tuple[list[str], int]:
    """(the applicable fault scenarios with no decided green cell, how many apply) for ``impl``.

    A pick is a safety claim, so it needs every scenario that applies to the lock, decided and
    green at the target evidence, in one matrix or in matrices of the same commit merged.
    """
    applicable: list[str] | None = None
    for source in sources:
        if impl in source.impls and source.applicable is not None and impl in source.applicable:
            applicable = source.applicable[impl]
            break
    if applicable is None:
        return ["(which scenarios apply was not recorded: run bench matrix again)"], 0
    return [s for s in applicable if s not in cells or cells[s].cls != "good"], len(applicable)


def _tier(classes: list[str]) -> str:
    if any(c in ("bad", "stuck") for c in classes):
        return "bad"
    if "warn" in classes:
        return "warn"
    if "good" in classes and not any(c in ("thin", "unknown") for c in classes):
        return "safe"
    if any(c in ("good", "thin", "unknown") for c in classes):
        return "thin"
    return "none"


def _run_cells(row: ImplRow, run: RunData) -> dict[str, GridCell]:
    """This run's own fault scenarios of one lock as cells (no-fault scenarios never count as safety)."""
    fault_scenarios = {
        scenario_of(r) for r in records(run) if (text(r, "impl") or "") == row.impl and is_fault_case(r)
    }
    cells = {}
    for o in row.outcomes:
        if (
            o.scenario in fault_scenarios
            or o.scenario.split("+")[0] in FAULT_WORKLOADS
            or o.strikes is not None
        ):
            cells[o.scenario] = GridCell(o.cls, CLASSES.get(o.cls, (o.cls, ""))[0], o.detail, o.tooltip, 0, 0)
    return cells


def safety_of(row: ImplRow, run: RunData, sources: list[Source]) -> Safety:
    """The lock's safety: from the newest matrix that has it, else this run's fault cases, else none."""
    plain_failed = [
        o.scenario
        for o in row.outcomes
        if o.cls in ("bad", "warn", "stuck") and not _is_fault(o, run, row.impl)
    ]
    for index, source in enumerate(sources, start=1):
        if row.impl in source.impls:
            cells = {s: c for (i, s), c in source.cells.items() if i == row.impl}
            # the other slices of the same commit's plan (shards) fill in what this one did not run
            for other in sources:
                if other is not source and other.git_commit and other.git_commit == source.git_commit:
                    for (i, s), c in other.cells.items():
                        if i == row.impl and s not in cells:
                            cells[s] = c
            classes = [c.cls for c in cells.values()] + (["bad"] if plain_failed else [])
            tier = _tier(classes)
            missing, applicable = missing_scenarios(row.impl, cells, sources)
            if tier == "safe" and missing:
                tier = "thin"  # green where tried, but not everything that applies was tried
            return Safety(tier, cells, index, plain_failed=plain_failed, missing=missing, applicable=applicable,
                          shard=source.shard)  # fmt: skip
    cells = _run_cells(row, run)
    classes = [c.cls for c in cells.values()] + (["bad"] if plain_failed else [])
    return Safety(_tier(classes), cells, None, from_run=bool(cells), plain_failed=plain_failed)


def _is_fault(o: Outcome, run: RunData, impl: str) -> bool:
    return any(
        is_fault_case(r)
        for r in records(run)
        if (text(r, "impl") or "") == impl and scenario_of(r) == o.scenario
    ) or o.scenario.endswith("+clock-skew")


def _names(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" +{len(names) - limit}" if len(names) > limit else "")


def _safety_html(s: Safety, impl: str, backend: str) -> str:
    if not s.cells and not s.plain_failed:
        return (
            f'<span class="chip untested nofault" title="this run injected no fault and no bench matrix in '
            f'results/ holds {e(impl)}: not tested; run bench matrix --impl {e(impl)}">no fault tried</span>'
            ' <small class="na">not tested: no matrix</small>'
        )
    by_class: dict[str, list[str]] = {}
    hover: dict[str, list[str]] = {}
    for scenario, cell in s.cells.items():
        by_class.setdefault(cell.cls, []).append(scenario)
        hover.setdefault(cell.cls, []).append(f"{scenario}: {cell.word}, {cell.hover}")
    chips = []
    if s.plain_failed:
        chips.append(
            f'<span class="chip bad" title="failed without any fault: {e(", ".join(s.plain_failed))}">'
            f"failed: {e(_names(s.plain_failed))}</span>"
        )
    # counts first, so a narrow cell still shows how many survived; the failed ones by name after them
    for cls, word in (
        ("good", "survived"),
        ("thin", "thin"),
        ("unknown", "undecided"),
        ("nottested", "not tested"),
    ):
        if by_class.get(cls):
            chips.append(
                f'<span class="chip {cls}" title="{e(" | ".join(hover[cls]))}">{word} {len(by_class[cls])}</span>'
            )
    for cls, word in (("bad", "failed"), ("stuck", "stuck"), ("warn", "data safe only by fencing")):
        if by_class.get(cls):
            chips.append(
                f'<span class="chip {cls}" title="{e(" | ".join(hover[cls]))}">{word}: {e(_names(by_class[cls], 2))}'
                "</span>"
            )
    if s.source is not None:
        ref = f' <sup class="src"><a href="#safety-source-{s.source}">[{s.source}]</a></sup>'
    elif s.from_run:
        ref = ' <sup class="src">this run</sup>'
    else:
        ref = ' <small class="na">not tested: no matrix</small>'
    return "".join(chips) + ref


@dataclass
class Ranked:
    """One row of the first screen: the lock, its safety, its cost, its rank and the reason for it."""

    row: ImplRow
    safety: Safety
    acq_s: float | None
    p99_us: float | None
    bound: bool
    why: str = ""


def _p99(run: RunData, row: ImplRow) -> float | None:
    rows = [
        r for r in records(run) if (text(r, "impl") or "") == row.impl and scenario_of(r) == row.cost.scenario
    ]
    values = sorted(v for v in (num(r, "acquire_p99_us") for r in rows) if v is not None)
    return values[len(values) // 2] if values else None


def rank(run: RunData, sources: list[Source]) -> list[Ranked]:
    """Every lock of ``run``, safety first (TIERS), then acquisitions/s at the hot key, highest first."""
    out = []
    for row in impl_rows(run):
        out.append(
            Ranked(row, safety_of(row, run, sources), row.cost.acq_s, _p99(run, row), bool(row.cost.bound))
        )
    out.sort(
        key=lambda r: (
            TIERS[r.safety.tier],
            *_failures(r.safety),
            -(r.acq_s if r.acq_s is not None else -1.0),
        )
    )
    _reasons(out)
    return out


def _failures(s: Safety) -> tuple[int, int]:
    """(cells failed or stuck, cells failed with the data kept by fencing): fewer is safer within a tier."""
    classes = [c.cls for c in s.cells.values()]
    return len(s.plain_failed) + sum(c in ("bad", "stuck") for c in classes), classes.count("warn")


def _ordinal(n: int) -> str:
    return {1: "fastest", 2: "2nd fastest", 3: "3rd fastest"}.get(n, f"{n}th fastest")


def _reasons(ranked: list[Ranked]) -> None:
    """One short line per row: why it sits where it does."""
    place: dict[str, int] = {}
    for r in ranked:
        cells = r.safety.cells
        fails = [s for s, c in cells.items() if c.cls in ("bad", "stuck")]
        fenced = [s for s, c in cells.items() if c.cls == "warn"]
        tier = r.safety.tier
        place[tier] = place.get(tier, 0) + 1
        speed = (
            f"{_ordinal(place[tier])} of the "
            + {
                "safe": "safe ones",
                "thin": "ones that held",
                "none": "untested",
                "warn": "fenced-safe ones",
                "bad": "unsafe ones",
            }[tier]
        )
        if r.acq_s is None:
            speed = "cost not measured"
        if tier == "safe":
            why = f"survived every scenario that applies ({sum(1 for c in cells.values() if c.cls == 'good')}); {speed}"
        elif tier == "thin":
            thin = [s for s, c in cells.items() if c.cls in ("thin", "unknown", "nottested")]
            why = (
                f"nothing failed, thin evidence in {_names(thin, 2)}; {speed}"
                if thin
                else f"nothing failed; {speed}"
            )
            if r.safety.missing and r.safety.applicable:
                decided = r.safety.applicable - len(r.safety.missing)
                where = f" ({r.safety.shard})" if r.safety.shard else ""
                why = f"not a pick: {decided} of {r.safety.applicable} scenarios decided green{where}; {why}"
        elif tier == "warn":
            why = f"needs fencing for {_names(fenced, 2)}; {speed}"
        elif tier == "bad":
            lost = r.safety.plain_failed + fails
            why = f"unsafe: failed {_names(lost, 2)}" + (
                f"; needs fencing for {_names(fenced, 1)}" if fenced else ""
            )
        else:
            why = f"no fault tried; {speed}"
        r.why = why


def _cost_cell(value: float | None, shown: str, col: str, bound: bool) -> str:
    if value is None:
        return f'<td class="num na" data-col="{col}">n/a</td>'
    mark = '<sup class="mark" title="generator-bound: see the footnote">†</sup>' if bound else ""
    cls = "num bound" if bound else "num"
    return f'<td class="{cls}" data-col="{col}" data-sort="{value:.6g}">{shown}{mark}</td>'


def _source_items(sources: list[Source], commit: str) -> str:
    items = []
    for i, s in enumerate(sources, start=1):
        if s.damaged:
            items.append(
                f'<li id="safety-source-{i}" class="unused" value="{i}">matrix {e(s.run_id)} not used, its '
                f"safety not taken: {e(s.damaged)}</li>"
            )
            continue
        when = s.started_at[:16].replace("T", " ") + " UTC" if s.started_at else "date n/a"
        level = f"evidence {s.evidence}: " if s.evidence else ""
        target = f"{level}green needs {s.target}" if s.target else "target n/a"
        which = (
            f"matrix {s.run_id} of this commit ({s.git_commit[:12] or 'n/a'})"
            if s.same_commit
            else f"older: from matrix {s.run_id} of commit {s.git_commit[:12] or 'n/a'} (this run: "
            f"{commit[:12] or 'n/a'})"
        )
        items.append(
            f'<li id="safety-source-{i}" value="{i}">{e(which)}, {e(when)}, {e(target)}; k strikes and n grants '
            f"per cell in each chip's tooltip; locks: {e(', '.join(s.impls))}</li>"
        )
    return f'<ol class="sources" id="safety-sources">{"".join(items)}</ol>' if items else ""


def first_screen_section(run: RunData, sources: list[Source]) -> str:
    """The pick, the ranked table and its footnotes: the page's first section."""
    ranked = rank(run, sources)
    if not ranked:
        return '<h2 id="decision">Which lock</h2><p>No cases.</p>'
    body = []
    for n, r in enumerate(ranked, start=1):
        p99 = duration_us(r.p99_us) if r.p99_us is not None else "n/a"
        acq = f"{r.acq_s:,.0f}" if r.acq_s is not None else "n/a"
        picked = ' class="picked"' if n == 1 else ""
        body.append(
            f'<tr data-row="{e(r.row.impl)}" data-tier="{e(r.safety.tier)}"{picked}>'
            f'<td class="num" data-col="rank" data-sort="{n}">{n}</td>'
            f'<th data-col="impl" data-sort="{e(r.row.impl)}"><a href="#detail-{e(r.row.impl)}">{e(r.row.impl)}</a></th>'
            f'<td class="safety" data-col="safety" data-sort="{TIERS[r.safety.tier]}">'
            f"{_safety_html(r.safety, r.row.impl, r.row.backend)}</td>"
            + _cost_cell(r.acq_s, acq, "acq_s", r.bound)
            + _cost_cell(r.p99_us, p99, "acq_p99", r.bound)
            + f'<td class="why" data-col="why" title="{e(r.why)}">{e(r.why)}</td></tr>'
        )
    head = "".join(
        f'<th class="sortable {cls}" data-sort-col="{i}" title="{e(tip)}">{label}</th>'
        for i, (cls, label, tip) in enumerate(
            [
                ("rank", "#", "rank: safety first, then acquisitions/s"),
                ("impl", "lock", "click a lock for its details below"),
                ("safety", "safety (faults tried)", "from the newest bench matrix of the lock, else this run's faults"),
                ("cost", "acq/s", "acquisitions/s at the hot key (median over trials)"),
                ("cost", "acq p99", "acquire latency p99 under load, invoke -> ok (the console's acq p99)"),
                ("why", "why this rank", "safety first, then cost"),
            ]
        )
    )  # fmt: skip
    top = ranked[0]
    if top.safety.tier == "none":
        backends = sorted({r.row.backend for r in ranked})
        command = "bench matrix " + " ".join(f"--backend {b}" for b in backends)
        pick = (
            f'<p id="pick"><b>Fastest: {e(top.row.impl)}</b>, not yet a pick: no fault was tried and no matrix '
            f"in results/ holds it (run <code>{e(command)}</code>).</p>"
        )
    elif top.safety.tier == "bad":
        failed = [
            s for s, c in top.safety.cells.items() if c.cls in ("bad", "stuck")
        ] + top.safety.plain_failed
        pick = (
            f'<p id="pick"><b>No pick</b>: every lock failed a fault tried. Fewest failures: <b>{e(top.row.impl)}</b> '
            f"(failed {e(_names(failed, 4))}): only where those faults cannot happen, or with fenced data.</p>"
        )
    elif top.safety.tier != "safe":
        pick = (
            f'<p id="pick"><b>No pick</b>: no lock has every scenario that applies to it decided and survived. '
            f"First: <b>{e(top.row.impl)}</b>: {e(top.why)}.</p>"
        )
    else:
        pick = f'<p id="pick"><b>Pick: {e(top.row.impl)}</b>: {e(top.why)}.</p>'
    bound = [r for r in ranked if r.bound]
    footnote = ""
    if bound:
        reason = next((r.row.cost.reason for r in bound if r.row.cost.reason), "reason not recorded")
        footnote = (
            f'<p class="footnote" id="bound-footnote">† generator-bound ({len(bound)} of {len(ranked)} locks): the '
            "load generator, not the lock, was the limit, so acq/s is a lower bound and p99 an upper bound. "
            f"Why, for {e(bound[0].row.impl)}: {e(reason)}; each lock's reason is in the fidelity section.</p>"
        )
    commit = str(run.meta.get("git_commit") or "")
    caption = (
        '<p class="caption">Ranked by safety (survived every fault tried on the target evidence, then held on thin '
        "evidence, then no fault tried, then failed with the data kept by fencing, then failed or stuck), then "
        "acquisitions/s. Safety comes from a <code>bench matrix</code> folder (sources below), or this run's own "
        "fault cases; a fault-free case never counts as safe. acq p99 is the acquire latency under this run's load "
        "(the console's <i>acq p99</i>); the solo acquire p50 below is one client alone. Click a header to sort, a "
        "lock for its details.</p>"
    )
    return (
        f'<h2 id="decision">Which lock</h2>{pick}'
        f'<table id="decision-table" class="sortable-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>{footnote}{_source_items(sources, commit)}{caption}"
    )
