"""``read_results(path)``: one results folder, read once and checked against resultsio.schema.

Every reader of a results folder uses this: ``bench gate`` (any problem: exit 2, one line),
``bench report`` (a red banner; damaged rows read "unknown (damaged)"), ``bench history``
(a damaged run is skipped with a named warning) and the shard merge (refuses). It never
raises for damage: everything wrong is a :class:`Problem` in ``Results.problems``, naming
the file, the column, the cases and the fix, so each caller decides what damage means for
it. ``fatal`` problems are the ones that leave nothing to read (no run.json, run.json that
is not JSON or of another schema version, no case table at all).

JSON is parsed with pydantic-core's parser, which stops at a nesting depth of 200 with a
ValueError: 100,000 ``[`` in run.json is a damaged file, not a RecursionError.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pydantic
import pydantic_core

from resultsio.schema import (
    ALWAYS_COUNTED,
    COLUMNS,
    JSON_KIND,
    NUMBER_CHECKS,
    SCHEMA_VERSION,
    TABLE_CHECKS,
    TEXT_COLUMNS,
    RunMeta,
    non_finite,
    numbers,
    required_files,
    schema_failures,
    trial_group,
)

FIX_TABLE = "the file is damaged (re-create it with bench run, or restore the folder from a copy)"
FIX_RUN_JSON = "restore run.json from a copy, or re-create the run with bench run"
FIX_BASELINE = "re-create the baseline with bench baseline update"
FIX_HIST = "the file is damaged (re-create the run with bench run; its latencies are not trustworthy)"
#: run.json statuses of a run that ran every case it planned
FINISHED = ("complete", "complete-with-failures")
#: run.json fields that are models of their own (RunParams): a damaged field inside is named by its path
NESTED_MODELS = ("params",)
HISTOGRAM_FILE = re.compile(r"^(?P<case>.+?)(?P<merged>\.merged)?\.json$")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a results folder: where (file, column, cases), what, and how to fix it.

    Why a value and not an exception: the gate refuses on any problem, the report shows them
    all in a banner, history skips the run; one list serves each. ``cases`` is None when the
    whole folder is in doubt (every row is damaged), empty when no row is (a file beside them).
    """

    file: str
    what: str
    fix: str
    column: str = ""
    cases: tuple[str, ...] | None = ()
    fatal: bool = False
    #: "damage", or "version": a folder of another results schema, unreadable here but not damaged
    kind: str = "damage"

    @property
    def short(self) -> str:
        """The problem without its file and fix: what a damaged cell's reason says."""
        return f"{self.column} {self.what}".strip()

    def __str__(self) -> str:
        where = (f"{self.file}: " if self.column else f"{self.file} ") if self.file else ""
        return f"{where}{self.short}; {self.fix}" if self.fix else f"{where}{self.short}"


@dataclass
class Results:
    """A results folder as read: run.json, the case table, and every problem found in them.

    Why one record for every reader: the gate, the report, history and the merge must see
    the same rows and the same damage; each then decides what to do with ``problems``.
    ``meta`` is run.json with any field of the wrong type removed (its problem is listed);
    ``cases`` is cases.csv as read (text columns as strings), or cases.parquet when the CSV
    is missing or unreadable.
    """

    path: Path
    meta: dict[str, Any]
    cases: pd.DataFrame
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def fatal(self) -> list[Problem]:
        return [p for p in self.problems if p.fatal]

    def damaged_cases(self) -> set[str] | None:
        """Case ids resting on damaged data; None when every row does (a problem of the whole folder)."""
        out: set[str] = set()
        for problem in self.problems:
            if problem.cases is None:
                return None
            out.update(problem.cases)
        return out

    def marked(self) -> pd.DataFrame:
        """The case table for display: each damaged row's verdict ``unknown``, its reason ``damaged: ...``.

        (A damaged row whose verdict is ``invalid`` keeps it: a failure shown is never a false "safe".)

        Damaged cells are emptied (NaN), so no sum or chart uses them; rows without a case id
        and repeated case ids (after the first) are dropped. A clean folder's table is returned
        unchanged.
        """
        frame = self.cases
        if "case" not in frame.columns:
            # no row can be told apart from another (the reader named the missing column): none is shown
            return pd.DataFrame({"case": pd.Series([], dtype="string")})
        if frame.empty:
            return frame
        frame = frame[frame["case"].notna()]
        frame = frame[~frame["case"].astype(str).duplicated()].reset_index(drop=True)
        if not self.problems:
            return frame
        frame = frame.copy()
        ids = frame["case"].astype(str)
        reasons: dict[str, list[str]] = {}
        for problem in self.problems:
            rows = ids.index if problem.cases is None else ids.index[ids.isin(problem.cases)]
            for case in ids[rows]:
                reasons.setdefault(case, []).append(problem.short)
            if problem.column in frame.columns and problem.column not in TEXT_COLUMNS and len(rows):
                frame[problem.column] = numbers(frame[problem.column])
                frame.loc[rows, problem.column] = np.nan
        if not reasons:
            return frame
        damaged = ids.isin(reasons)
        for column in ("verdict", "verdict_reason"):
            frame[column] = (
                frame[column].astype("string")
                if column in frame
                else pd.Series(pd.NA, index=frame.index, dtype="string")
            )
        # a failure stays a failure (showing it cannot call anything safe); any other verdict is unknown
        failed = frame["verdict"].str.strip().str.lower().eq("invalid").fillna(False)
        frame.loc[damaged & ~failed, "verdict"] = "unknown"
        frame.loc[damaged, "verdict_reason"] = [
            "damaged: " + "; ".join(dict.fromkeys(reasons[c])) for c in ids[damaged]
        ]
        return frame


