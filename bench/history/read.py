"""Every run folder under some roots: its tables checked and read in one DuckDB scan, the newest runs checked whole.

Each folder's run.json and cases.parquet are checked with the one results reader's own
checks (resultsio: run.json against its model, the case table against the schema and
against run.json's list of cases, the files each row rests on present): all case tables
come from one DuckDB query (``read_parquet([...], filename=true, union_by_name=true)``:
runs of different versions have different columns) and are validated as one frame. The
newest run of each impl, the one ``--check`` calls safe, goes through the whole reader
(``resultsio.read_results``: histograms decoded, history files opened, cases.csv against
the parquet); no figure of the page reads a histogram, so an older run's are not decoded.
A folder with any problem is skipped and named, never fatal: one bad folder must not hide
a year of history, and a damaged run is never drawn or called safe. Only when no folder at
all is readable is it an error (exit 2).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from bench.errors import UserError
from bench.history.checked import WHOLE, CheckedFolders, Pending
from bench.history.records import RunInfo, Skipped
from resultsio import Problem, read_results
from resultsio.read import FINISHED, _check_files, _check_plan, _schema_problems
from resultsio.read import _read_meta as read_meta_json
from resultsio.schema import required_files, schema_failures

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


def _run_info(path: Path, meta: dict[str, Any]) -> RunInfo:
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


def _damaged(path: Path, problems: list[Problem], when: float) -> Skipped:
    more = f" (+{len(problems) - 1} more; bench report {path} lists them)" if len(problems) > 1 else ""
    return Skipped(path, f"damaged: {problems[0]}{more}", damaged=True, when=when)


def _no_parquet(path: Path, when: float) -> Skipped:
    rows = 0
    csv = path / "cases.csv"
    if csv.is_file():
        with contextlib.suppress(OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError):
            rows = len(pd.read_csv(csv, usecols=[0]))
    if rows:
        return Skipped(
            path,
            f"damaged: no cases.parquet though cases.csv has {rows} row(s); re-create the run with bench run",
            damaged=True,
            when=when,
        )
    return Skipped(path, "no cases.parquet (the run finished no case)", when=when)


def _failing_folders(cases: pd.DataFrame) -> set[int] | None:
    """Folders (``_n``) with a row the schema refuses, validating all folders' rows at once; None: all in doubt.

    Why at once: the schema's cost is mostly per call (about 0.1 s a folder), so 1,000 folders
    validated one by one took 100 s. The case id (and its impl) carry the folder's number meanwhile,
    so the one-row-per-case and trial checks stay per folder.
    """
    frame = cases.drop(columns=["_n", "_folder"])
    # a case id must start with its impl (resultsio's schema): both carry the prefix
    prefix = "f" + cases["_n"].astype(str) + "."
    frame["case"] = prefix + cases["case"].astype("string")
    frame["impl"] = prefix + cases["impl"].astype("string")
    failures = schema_failures(frame)
    if failures is None:
        return set()
    if isinstance(failures, str):
        return None
    index = failures["index"]
    if index.isna().any():  # a check of a whole column (a missing column, a dtype): no row to blame
        return None
    return {int(cases["_n"].iloc[int(i)]) for i in index}


def _plan_holds(meta: dict[str, Any], cases: list[str]) -> bool:
    """Every row is a case run.json lists, and a finished run has a row for each (resultsio's _check_plan)."""
    planned = meta.get("cases")
    if not isinstance(planned, list):
        return True
    listed = {str(c) for c in planned}
    if not set(cases) <= listed:
        return False
    return meta.get("status") not in FINISHED or listed <= set(cases)


def _files_missing(path: Path, meta: dict[str, Any], cases: list[str]) -> bool:
    """Whether a file a row rests on (resultsio.schema.required_files) is not in its folder: one listing a folder."""
    if not cases:
        return False
    listed: dict[str, set[str]] = {}
    for name in required_files(meta, cases, (path / "baseline.json").exists()):
        folder, _, file = name.partition("/")
        if folder not in listed:
            try:
                with os.scandir(path / folder) as it:
                    listed[folder] = {e.name for e in it if e.is_file()}
            except OSError:
                return True
        if file not in listed[folder]:
            return True
    return False


def check_tables(paths: list[Path]) -> tuple[dict[Path, RunInfo | Skipped], pd.DataFrame]:
    """The verdict on each folder from its run.json and cases.parquet, and the case rows of those drawn.

    What history draws comes from these two files only, so they are what is checked, with
    the results reader's own checks (resultsio): run.json against its model, the case
    table against the schema and against run.json's list of cases, and the files each row
    rests on being there. Not read: the histograms and history files themselves (no figure
    of the page draws them; ``bench report`` and ``bench gate`` check them when they read
    them) and cases.csv (the page reads the parquet). All tables are read in one DuckDB scan
    and validated as one frame; only a folder with a refused row is validated alone, for
    the problem's words.
    """
    verdicts: dict[Path, RunInfo | Skipped] = {}
    metas: dict[Path, dict[str, Any]] = {}
    for path in paths:
        problems: list[Problem] = []
        when = folder_time(path)
        if not (path / "run.json").is_file():
            verdicts[path] = Skipped(
                path, f"{path} is not a lockbench results folder (no run.json)", True, when
            )
            continue
        meta = read_meta_json(path, problems)
        when = folder_time(path, meta.get("started_at") if meta else None)
        if meta is None:
            fatal = problems[0]
            verdicts[path] = Skipped(path, str(fatal), damaged=fatal.kind != "version", when=when)
        elif problems:
            verdicts[path] = _damaged(path, problems, when)
        elif not (path / "cases.parquet").is_file():
            verdicts[path] = _no_parquet(path, when)
        else:
            metas[path] = meta
    files = {str(path / "cases.parquet"): path for path in metas}
    cases, bad = _read_parquet(list(files)) if files else (pd.DataFrame(), [])
    for name, why in bad:
        path = files[name]
        meta = metas.pop(path)
        verdicts[path] = Skipped(path, why, damaged=True, when=folder_time(path, meta.get("started_at")))
    numbers = {path: n for n, path in enumerate(metas)}
    if not cases.empty:
        cases["_folder"] = cases.pop("filename").map(lambda f: str(files.get(str(f), Path(f).parent)))
        by_key = {str(path): path for path in metas}
        cases = cases[cases["_folder"].isin(by_key)].reset_index(drop=True)
        cases["_n"] = cases["_folder"].map(lambda k: numbers[by_key[k]])
    failing = _failing_folders(cases) if len(cases) else set()
    ids = cases.groupby("_n", sort=False)["case"].agg(list).to_dict() if len(cases) else {}
    empty = pd.DataFrame({"case": pd.Series([], dtype="string")})
    for path, meta in metas.items():
        n = numbers[path]
        problems: list[Problem] = []
        cases_here = [str(c) for c in ids.get(n, []) if not pd.isna(c)]
        if (
            (failing is None or n in failing)
            or not _plan_holds(meta, cases_here)
            or _files_missing(path, meta, cases_here)
        ):
            # the resultsio checks themselves, on this folder alone, for the problem's words
            table = str(path / "cases.parquet")
            # its own file, not its rows of the union: a column it lacks must read as lacking, not empty
            try:
                frame = pd.read_parquet(table)
            except Exception:  # noqa: BLE001 - DuckDB read it a moment ago: changed since, read its rows
                rows = cases[cases["_n"] == n] if len(cases) else empty
                frame = rows.drop(columns=["_folder", "_n"], errors="ignore").reset_index(drop=True)
            if failing is None or n in failing:
                problems += _schema_problems(frame, table)
            _check_plan(path, meta, frame, table, problems)
            _check_files(path, meta, frame, problems)
        when = folder_time(path, meta.get("started_at"))
        verdicts[path] = _damaged(path, problems, when) if problems else _run_info(path, meta)
    drawn = {str(p) for p, v in verdicts.items() if isinstance(v, RunInfo)}
    if len(cases):
        cases = cases[cases["_folder"].isin(drawn)].drop(columns=["_n"]).reset_index(drop=True)
    return verdicts, cases


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
    return _run_info(path, meta)


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


def _newest_per_impl(runs: dict[str, RunInfo], cases: pd.DataFrame) -> list[Path]:
    """The newest drawn folder of each impl: the run ``--check`` speaks of ("the newest run is safe").

    Why these get every file checked (histograms decoded, history files opened, cases.csv
    against the parquet): the damage corpus (tests/test_damaged_results.py) must never be
    called safe, and a series' safety line is about its newest run; the older runs' figures
    come from their tables alone, which every folder has checked.
    """
    if cases.empty or "impl" not in cases.columns:
        return []
    when = {key: folder_time(info.path, info.started_at) for key, info in runs.items()}
    rows = pd.DataFrame({"impl": cases["impl"].astype(str), "_folder": cases["_folder"]})
    rows["_when"] = rows["_folder"].map(when)
    newest = rows.sort_values("_when", kind="stable").groupby("impl", sort=False)["_folder"].last()
    return [runs[key].path for key in dict.fromkeys(newest) if key in runs]


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
    checked = CheckedFolders(cache)
    verdicts: dict[Path, RunInfo | Skipped] = {}
    pending: dict[Path, Pending | None] = {}
    for path in folders:
        kept, pending[path] = checked.lookup(path)
        if kept is not None:
            verdicts[path] = kept
    fresh, fresh_cases = check_tables([p for p in folders if p not in verdicts])
    for path, info in fresh.items():
        checked.keep(pending[path], info)
    verdicts.update(fresh)
    runs: dict[str, RunInfo] = {}
    skipped: list[Skipped] = []
    for path in folders:
        info = verdicts[path]
        if isinstance(info, Skipped):
            skipped.append(info)
        else:
            runs[info.key] = info
    frames = [fresh_cases] if len(fresh_cases) else []
    kept_runs = {key: info for key, info in runs.items() if info.path not in fresh}
    if kept_runs:
        files = {str(info.path / "cases.parquet"): key for key, info in kept_runs.items()}
        kept_cases, bad = _read_parquet(list(files))
        for name, why in bad:
            info = runs.pop(files[name])
            skipped.append(
                Skipped(info.path, why, damaged=True, when=folder_time(info.path, info.started_at))
            )
        if not kept_cases.empty:
            kept_cases["_folder"] = kept_cases.pop("filename").map(
                lambda f: files.get(str(f), str(Path(f).parent))
            )
            frames.append(kept_cases[kept_cases["_folder"].isin(runs)])
    cases = (
        pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0] if frames else pd.DataFrame()
    )
    whole: set[Path] = set()
    while True:  # a newest run found damaged leaves the run before it the newest
        newest = [p for p in _newest_per_impl(runs, cases) if p not in whole]
        if not newest:
            break
        for path in newest:
            whole.add(path)
            if path in fresh or not checked.checked_whole(path):
                info = read_meta(path)  # every file, as bench report and bench gate read it
                checked.keep(checked.recheck(path), info, WHOLE)
                if isinstance(info, Skipped):
                    runs.pop(str(path), None)
                    skipped.append(info)
        if len(cases):
            cases = cases[cases["_folder"].isin(runs)]
    checked.save()
    if len(cases):
        cases = cases[cases["_folder"].isin(runs)]
        order = {key: i for i, key in enumerate(runs)}  # folder order, whichever scan a row came from
        cases = cases.iloc[cases["_folder"].map(order).argsort(kind="stable")].reset_index(drop=True)
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
