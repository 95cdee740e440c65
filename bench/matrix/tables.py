"""What ``bench matrix`` shows of its results: the terminal summary, ``matrix.md`` and the timing.

Kept apart from the runner (bench/matrix/command.py) so that the tables can be drawn again from a
folder's rows alone, as the README's table is.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from bench.nemesis.scenarios import SCENARIOS


def timing_summary(timings: dict[str, dict[str, Any]], wall_s: float, parallel: int) -> dict[str, Any]:
    """Where the matrix's time went: wall time, per lane and per backend, and Locust's start-up share."""
    per_backend: dict[str, float] = {}
    for name, t in timings.items():
        backend = name.split("#")[0]
        per_backend[backend] = round(per_backend.get(backend, 0.0) + float(t.get("wall_s") or 0.0), 1)
    startup = sum(t["locust_startup_s"] for t in timings.values())
    load = sum(t["load_s"] for t in timings.values())
    case_time = sum(t["case_s"] for t in timings.values())
    return {
        "wall_s": round(wall_s, 1),
        "parallel": parallel,
        "lanes": {
            name: {k: round(v, 2) if isinstance(v, float) else v for k, v in t.items()}
            for name, t in timings.items()
        },  # fmt: skip
        "lane_seconds_per_backend": per_backend,
        "locust_startup_s": round(startup, 1),
        "load_s": round(load, 1),
        "case_s": round(case_time, 1),
        "locust_startup_share": startup / case_time if case_time else 0.0,
    }


def occupancy_words(timing: dict[str, Any]) -> str:
    """`` (a unit alone 300 s, a heavy unit 200 s, light units only 100 s, nothing 5 s)``: what ran, over
    the wall; "" for a folder from before the matrix counted it."""
    spent = timing.get("occupancy")
    if not spent:
        return ""
    names = {
        "alone_s": "a unit alone",
        "heavy_s": "a heavy unit",
        "light_s": "light units only",
        "nothing_s": "nothing",
    }
    return " (" + ", ".join(f"{names[k]} {float(spent.get(k) or 0):.0f} s" for k in names) + ")"


def _axes(rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Scenarios in table order and impls in catalog order (others as first seen)."""
    from lockimpls.registry import known_ids

    seen_s = {str(r["matrix_scenario"]) for r in rows}
    scenarios = [s for s in SCENARIOS if s in seen_s] + sorted(seen_s - set(SCENARIOS))
    seen_i = list(dict.fromkeys(str(r["impl"]) for r in rows))
    order = {i: n for n, i in enumerate(known_ids(include_test=True))}
    return scenarios, sorted(seen_i, key=lambda i: (order.get(i, len(order)), seen_i.index(i)))


_MD_WORD = {
    "good": "survived", "thin": "thin", "bad": "**FAILED**", "warn": "**failed**, data safe",
    "stuck": "**stuck**", "unknown": "?", "nottested": "not tested", "baseline": "no fault",
}  # fmt: skip