# JSON ---------------------------------------------------------------------------------------------


def parse_json(data: bytes | str) -> Any:
    """JSON with a depth limit (pydantic-core: 200 levels); ValueError for anything that is not JSON.

    NaN and Infinity are accepted as Python's json module writes them.
    """
    try:
        return pydantic_core.from_json(data, allow_inf_nan=True)
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - any parser failure is "not JSON", never a traceback
        raise ValueError(str(exc)) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:160]


def _read_meta(path: Path, problems: list[Problem]) -> dict[str, Any] | None:
    run_json = path / "run.json"
    name = str(run_json)
    try:
        raw = parse_json(run_json.read_bytes())
    except OSError as exc:
        problems.append(Problem(name, f"is not readable ({_first_line(exc)})", FIX_RUN_JSON, fatal=True))
        return None
    except ValueError as exc:
        problems.append(Problem(name, f"is not valid JSON ({_first_line(exc)})", FIX_RUN_JSON, fatal=True))
        return None
    if not isinstance(raw, dict):
        problems.append(Problem(name, "is not a JSON object", FIX_RUN_JSON, fatal=True))
        return None
    schema = raw.get("schema")
    if type(schema) is not int or schema != SCHEMA_VERSION:
        problems.append(
            Problem(
                "",
                f"{path} has results schema {schema!r}; this lockbench reads schema {SCHEMA_VERSION}",
                "re-create it with this version (bench run, then bench baseline update), or read it "
                "with the lockbench version that wrote it",
                fatal=True,
                kind="version",
            )
        )
        return None
    meta = dict(raw)
    try:
        RunMeta.model_validate(raw)
    except pydantic.ValidationError as exc:
        seen: set[str] = set()
        for error in exc.errors():
            loc = [str(part) for part in error["loc"]] or ["?"]
            nested = len(loc) > 1 and loc[0] in NESTED_MODELS
            key = ".".join(loc[:2]) if nested else loc[0]
            if key in seen:
                continue
            seen.add(key)
            value = raw.get(loc[0])
            if nested and isinstance(value, dict):
                value = value.get(loc[1])
            if error["type"] == "literal_error":
                wanted = error.get("ctx", {}).get("expected", "one of the known values")
                what = f"is damaged: {key} must be one of {wanted}, got {value!r:.60}"
            else:
                kind = JSON_KIND.get(error["type"]) or JSON_KIND.get(_outer_type(loc[0]), "value")
                what = f"is damaged: {key} must be a JSON {kind}, got {value!r:.60}"
            problems.append(Problem(name, what, FIX_RUN_JSON, cases=None))
            if nested and isinstance(meta.get(loc[0]), dict):
                meta[loc[0]] = {k: v for k, v in meta[loc[0]].items() if k != loc[1]}
            else:
                meta.pop(loc[0], None)
    for where, number in non_finite(raw):
        problems.append(
            Problem(
                name,
                f"is damaged: {where} is {number} (a figure must be a finite number)",
                FIX_RUN_JSON,
                cases=None,
            )
        )
    return meta


