"""Every run folder under some roots, checked by the one results reader, then read in place with DuckDB.

Each folder first goes through ``resultsio.read_results`` (the reader of the gate and the
report: run.json and the case tables against one schema, histograms, parquet against csv).
A folder with any problem (run.json not JSON, another schema, a damaged parquet file, a NaN
or negative counter, a repeated row ...) is skipped and named, never fatal: one bad folder
must not hide a year of history, and a damaged run is never drawn or called safe. One
DuckDB query then reads every readable ``cases.parquet`` at once (``read_parquet([...],
filename=true, union_by_name=true)``: runs of different versions have different columns).
Only when no folder at all is readable is it an error (exit 2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from bench.errors import UserError
from bench.history.checked import CheckedFolders
from bench.history.records import RunInfo, Skipped
from resultsio import read_results

#: Folders under a results root that hold no runs: baselines are copies of runs (they would
#: count a run twice), comparisons and history are pages made from runs.
EXCLUDED = ("baselines", "comparisons", "history")


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


_RUN_ID_TIME = re.compile(r"^(\d{8}T\d{6}Z)")


def folder_time(path: Path, started_at: Any = None) -> float:
    """When a run started: the time its run id begins with, else run.json ``started_at``, else the folder's mtime.

    The run id (``YYYYmmddTHHMMSSZ-...``) first: a damaged run.json may have no usable time,
    and readable and damaged runs must be placed by the same clock to tell which is newest.
    """
    for text, fmt in ((path.name, "%Y%m%dT%H%M%SZ"), (started_at, None)):
        if not isinstance(text, str) or not text:
            continue
        try:
            if fmt is None:
                stamp = datetime.fromisoformat(text)
            else:
                match = _RUN_ID_TIME.match(text)
                if not match:
                    continue
                stamp = datetime.strptime(match[1], fmt)
        except ValueError:
            continue
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def read_meta(path: Path) -> RunInfo | Skipped:
    """A run's metadata, or why the folder is skipped: damaged (resultsio found a problem), another schema, no case.

    Every folder goes through the one results reader (resultsio.read_results), the one the
    gate and the report use: a run with a NaN or negative counter, a repeated row, a row
    run.json does not list, a histogram that does not decode or deep JSON is skipped with
    the problem named, never drawn, and never called safe.
    """
    results = read_results(path)
    meta = results.meta
    when = folder_time(path, meta.get("started_at"))
    fatal = results.fatal
    if fatal:
        return Skipped(path, str(fatal[0]), damaged=fatal[0].kind != "version", when=when)
    if results.problems:
        more = (
            f" (+{len(results.problems) - 1} more; bench report {path} lists them)"
            if len(results.problems) > 1
            else ""
        )
        return Skipped(path, f"damaged: {results.problems[0]}{more}", damaged=True, when=when)
    if not (path / "cases.parquet").is_file():
        if len(results.cases):
            return Skipped(
                path,
                f"damaged: no cases.parquet though cases.csv has {len(results.cases)} row(s); "
                "re-create the run with bench run",
                damaged=True,
                when=when,
            )
        return Skipped(path, "no cases.parquet (the run finished no case)", when=when)
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


def read_runs(roots: list[Path], cache: Path | None = None) -> Loaded:
    """Read every run folder under ``roots``; UserError (exit 2) when there is none or none is readable.

    With ``cache`` (a file), the reader's verdict on a folder whose files are unchanged is
    taken from it (bench/history/checked.py): the same verdict, without the check's cost.
    """
    folders = find_run_folders(roots)
    names = ", ".join(str(r) for r in roots)
    if not folders:
        raise UserError(
            f"no run folders under {names}: a run folder holds run.json and cases.parquet "
            "(`bench run` makes them; baselines/ and comparisons/ are not read)"
        )
    runs: dict[str, RunInfo] = {}
    skipped: list[Skipped] = []
    checked = CheckedFolders(cache)
    for path in folders:
        info = checked.read(path, read_meta)
        if isinstance(info, Skipped):
            skipped.append(info)
        else:
            runs[info.key] = info
    checked.save()
    cases = pd.DataFrame()
    if runs:
        files = {str(info.path / "cases.parquet"): key for key, info in runs.items()}
        cases, bad = _read_parquet(list(files))
        for name, why in bad:
            info = runs.pop(files[name])
            skipped.append(
                Skipped(info.path, why, damaged=True, when=folder_time(info.path, info.started_at))
            )
        if not cases.empty:
            cases["_folder"] = cases.pop("filename").map(lambda f: files.get(str(f), str(Path(f).parent)))
            cases = cases[cases["_folder"].isin(runs)].reset_index(drop=True)
    if not runs:
        why = "; ".join(f"{s.path}: {s.why}" for s in skipped[:3])
        raise UserError(f"no readable run folder under {names} ({len(skipped)} skipped: {why})")
    return Loaded(runs=runs, cases=cases, skipped=skipped)


def newest_damaged(loaded: Loaded) -> Skipped | None:
    """The damaged folder that is the newest run of all (no readable run started later), or None.

    Why: a damaged newest run is skipped, and the series then end at the run before it; a
    check that said "the newest run is safe" would be speaking of another run.
    """
    damaged = [s for s in loaded.skipped if s.damaged]
    if not damaged:
        return None
    latest = max(damaged, key=lambda s: s.when)
    readable = [folder_time(r.path, r.started_at) for r in loaded.runs.values()]
    return latest if not readable or latest.when >= max(readable) else None