def markdown_table(rows: list[dict[str, Any]], not_run: list[dict[str, str]] | None = None) -> str:
    """The grid as a Markdown table: impl x scenario, the cell's word and its evidence (k strikes, n grants).

    survived = no violation on the target evidence; thin = no violation on less; **FAILED** = two
    holders at once or damaged data; **failed**, data safe = fencing kept the data right; **stuck**
    = nobody got the lock within its bound after a crash (liveness); ? = unknown; (!) = contradicts
    the catalog; n/a = the scenario does not apply.
    """
    scenarios, impls, cells = grid(rows, not_run)
    lines = ["| impl | " + " | ".join(scenarios) + " |", "|---" * (len(scenarios) + 1) + "|"]
    for impl in impls:
        row = []
        for s in scenarios:
            c = cells.get((impl, s))
            if c is None:
                row.append("n/a")
                continue
            text = c.word if c.cls == "nottested" else _MD_WORD.get(c.cls, c.cls)
            detail = f" ({c.detail})" if c.detail and c.cls != "nottested" else ""
            row.append(text + detail + (" (!)" if c.contradicts else ""))
        lines.append(f"| {impl} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


#: grid class -> the one-letter code of the terminal summary
CODES = {
    "good": "S", "thin": "t", "bad": "F", "warn": "f", "stuck": "X", "unknown": "?", "nottested": "-", "baseline": "b",
}  # fmt: skip
LEGEND = (
    "S survived (target evidence reached), t held on thin evidence, F failed, f failed but fencing kept "
    "the data safe, X stuck (liveness), ? unknown, - not tested (did not strike / needs root), . n/a; "
    "! contradicts the catalog"
)


def grid(
    rows: list[dict[str, Any]], not_run: list[dict[str, str]] | None = None
) -> tuple[list[str], list[str], dict[tuple[str, str], Any]]:
    """(scenarios, impls, {(impl, scenario): dashboards.grid.GridCell}): the report's cells, from rows."""
    from dashboards.grid import GridCell, cell_for

    scenarios, impls = _axes(rows)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("role") == "control":
            continue  # a control nobody selected: its result heads its column, it is no row of the grid
        groups.setdefault((str(r["impl"]), str(r["matrix_scenario"])), []).append(r)
    impls = [i for i in impls if any(key[0] == i for key in groups)]
    cells: dict[tuple[str, str], Any] = {key: cell_for(members) for key, members in groups.items()}
    for item in not_run or []:
        if item.get("word") == "n/a":
            continue  # the scenario does not apply to the lock (no lease): no cell at all
        key = (str(item["impl"]), str(item["scenario"]))
        cells.setdefault(key, GridCell("nottested", str(item.get("word", "not tested")), "", "", 0, 0))
        if key[1] not in scenarios:
            scenarios.append(key[1])
        if key[0] not in impls:
            impls.append(key[0])
    return scenarios, impls, cells


def print_summary(
    rows: list[dict[str, Any]], console: Console, not_run: list[dict[str, str]] | None = None
) -> list[dict[str, Any]]:
    """Print every cell of the grid uncut (one code a cell, numbered columns, a legend), the
    counts per colour and the thinnest evidence behind a green, then every contradiction of
    the catalog; return the contradictions."""
    if not rows:
        return []
    scenarios, impls, cells = grid(rows, not_run)
    width = max(len(i) for i in impls)
    console.print(f"safety matrix: {LEGEND}", markup=False, soft_wrap=False)
    for n, s in enumerate(scenarios, 1):
        console.print(f"  {n:>2} {s}", markup=False)
    console.print(" " * (width + 1) + " ".join(f"{n:>2}" for n in range(1, len(scenarios) + 1)), markup=False)
    for impl in impls:
        codes = []
        for s in scenarios:
            c = cells.get((impl, s))
            code = "." if c is None else CODES.get(c.cls, "?") + ("!" if c.contradicts else "")
            codes.append(f"{code:>2}")
        console.print(f"{impl:<{width}} " + " ".join(codes), markup=False)
    counts: dict[str, int] = {}
    for c in cells.values():
        counts[c.cls] = counts.get(c.cls, 0) + 1
    console.print("cells: " + ", ".join(f"{CODES[k]} {counts.get(k, 0)}" for k in CODES), markup=False)
    green = [c for c in cells.values() if c.cls == "good" and c.k]
    if green:
        console.print(
            f"thinnest green: k={min(c.k for c in green)} strikes, n={min(c.n for c in green):,} grants after them",
            markup=False,
        )
    contradictions = [
        {
            "impl": r["impl"], "scenario": r["scenario"], "expected": r["expected_outcome"],
            "observed": r["observed_outcome"], "note": r["expected_note"], "case": r["case"],
        }
        for r in rows
        if r.get("contradicts_catalog")
    ]  # fmt: skip
    if contradictions:
        console.print(f"lockbench: {len(contradictions)} results contradict the catalog:", markup=False)
        for c in contradictions:
            console.print(
                f"  {c['impl']} x {c['scenario']}: expected {c['expected']}, saw {c['observed']} "
                f"(catalog: {c['note']}; logs/{c['case']}.log)",
                markup=False,
            )
    else:
        console.print("lockbench: every result agrees with the catalog (unknown verdicts excepted)")
    return contradictions


#: Cell classes that answer the question: survived on its target, failed, or stuck.
DECIDED = ("good", "bad", "warn", "stuck", "baseline")


def undecided(rows: list[dict[str, Any]], not_run: list[dict[str, str]] | None = None) -> list[str]:
    """One line per planned cell that is not decided (thin, unknown, not struck, did not bite, not run).

    ``bench matrix`` exits 0 only when this is empty and nothing contradicts the catalog.
    """
    scenarios, impls, cells = grid(rows, not_run)
    # an unknown cell says why: the first reason its cases give (a dead server, naming its kept log)
    unknown_why: dict[tuple[str, str], str] = {}
    for r in rows:
        if (
            r.get("role") != "control"
            and r.get("verdict") == "unknown"
            and isinstance(r.get("verdict_reason"), str)
        ):
            unknown_why.setdefault((str(r["impl"]), str(r["matrix_scenario"])), r["verdict_reason"])
    lines = []
    for impl in impls:
        for scenario in scenarios:
            cell = cells.get((impl, scenario))
            if cell is None or cell.cls in DECIDED:
                continue
            why = cell.detail if cell.detail and cell.detail != cell.word else ""
            reason = next(
                (p for p in cell.hover.split("; ") if p.startswith(("positive control", "why"))), ""
            ) or unknown_why.get((impl, scenario), "")
            extra = "; ".join(t for t in (why, reason) if t)
            lines.append(f"{impl} x {scenario}: {cell.word}" + (f" ({extra})" if extra else ""))
    return lines
