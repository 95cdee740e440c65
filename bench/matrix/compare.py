"""``bench matrix-compare A B``: do two matrices of one commit and one selection give the same answer?

A matrix is meant to be reproducible: the same locks under the same faults on the same code
should come out the same cells. This compares two matrix folders cell by cell (impl x scenario)
with the cells the report draws (``dashboards.grid.grid_cells``, which calls
``dashboards.cells.cell_for``: the class is never derived again here), lists every cell whose
class differs with each side's class and reason, and refuses (exit 2, one line) folders that
are no matrices, or whose commits or selections (impls, scenarios, evidence, strikes, shard)
differ, since then a difference would say nothing about reproducibility.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.errors import UserError


@dataclass(frozen=True)
class Side:
    """One folder's cell: its class, word, detail and the reasons its cases give (why: each side says why)."""

    cls: str
    word: str
    detail: str
    reasons: tuple[str, ...] = ()

    def text(self) -> str:
        if self.cls == "absent":
            return "no cell"
        detail = f"; {self.detail}" if self.detail and self.detail != self.word else ""
        why = f"; {self.reasons[0]}" if self.reasons else ""
        return f"{self.cls} ({self.word}{detail}{why})"


def _commit(meta: dict[str, Any]) -> str:
    """The commit without '+dirty' (as bench/results/matrices.py: uncommitted edits are that commit's)."""
    return str(meta.get("git_commit") or "").removesuffix("+dirty")


def selection(meta: dict[str, Any]) -> dict[str, Any]:
    """What a matrix was asked to run: impls, scenarios, evidence level, strikes, shard slice."""
    params = meta.get("params") or {}
    shard = params.get("shard") or {}
    return {
        "impls": sorted(str(i) for i in params.get("impls") or meta.get("impls") or []),
        "scenarios": sorted(str(s) for s in (params.get("scenarios") or {})),
        "evidence": params.get("evidence"),
        "strikes": params.get("strikes"),
        "shard": f"{shard.get('index')}/{shard.get('of')}" if isinstance(shard, dict) and shard else "whole",
    }


def _load(path: Path) -> Any:
    from dashboards.load import ReportInputError, load_run

    if not path.is_dir():
        raise UserError(f"{path} is not a results folder; give two bench matrix folders")
    try:
        run = load_run(path)
    except ReportInputError as exc:
        raise UserError(f"{path}: {exc}") from None
    if run.meta.get("kind") != "matrix":
        raise UserError(
            f"{path} is not a matrix (run.json kind is not 'matrix'); give two bench matrix folders"
        )
    if run.meta.get("status") == "running":
        # its controls are judged at the end: compared now, every cell whose control has not run
        # yet reads "unproven" (23 of 98 cells of a redis+postgres matrix three cases from its end)
        raise UserError(f"{path} is a matrix still running; compare it once it has finished")
    return run


def cells_of(run: Any) -> dict[tuple[str, str], Side]:
    """{(impl, scenario): Side} of one matrix folder, from the report's own cells."""
    from dashboards.grid import grid_cells
    from dashboards.load import scenario_of, split_scenario, text

    _, _, cells = grid_cells(run)
    reasons: dict[tuple[str, str], set[str]] = {}
    if not run.cases.empty:
        for row in run.cases.to_dict("records"):
            if row.get("role") == "control":
                continue
            key = (str(row.get("impl") or row.get("case")), split_scenario(scenario_of(row))[0])
            why = text(row, "verdict_reason")
            if why:
                reasons.setdefault(key, set()).add(why)
    return {
        key: Side(cell.cls, cell.word, cell.detail, tuple(sorted(reasons.get(key, set()))))
        for key, cell in cells.items()
    }


def compare_matrices(a: Path, b: Path) -> tuple[list[tuple[str, str, Side, Side]], int]:
    """(cells whose class differs: (impl, scenario, A's, B's), cells compared); UserError when incomparable."""
    if a.resolve() == b.resolve():
        raise UserError(f"{a} was given twice; give two different matrix folders")
    run_a, run_b = _load(a), _load(b)
    commit_a, commit_b = _commit(run_a.meta), _commit(run_b.meta)
    if commit_a != commit_b:
        raise UserError(
            f"the matrices differ in commit ({a.name}: {commit_a or 'unknown'}, {b.name}: {commit_b or 'unknown'}); "
            "compare two matrices of one commit"
        )
    sel_a, sel_b = selection(run_a.meta), selection(run_b.meta)
    differ = [k for k in sel_a if sel_a[k] != sel_b[k]]
    if differ:
        k = differ[0]
        show = {
            key: ", ".join(v) if isinstance(v, list) else str(v)
            for key, v in ((a.name, sel_a[k]), (b.name, sel_b[k]))
        }
        raise UserError(
            f"the matrices differ in selection: {', '.join(differ)} ({k}: {a.name}: {show[a.name]}; "
            f"{b.name}: {show[b.name]}); compare two runs of the same bench matrix command"
        )
    cells_a, cells_b = cells_of(run_a), cells_of(run_b)
    absent = Side("absent", "", "")
    out = []
    for key in sorted(set(cells_a) | set(cells_b)):
        side_a, side_b = cells_a.get(key, absent), cells_b.get(key, absent)
        if side_a.cls != side_b.cls:
            out.append((key[0], key[1], side_a, side_b))
    return out, len(set(cells_a) | set(cells_b))


def promised(impl: str, scenario: str) -> str:
    """`` (the catalog promises nothing here: why)`` where the catalog says the cell is not checkable.

    Such a cell may differ between two runs for the reason the catalog gives (a race in the
    server, a fault whose bite is not certain); every other difference is unexplained.
    """
    from bench.matrix.expectations import expected

    exp = expected(impl, scenario)
    return f" (the catalog promises nothing here: {exp.note})" if not exp.outcome and exp.note else ""


def compare_command(a: Path, b: Path, console: Console) -> int:
    """Print the cells whose class differs; 0 when none does, 1 when any does (UserError: exit 2)."""
    differ, total = compare_matrices(Path(a), Path(b))
    for impl, scenario, side_a, side_b in differ:
        console.print(
            f"  {impl} x {scenario}: {Path(a).name}: {side_a.text()} | {Path(b).name}: {side_b.text()}"
            f"{promised(impl, scenario)}",
            markup=False,
            soft_wrap=True,
        )
    if differ:
        console.print(f"lockbench: {len(differ)} of {total} cells differ between {a} and {b}", markup=False)
        return 1
    console.print(f"lockbench: all {total} cells the same in {a} and {b}", markup=False)
    return 0