def _outer_type(key: str) -> str:
    annotation = str(RunMeta.model_fields[key].annotation) if key in RunMeta.model_fields else ""
    return "list_type" if annotation.startswith("list") else "dict_type" if "dict" in annotation else ""


def _check_baseline_json(path: Path, meta: dict[str, Any], problems: list[Problem]) -> None:
    """A baseline folder's baseline.json parses and agrees with its run.json (schema, machine class)."""
    info_path = path / "baseline.json"
    if not info_path.exists():
        return
    name = str(info_path)
    try:
        info = parse_json(info_path.read_bytes())
    except (OSError, ValueError) as exc:
        problems.append(Problem(name, f"is not valid JSON ({_first_line(exc)})", FIX_BASELINE))
        return
    if not isinstance(info, dict):
        problems.append(Problem(name, "is not a JSON object", FIX_BASELINE))
        return
    host = meta.get("host") if isinstance(meta.get("host"), dict) else {}
    for key, theirs in (("machine_class", host.get("machine_class")), ("schema", meta.get("schema"))):
        if key in info and info[key] != theirs:
            problems.append(
                Problem(
                    name,
                    f"says {key} {info[key]!r} but its run.json says {theirs!r}: the baseline folder was "
                    "edited or mixed up",
                    FIX_BASELINE,
                )
            )
    if "machine_class" not in info:
        problems.append(Problem(name, "records no machine_class", FIX_BASELINE))


# the case table ---------------------------------------------------------------------------------


def _read_csv(csv: Path, problems: list[Problem]) -> pd.DataFrame | None:
    name = str(csv)
    try:
        if csv.stat().st_size == 0:
            problems.append(
                Problem(name, "is empty (0 bytes; bench writes at least a header)", FIX_TABLE, cases=None)
            )
            return None
        return pd.read_csv(csv, dtype=dict.fromkeys(TEXT_COLUMNS, "string"))
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        problems.append(
            Problem(
                name, f"is not readable ({type(exc).__name__}: {_first_line(exc)})", FIX_TABLE, cases=None
            )
        )
        return None


def _read_parquet(parquet: Path, problems: list[Problem]) -> pd.DataFrame | None:
    try:
        return pd.read_parquet(parquet)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises assorted errors on a damaged file
        problems.append(
            Problem(
                str(parquet),
                f"is not readable ({type(exc).__name__}: {_first_line(exc)})",
                FIX_TABLE,
                cases=None,
            )
        )
        return None


def _cases_of(frame: pd.DataFrame, index: Any) -> tuple[str, ...]:
    if "case" not in frame.columns:
        return ()
    rows = [i for i in index if i in frame.index]
    return tuple(str(c) for c in frame.loc[rows, "case"].dropna().astype(str).drop_duplicates())


def _name_rows(frame: pd.DataFrame, index: list[Any]) -> str:
    cases = _cases_of(frame, index)
    if not cases:
        lines = ", ".join(str(int(i) + 2) for i in index[:3] if isinstance(i, int | np.integer))
        return f"in line {lines} (no case id)" if lines else ""
    more = f" (+{len(cases) - 1} more)" if len(cases) > 1 else ""
    return f"in case {cases[0]}{more}"


_NULL_TEXT = {
    ALWAYS_COUNTED: "is empty (NaN), though every checker counts it",
    "case": "is empty: a row has no case id",
}


