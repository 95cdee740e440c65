"""``bench merge``: the shards of one matrix (``bench matrix --shard I/N``) joined into one folder.

The merged folder is what one unsharded run would have written: every case's row, histogram,
history, witnesses (``violations/``, where the shards kept them) and log, one run.json (``kind: matrix``, ``merged_from`` naming the shards), one
``matrix.md``, one report, and the positive controls, undecided cells and contradictions
judged again over all rows (a control may have run in another shard than the cases it vouches
for). It refuses, with one line and exit 2, anything that would not make one matrix: shards of
different commits, evidence levels or options; a shard missing, given twice, or unfinished; a
shard whose folder is damaged (read through :func:`resultsio.read_results`, as the gate and the
report read folders); cases outside the plan, or the plan not covered.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.errors import UserError
from bench.matrix import controls
from bench.matrix.tables import markdown_table, print_summary, undecided
from bench.results.folder import RunFolder, atomic_write_text
from resultsio import read_results
from resultsio.schema import MATRIX_COLUMNS

#: run.json params that may differ between shards of one matrix (how each machine ran its slice, and
#: what its own rows said of the controls: judged again over all rows).
PER_SHARD = (
    "shard",
    "parallel",
    "lanes",
    "lanes_why",
    "generator_nice",
    "warm_locust",
    "not_run",
    "controls",
)


def _shard_of(meta: dict[str, Any], path: Path) -> dict[str, Any]:
    shard = (meta.get("params") or {}).get("shard")
    if meta.get("kind") != "matrix" or not isinstance(shard, dict):
        raise UserError(
            f"{path} is not a shard of a matrix (made by bench matrix --shard I/N); nothing to merge"
        )
    return shard


def _same(values: dict[Path, Any], what: str, fix: str) -> None:
    def key(value: Any) -> str:
        return json.dumps(value, sort_keys=True, default=str)

    first = next(iter(values))
    other = next((p for p, v in values.items() if key(v) != key(values[first])), None)
    if other is None:
        return
    a, b = values[first], values[other]
    differ = ""
    if isinstance(a, dict) and isinstance(b, dict):
        names = sorted(k for k in set(a) | set(b) if key(a.get(k)) != key(b.get(k)))
        differ = f" ({', '.join(names[:3])} differ)" if names else ""
    raise UserError(f"shards of different {what}{differ}: {first.name} and {other.name}; {fix}")


def check_shards(paths: list[Path]) -> list[tuple[Path, dict[str, Any], Any]]:
    """Read and check every shard folder; the (path, run.json, Results) of each, in shard order."""
    if len(set(p.resolve() for p in paths)) != len(paths):
        raise UserError("the same folder was given twice; give each shard's folder once")
    read = []
    for path in paths:
        results = read_results(path)
        if results.problems:
            raise UserError(f"{path} is damaged, not merged: {results.problems[0]}")
        lacking = [
            c for c in MATRIX_COLUMNS if c not in results.cases.columns or results.cases[c].isna().any()
        ]
        if lacking and len(results.cases):
            raise UserError(
                f"{path} is damaged, not merged: {path}/cases.csv: {lacking[0]} is missing or empty "
                "(a matrix's row names its cell); re-run the shard with bench matrix"
            )
        meta = results.meta
        status = meta.get("status")
        if status not in ("complete", "complete-with-failures"):
            raise UserError(
                f"{path} is {status or 'unfinished'}, not complete; run its shard again before merging"
            )
        read.append((path, meta, results))
    shards = {p: _shard_of(m, p) for p, m, _ in read}
    _same({p: m.get("git_commit") for p, m, _ in read}, "commits", "run every shard on the same commit")
    _same(
        {p: (m.get("params") or {}).get("evidence") for p, m, _ in read},
        "evidence levels",
        "run every shard with the same --evidence",
    )
    _same(
        {p: {k: v for k, v in (m.get("params") or {}).items() if k not in PER_SHARD} for p, m, _ in read},
        "parameters",
        "run every shard with the same options (only --shard may differ)",
    )
    _same(
        {p: (s.get("of"), s.get("plan")) for p, s in shards.items()}, "plans", "give the shards of one matrix"
    )
    of = int(next(iter(shards.values())).get("of") or 0)
    indices = [int(s.get("index") or 0) for s in shards.values()]
    twice = sorted({i for i in indices if indices.count(i) > 1})
    if twice:
        raise UserError(f"shard {twice[0]}/{of} was given twice; give each shard once")
    missing = [i for i in range(1, of + 1) if i not in indices]
    if missing:
        raise UserError(
            f"shard {missing[0]}/{of} is missing ({len(missing)} of {of} missing); give every shard"
        )
    return sorted(read, key=lambda item: int(shards[item[0]]["index"]))


def merge_command(paths: list[Path], results_dir: Path, console: Console, render: bool = True) -> int:
    """Join shard folders into one matrix folder; returns the matrix's exit code (0, or 1 when undecided)."""
    if not paths:
        raise UserError("give the shard folders to merge, e.g. bench merge results/shard-1 results/shard-2")
    shards = check_shards(paths)
    first_meta = shards[0][1]
    plan = list(first_meta["params"]["shard"]["plan"])
    rows: list[dict[str, Any]] = []
    owner: dict[str, Path] = {}
    for path, _meta, results in shards:
        for row in results.cases.to_dict("records"):
            case = str(row.get("case"))
            if case in owner:
                raise UserError(
                    f"case {case} is in two shards ({owner[case].name}, {path.name}); give each shard once"
                )
            owner[case] = path
            rows.append(row)
    strangers = [c for c in owner if c not in plan]
    if strangers:
        raise UserError(f"case {strangers[0]} of {owner[strangers[0]].name} is not in the matrix's plan")
    absent = [c for c in plan if c not in owner]
    failures = [f for _, m, _ in shards for f in m.get("failures") or []]
    if absent and not failures:
        raise UserError(
            f"case {absent[0]} of the plan is in no shard ({len(absent)} missing); give every shard"
        )
    params = {k: v for k, v in first_meta["params"].items() if k != "shard"}
    not_run: list[dict[str, str]] = []
    for _, meta, _ in shards:
        for item in (meta.get("params") or {}).get("not_run") or []:
            if item not in not_run:
                not_run.append(item)
    params.update({"not_run": not_run, "shards": len(shards)})
    order = {c: i for i, c in enumerate(plan)}
    rows.sort(key=lambda r: order.get(str(r.get("case")), len(order)))
    folder = RunFolder(
        results_dir,
        {
            "kind": "matrix",
            "started_at": min(str(m.get("started_at") or "") for _, m, _ in shards),
            "command": "bench merge " + " ".join(p.name for p, _, _ in shards),
            "git_commit": first_meta.get("git_commit"),
            "host": first_meta.get("host"),
            "versions": first_meta.get("versions") or {},
            "params": params,
            "impls": list(dict.fromkeys(i for _, m, _ in shards for i in m.get("impls") or [])),
            "endpoints": {k: v for _, m, _ in shards for k, v in (m.get("endpoints") or {}).items()},
            "merged_from": [
                {
                    "run_id": p.name,
                    "shard": m["params"]["shard"]["index"],
                    "hosts": (m.get("host") or {}).get("hostname"),
                    "wall_s": (m.get("matrix") or {}).get("wall_s"),
                    "load_average": (m.get("matrix") or {}).get("load_average"),
                    "busy_cores": (m.get("matrix") or {}).get("busy_cores"),
                    "steal_cores": (m.get("matrix") or {}).get("steal_cores"),
                    "occupancy": (m.get("matrix") or {}).get("occupancy"),
                }
                for p, m, _ in shards
            ],  # fmt: skip
        },
    )
    for sub in ("hist", "history", "logs", "violations"):
        if sub == "violations" and not any((path / sub).is_dir() for path, _, _ in shards):
            continue  # shards written before the checkers kept witnesses: no folder to merge
        (folder.path / sub).mkdir(exist_ok=True)
        for path, _, _ in shards:
            for src in sorted((path / sub).glob("*")) if (path / sub).is_dir() else []:
                if src.is_dir():  # logs/servers/: the server logs a shard kept
                    shutil.copytree(src, folder.path / sub / src.name, dirs_exist_ok=True)
                else:
                    shutil.copyfile(src, folder.path / sub / src.name)
    folder.rows = rows
    folder.meta["cases"] = [str(r.get("case")) for r in rows]
    folder.meta["params"]["controls"] = controls.annotate(folder.rows)
    folder.rewrite_rows()
    walls = [(m.get("matrix") or {}).get("wall_s") or 0 for _, m, _ in shards]
    folder.note(
        "matrix", {"wall_s": max(walls), "shard_wall_s": walls, "merged_at": datetime.now(UTC).isoformat()}
    )
    if failures:
        folder.note("failures", failures)
    for key in ("incidents", "clock_steps"):  # each shard's machine's, kept whole
        if kept := [x for _, m, _ in shards for x in m.get(key) or []]:
            folder.note(key, kept)
    contradictions = print_summary(folder.rows, console, not_run)
    folder.note("contradictions", contradictions)
    open_cells = undecided(folder.rows, not_run)
    folder.note("undecided", open_cells)
    atomic_write_text(folder.path / "matrix.md", markdown_table(folder.rows, not_run))
    folder.finish("complete-with-failures" if failures else "complete")
    for line in open_cells[:40]:
        console.print(f"  undecided: {line}", markup=False)
    report = folder.path
    if render and folder.rows:
        from dashboards import render_report

        report = render_report([folder.path])
    print(report)
    return 1 if failures or open_cells or contradictions else 0
