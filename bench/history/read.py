"""Every run folder under some roots, read in place: run.json with ``json``, cases.parquet with DuckDB.

One DuckDB query reads every ``cases.parquet`` at once (``read_parquet([...], filename=true,
union_by_name=true)``: runs of different versions have different columns). A folder that
cannot be read (run.json not JSON, another schema, a damaged parquet file) is skipped and
named, never fatal: one bad folder must not hide a year of history. Only when no folder at
all is readable is it an error (exit 2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bench.errors import UserError
from bench.results.folder import SCHEMA_VERSION

#: Folders under a results root that hold no runs: baselines are copies of runs (they would
#: count a run twice), comparisons and history are pages made from runs.
EXCLUDED = ("baselines", "comparisons", "history")


@dataclass(frozen=True)
class RunInfo:
    """What a run's run.json says about where it sits in history: commit, time, machine, parameters.

    Why a record of its own: run.json is read once per folder, and ordering, grouping and the
    page's links all need these few fields, not the whole metadata.
    """

    key: str  # the folder's path as read (also the ``_folder`` column of the case table)
    path: Path
    run_id: str
    started_at: str
    git_commit: str
    machine_class: str
    status: str
    params: dict[str, Any]
    report: Path | None  # report.html when it exists


@dataclass(frozen=True)
class Skipped:
    """A folder left out, and why.

    Why a value and not an exception: one bad folder must not stop the others; it is printed on
    stderr and listed on the page.
    """

    path: Path
    why: str


@dataclass
class Loaded:
    """The readable runs and all their case rows (one frame), plus what was skipped.

    Why one frame: DuckDB reads every cases.parquet in one scan, and grouping and the
    medians over trials are then plain pandas on one table.
    """

    runs: dict[str, RunInfo]
    cases: pd.DataFrame
    skipped: list[Skipped] = field(default_factory=list)


def is_run_folder(path: Path) -> bool:
    return (path / "run.json").is_file() or (path / "cases.parquet").is_file()


def find_run_folders(roots: list[Path]) -> list[Path]:
    """Run folders: each root itself when it is one, else its subfolders that are (baselines etc. left out)."""
    found: dict[Path, Path] = {}
    for root in roots:
        if not root.exists():
            raise UserError(f"{root}: no such directory; give a results directory (default: results)")
        if not root.is_dir():
            raise UserError(f"{root}: not a directory; give a results directory or a run folder")
        if is_run_folder(root):
            candidates = [root]
        else:
            candidates = sorted(
                p
                for p in root.iterdir()
                if p.is_dir() and p.name not in EXCLUDED and not p.name.startswith(".") and is_run_folder(p)
            )
        for path in candidates:
            found.setdefault(path.resolve(), path)
    return list(found.values())


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def read_meta(path: Path) -> RunInfo | Skipped:
    """A run's metadata, or why the folder is skipped (unreadable, not an object, another schema)."""
    try:
        meta = json.loads((path / "run.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Skipped(path, "no run.json")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return Skipped(path, f"run.json is not readable JSON ({type(exc).__name__})")
    if not isinstance(meta, dict):
        return Skipped(path, "run.json is not a JSON object")
    schema = meta.get("schema")
    if schema != SCHEMA_VERSION:
        return Skipped(
            path,
            f"run.json schema {schema!r}, this lockbench reads schema {SCHEMA_VERSION} "
            "(read it with the lockbench version that wrote it)",
        )
    if not (path / "cases.parquet").is_file():
        return Skipped(path, "no cases.parquet (the run finished no case)")
    host = meta.get("host") if isinstance(meta.get("host"), dict) else {}
    params = meta.get("params") if isinstance(meta.get("params"), dict) else {}
    report = path / "report.html"
    return RunInfo(
        key=str(path),
        path=path,
        run_id=_text(meta.get("run_id")) or path.name,
        started_at=_text(meta.get("started_at")),
        git_commit=_text(meta.get("git_commit")),
        machine_class=_text(host.get("machine_class")) or "unknown machine class",
        status=_text(meta.get("status")),
        params=params,
        report=report if report.is_file() else None,
    )


def _read_parquet(files: list[str]) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """All files in one DuckDB scan; if that fails, file by file, returning the ones that failed."""
    import duckdb

    con = duckdb.connect()
    try:
        query = "SELECT * FROM read_parquet($files, filename = true, union_by_name = true)"
        try:
            return con.execute(query, {"files": files}).df(), []
        except duckdb.Error:
            pass  # one bad file fails the scan: find it
        frames: list[pd.DataFrame] = []
        bad: list[tuple[str, str]] = []
        for name in files:
            try:
                frames.append(
                    con.execute("SELECT * FROM read_parquet($f, filename = true)", {"f": name}).df()
                )
            except duckdb.Error as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                bad.append((name, f"cases.parquet is not readable ({first[:120]})"))
        frames = [f for f in frames if not f.empty]
        return (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()), bad
    finally:
        con.close()


def read_runs(roots: list[Path]) -> Loaded:
    """Read every run folder under ``roots``; UserError (exit 2) when there is none or none is readable."""
    folders = find_run_folders(roots)
    names = ", ".join(str(r) for r in roots)
    if not folders:
        raise UserError(
            f"no run folders under {names}: a run folder holds run.json and cases.parquet "
            "(`bench run` makes them; baselines/ and comparisons/ are not read)"
        )
    runs: dict[str, RunInfo] = {}
    skipped: list[Skipped] = []
    for path in folders:
        info = read_meta(path)
        if isinstance(info, Skipped):
            skipped.append(info)
        else:
            runs[info.key] = info
    cases = pd.DataFrame()
    if runs:
        files = {str(info.path / "cases.parquet"): key for key, info in runs.items()}
        cases, bad = _read_parquet(list(files))
        for name, why in bad:
            info = runs.pop(files[name])
            skipped.append(Skipped(info.path, why))
        if not cases.empty:
            cases["_folder"] = cases.pop("filename").map(lambda f: files.get(str(f), str(Path(f).parent)))
            cases = cases[cases["_folder"].isin(runs)].reset_index(drop=True)
    if not runs:
        why = "; ".join(f"{s.path}: {s.why}" for s in skipped[:3])
        raise UserError(f"no readable run folder under {names} ({len(skipped)} skipped: {why})")
    return Loaded(runs=runs, cases=cases, skipped=skipped)