def _schema_problems(frame: pd.DataFrame, file: str) -> list[Problem]:
    """Validate ``frame`` against the schema; each failed check (per column) is one Problem.

    A table that passes every check is told so without pandera (resultsio.schema.doubtful);
    pandera names the failed cells of one that does not, under the declarations it may fail.
    """
    failures = schema_failures(frame)
    if failures is None:
        return []
    if isinstance(failures, str):  # pragma: no cover - lazy validation collects them
        return [Problem(file, f"does not match the schema ({failures})", FIX_TABLE, cases=None)]
    declared = list(COLUMNS)
    order = {c: i for i, c in enumerate(frame.columns)}
    found: list[tuple[tuple[Any, ...], Problem]] = []
    missing = sorted(
        str(f) for f in failures.loc[failures["check"] == "column_in_dataframe", "failure_case"].dropna()
    )
    if missing:
        found.append(((0,), Problem(file, f"lacks column(s) {', '.join(missing)}", FIX_TABLE, cases=None)))
    rest = failures[failures["check"] != "column_in_dataframe"]
    table = rest["check"].astype(str).isin(_table_checks())
    # a check of the whole table is reported once per column by pandera: one problem per check
    keys = rest["column"].astype(str).where(~table, "")
    for (column, check), rows in rest.groupby([keys, rest["check"].astype(str)], sort=False, dropna=False):
        index = list(dict.fromkeys(i for i in rows["index"].tolist() if i is not None and not pd.isna(i)))
        if check in NUMBER_CHECKS and column in frame.columns:
            column_rank = (
                declared.index(column) if column in declared else len(declared) + order.get(column, 0)
            )
            for sub, (what, labels) in enumerate(NUMBER_CHECKS[check].reasons(frame[column])):
                cases = _cases_of(frame, labels)
                text = f"{what} {_name_rows(frame, labels)}".strip()
                problem = Problem(file, text, FIX_TABLE, column=column, cases=cases if cases else None)
                found.append(((1, column_rank, sub), problem))
            continue
        if check in _table_checks():
            column, what = check.split("|", 1)
            rank: tuple[Any, ...] = (
                3,
                [t.split("|", 1)[1] for t in _table_checks()].index(what),
                order.get(column, 0),
            )
        else:
            if check == "not_nullable":
                what, sub = _NULL_TEXT.get(column, "is empty (NaN)"), -2
            elif check == "field_uniqueness":
                what, sub = "appears more than once (one row per case and trial)", -1
            elif check.startswith("dtype(") or check.startswith("coerce_dtype("):
                what, sub = "is not a number", 0
            else:
                what = check
                number = rows["check_number"].dropna()
                sub = int(number.iloc[0]) if len(number) else 0
            column_rank = (
                declared.index(column) if column in declared else len(declared) + order.get(column, 0)
            )
            rank = (1, column_rank, sub)
        cases = _cases_of(frame, index)
        where = _name_rows(frame, index)
        text = f"{what} {where}".strip()
        found.append((rank, Problem(file, text, FIX_TABLE, column=column, cases=cases if cases else None)))
    found.sort(key=lambda item: item[0])
    return [p for _, p in found]


def _table_checks() -> list[str]:
    return [f"{t.column}|{t.error}" for t in TABLE_CHECKS]


def _cell(value: Any) -> float | str:
    """A cell as the CSV and the parquet file both can hold it: a float, or stripped text ("" when empty)."""
    if value is None or value is pd.NA:
        return ""
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | float | np.integer | np.floating):
        return "" if value != value else float(value)
    text = str(value).strip()
    if text.lower() in ("nan", "none", "<na>", ""):
        return ""
    if text.lower() in ("true", "false"):
        return text.lower()
    try:
        return float(text)
    except ValueError:
        return text


def _same(a: Any, b: Any) -> bool:
    x, y = _cell(a), _cell(b)
    if isinstance(x, float) and isinstance(y, float):
        return x == y or math.isclose(x, y, rel_tol=1e-9, abs_tol=0.0)
    return x == y


def _compare(csv: pd.DataFrame, parquet: pd.DataFrame, file: str) -> list[Problem]:
    """cases.parquet must hold what cases.csv holds: the same cases in the same order, cell by cell."""
    if list(csv.columns) and sorted(csv.columns) != sorted(parquet.columns):
        only = sorted(set(csv.columns) ^ set(parquet.columns))
        return [
            Problem(
                file,
                f"cases.parquet and cases.csv disagree: column(s) {', '.join(only[:4])} in only one of them",
                FIX_TABLE,
                cases=None,
            )
        ]
    if len(csv) != len(parquet) or (
        "case" in csv and list(csv["case"].astype(str)) != list(parquet["case"].astype(str))
    ):
        return [
            Problem(
                file,
                f"cases.parquet and cases.csv disagree: {len(parquet)} vs {len(csv)} rows, or other case ids",
                FIX_TABLE,
                column="case",
                cases=None,
            )
        ]
    problems = []
    csv, parquet = csv.reset_index(drop=True), parquet.reset_index(drop=True)
    for column in csv.columns:
        # cell by cell in Python: a few hundred rows, and pandas' per-column overhead cost more
        same = [_same(a, b) for a, b in zip(csv[column].tolist(), parquet[column].tolist(), strict=True)]
        if not all(same):
            index = [i for i, ok in enumerate(same) if not ok]
            problems.append(
                Problem(
                    file,
                    f"differs between cases.parquet and cases.csv {_name_rows(csv, index)}",
                    FIX_TABLE,
                    column=column,
                    cases=_cases_of(csv, index) or None,
                )
            )
    return problems


# files beside the table ---------------------------------------------------------------------------


def _inside(base: Path, name: str) -> Path | None:
    """``base/name`` when it stays inside ``base`` (a case id is data: never a path out of the folder)."""
    candidate = (base / name).resolve()
    return candidate if candidate.parent == base.resolve() else None


FIX_FILES = "a file the run wrote is gone (restore the folder from a copy, or re-create it with bench run)"


def _check_files(path: Path, meta: dict[str, Any], frame: pd.DataFrame, problems: list[Problem]) -> None:
    """The files every row rests on are there (resultsio.schema.required_files), and hist/, history/ are folders.

    One problem per missing folder, or per kind of missing file (the first named, the count
    beside it), each with every case resting on it: a gate must not judge, nor a report
    draw, a case whose histograms or history are gone.
    """
    if "case" not in frame.columns:
        return
    cases = list(dict.fromkeys(frame["case"].dropna().astype(str)))
    if not cases:
        return
    baseline = (path / "baseline.json").exists()
    broken: set[str] = set()
    for folder in ("hist",) if baseline else ("hist", "history"):
        where = path / folder
        if where.is_dir():
            continue
        broken.add(folder)
        what = "is a file, not a folder" if where.exists() else "is missing"
        problems.append(
            Problem(
                f"{where}/",
                f"{what}: every case's {'histograms' if folder == 'hist' else 'history files'} belong in it",
                FIX_FILES,
                cases=None,
            )
        )
    missing: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for name, resting in required_files(meta, cases, baseline).items():
        folder, _, file = name.partition("/")
        if folder in broken:
            continue
        target = _inside(path / folder, file)
        if target is not None and target.is_file():
            continue
        kind = "merged histograms" if file.endswith(".merged.json") else folder
        missing.setdefault(kind, []).append((name, resting))
    for kind, files in missing.items():
        first, _ = files[0]
        more = f" (+{len(files) - 1} more in {first.split('/')[0]}/)" if len(files) > 1 else ""
        resting = tuple(dict.fromkeys(c for _, cs in files for c in cs))
        what = {
            "hist": "is missing: the case's histograms",
            "history": "is missing: the case's history (every lock operation)",
            "merged histograms": "is missing: every trial's histograms merged",
        }[kind]
        problems.append(Problem(f"{path}/{first}", f"{what}{more}", FIX_FILES, cases=resting))


def _check_histograms(path: Path, frame: pd.DataFrame, problems: list[Problem]) -> None:
    from hdrh.histogram import HdrHistogram

    hist = path / "hist"
    if not hist.is_dir():
        return
    groups: dict[str, list[str]] = {}
    if "case" in frame.columns:
        for case in frame["case"].dropna().astype(str):
            groups.setdefault(trial_group(case), []).append(case)
    for file in sorted(hist.glob("*.json")):
        match = HISTOGRAM_FILE.match(file.name)
        if not match:
            continue
        case = match["case"]
        cases = tuple(groups.get(case, [])) if match["merged"] else (case,)
        name = f"{path}/hist/{file.name}"
        try:
            data = parse_json(file.read_bytes())
        except (OSError, ValueError) as exc:
            problems.append(Problem(name, f"is unreadable ({_first_line(exc)})", FIX_HIST, cases=cases))
            continue
        encoded = data.get("histograms") if isinstance(data, dict) else None
        if not isinstance(encoded, dict):
            problems.append(
                Problem(name, "is not a histogram file (no histograms object)", FIX_HIST, cases=cases)
            )
            continue
        for hname, text in encoded.items():
            try:
                if not isinstance(text, str):
                    raise ValueError("not a base64 string")
                decoded = HdrHistogram.decode(text)
                if decoded is None or decoded.get_total_count() < 0:
                    raise ValueError("no histogram")
            except Exception as exc:  # noqa: BLE001 - hdrh raises assorted errors on bad input
                problems.append(
                    Problem(
                        name,
                        f"histogram {hname} does not decode ({type(exc).__name__})",
                        FIX_HIST,
                        cases=cases,
                    )
                )
                break


def _check_histories(path: Path, frame: pd.DataFrame, problems: list[Problem]) -> None:
    import pyarrow.parquet as pq

    base = path / "history"
    if not base.is_dir() or "case" not in frame.columns:
        return
    for case in frame["case"].dropna().astype(str).drop_duplicates():
        file = _inside(base, f"{case}.parquet")
        if file is None or not file.is_file():
            continue
        try:
            pq.read_schema(file)
        except Exception as exc:  # noqa: BLE001 - any damage to the file, whatever pyarrow calls it
            problems.append(
                Problem(
                    f"{path}/history/{case}.parquet",
                    f"is unreadable ({type(exc).__name__})",
                    "the file is damaged (re-create the run with bench run)",
                    cases=(case,),
                )
            )


# the reader -------------------------------------------------------------------------------------


def read_results(path: Path | str) -> Results:
    """Read a results folder (a run or a baseline) and check it against the schema; never raises for damage."""
    path = Path(path)
    problems: list[Problem] = []
    empty = pd.DataFrame({"case": pd.Series([], dtype="string")})
    if path.exists() and not path.is_dir():
        problems.append(
            Problem(
                "",
                f"{path} is a file, not a results folder",
                "give the run's folder (the one with run.json)",
                fatal=True,
            )
        )
        return Results(path, {}, empty, problems)
    if not path.is_dir():
        problems.append(Problem("", f"results folder not found: {path}", "", fatal=True))
        return Results(path, {}, empty, problems)
    if not (path / "run.json").is_file():
        problems.append(
            Problem("", f"{path} is not a lockbench results folder (no run.json)", "", fatal=True)
        )
        return Results(path, {}, empty, problems)
    meta = _read_meta(path, problems)
    if meta is None:
        return Results(path, {}, empty, problems)
    _check_baseline_json(path, meta, problems)

    csv_path, parquet_path = path / "cases.csv", path / "cases.parquet"
    if not csv_path.is_file() and not parquet_path.is_file():
        problems.append(
            Problem("", f"{path} is incomplete: no cases.csv", "re-create it with bench run", fatal=True)
        )
        return Results(path, meta, empty, problems)
    csv = _read_csv(csv_path, problems) if csv_path.is_file() else None
    if not csv_path.is_file():
        problems.append(Problem(str(csv_path), "is missing (cases.parquet is there)", FIX_TABLE, cases=None))
    parquet = _read_parquet(parquet_path, problems) if parquet_path.is_file() else None
    table_file = str(csv_path) if csv is not None else str(parquet_path)
    frame = csv if csv is not None else parquet if parquet is not None else empty
    if len(frame):
        problems += _schema_problems(frame, table_file)
    _check_plan(path, meta, frame, table_file, problems)
    if csv is not None and parquet is not None:
        problems += _compare(csv, parquet, str(parquet_path))
    _check_files(path, meta, frame, problems)
    _check_histograms(path, frame, problems)
    _check_histories(path, frame, problems)
    return Results(path, meta, frame.reset_index(drop=True), problems)


def _check_plan(
    path: Path, meta: dict[str, Any], frame: pd.DataFrame, file: str, problems: list[Problem]
) -> None:
    """Case ids against run.json ``cases``: no row that run.json does not list; no listed case without a row."""
    planned = meta.get("cases")
    if not isinstance(planned, list) or "case" not in frame.columns:
        return
    listed = {str(c) for c in planned}
    ids = frame["case"].dropna().astype(str)
    strangers = list(dict.fromkeys(c for c in ids if c not in listed))
    if strangers:
        more = f" (+{len(strangers) - 1} more)" if len(strangers) > 1 else ""
        problems.append(
            Problem(
                file,
                f"case {strangers[0]}{more} is not in run.json's cases (a renamed id, or a row of another run)",
                FIX_TABLE,
                column="case",
                cases=tuple(strangers),
            )
        )
    absent = [str(c) for c in planned if str(c) not in set(ids)]
    if absent and meta.get("status") in FINISHED:
        shown = ", ".join(absent[:3]) + (", ..." if len(absent) > 3 else "")
        problems.append(
            Problem(
                "",
                f"{path} is incomplete: {len(absent)} case(s) in run.json have no row in "
                f"{Path(file).name} ({shown}), though run.json says {meta.get('status')}",
                "the rows are missing; re-create the run with bench run",
                cases=None,  # a missing row may have been the failing one: no row of the run is trusted
            )
        )
